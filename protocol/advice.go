package protocol

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// DevConfigHeader starts the config file `mailctl dev` writes beside its
// socket, which is how a client tells a stopped dev instance from the
// system's daemon.
const DevConfigHeader = "# Written by mailctl dev"

// startAdvice says how to start the daemon that should answer at socket: a
// `mailctl dev` instance, whose config.toml and bin/mailctl sit beside its
// socket, is started again with its own binary and the same folder and
// address; any other socket is the system's daemon (or a dev to start).
func startAdvice(socket string) string {
	dir := filepath.Dir(socket)
	if cfg := devConfig(dir); cfg != nil {
		flags := " dev --dir " + ShellQuote(dir)
		if m := devListenRE.FindSubmatch(cfg); m != nil && string(m[1]) != "127.0.0.1:2525" {
			flags += " --smtp " + string(m[1])
		}
		if m := devDomainRE.FindSubmatch(cfg); m != nil && string(m[1]) != "mailctl.test" {
			flags += " --domain " + string(m[1])
		}
		return "it is the socket of a mailctl dev instance that is not running: start it again with `" +
			ShellQuote(filepath.Join(dir, "bin", "mailctl")) + flags + "` (the binary its banner names), or `go run ./cmd/mailctl" + flags + "` in the source tree"
	}
	return "start it with `" + StartCommand() + "`, or run `mailctl dev` and set MAILCTL_SOCKET to the socket it prints"
}

// SystemdRuns reports whether systemd is this host's init, as sd_booted(3)
// tells: the directory it makes at boot exists. A variable, so that a test
// can have either host.
var SystemdRuns = func() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// StartCommand is the line that starts the system's daemon on this host:
// the unit's where systemd runs, else the daemon itself, as root, under
// whatever supervises processes there (docs/operations.md, "Without
// systemd"; TestStartCommandFitsTheInit).
func StartCommand() string {
	if SystemdRuns() {
		return "sudo systemctl start mailctl"
	}
	return "sudo mailctl serve"
}

// LogsHint says where the system daemon's log is on this host.
func LogsHint() string {
	if SystemdRuns() {
		return "logs: journalctl -u mailctl"
	}
	return "logs: its standard error, wherever what started it keeps that"
}

// The lines below are phrases for a hint, their commands in backticks: where
// systemd is not the init, reloading or stopping the daemon takes its
// process id, which a line cannot know (docs/operations.md, "Without
// systemd"; TestEveryHintFitsTheInit).
const pidIs = "PID being the daemon's, which `sudo mailctl reload` without it names"

// ReloadLine says how the system's daemon re-reads its config on this host:
// the unit's reload (its ExecReload is `mailctl reload $MAINPID`), else that
// command given the process id.
func ReloadLine() string {
	if SystemdRuns() {
		return "`sudo systemctl reload mailctl`"
	}
	return "`sudo mailctl reload PID` (" + pidIs + ")"
}

// RestartLine says how the system's daemon is restarted on this host: by
// the unit, else by stopping it as StopLine says and, once it has exited
// (it holds its lock until then), starting it again as StartCommand says.
func RestartLine() string {
	if SystemdRuns() {
		return "`sudo systemctl restart mailctl`"
	}
	return "`sudo kill PID` (" + pidIs + "; SIGTERM drains it) and, once it has exited, `" + StartCommand() + "` again"
}

// StopLine says how the system's daemon is stopped on this host: by the
// unit, else by SIGTERM, which drains it and ends it.
func StopLine() string {
	if SystemdRuns() {
		return "`sudo systemctl stop mailctl`"
	}
	return "`sudo kill PID` (" + pidIs + "; SIGTERM drains it and ends it)"
}

// LogsLine says where the system daemon's log is on this host, narrowed to
// the lines with term when it is not empty: the journal, else the daemon's
// standard error, which whatever started it keeps (or not).
func LogsLine(term string) string {
	if SystemdRuns() {
		if term == "" {
			return "`sudo journalctl -u mailctl`"
		}
		return "`sudo journalctl -u mailctl -g " + ShellQuote(term) + "`"
	}
	if term == "" {
		return "the daemon's standard error (wherever what started it keeps that)"
	}
	return "the daemon's standard error (wherever what started it keeps that; `grep " + ShellQuote(term) + "` in it)"
}

// What advice takes from a dev config: only an address and a domain, in
// characters that need no quoting.
var (
	devListenRE = regexp.MustCompile(`(?m)^listen = \["([0-9A-Za-z.:\[\]-]+)"`)
	devDomainRE = regexp.MustCompile(`(?m)^domains = \["([0-9A-Za-z.-]+)"`)
)

// devConfig is the start of dir/config.toml when `mailctl dev` wrote it, or
// nil. Only a regular file is read, and at most 4 KiB of it. The folder may
// be shared (a socket in /tmp), so the open must not wait on a FIFO someone
// planted there, nor take a terminal.
func devConfig(dir string) []byte {
	f, err := os.OpenFile(filepath.Join(dir, "config.toml"), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	if !bytes.HasPrefix(b, []byte(DevConfigHeader)) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "mailctl")); err != nil {
		return nil
	}
	return b
}

// ShellQuote quotes s for a POSIX shell, leaving it bare when it needs no
// quoting (a path, a number, an address).
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// GiveMailboxCommand is the shell command an operator runs, as root, to give
// the mailbox folder at path and the mail in it to owner (OWNER[:GROUP])
// when they belong to someone else (a restore, a changed owner line):
// `mailctl mailboxes give`. It is not chown -R: the folder's present owner
// may have put in it a hard link to a file outside the mailbox (theirs, or
// root's where fs.protected_hardlinks is 0), which chown -R would give away
// with the mail. Nor is it find … -execdir chown, whose chown takes each
// name again after find looked at it: that owner could swap the file in
// between for such a link. The command gives each folder and file of one
// link through the descriptor it looked at it by, follows no symbolic link
// and enters no mount (internal/give, TestFolderGivesNoFileSwappedForAHardLink).
func GiveMailboxCommand(owner, path string) string {
	folder := ShellQuote(path)
	if strings.HasPrefix(path, "-") {
		folder = "-- " + folder // not a flag
	}
	return "mailctl mailboxes give --to " + ShellQuote(owner) + " " + folder
}
