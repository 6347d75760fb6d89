package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// cmdReload makes a daemon re-read its config and says whether it did: it
// finds the daemon's control socket, checks that the process answering
// there is PID, sends SIGHUP (so the unit's ExecReload needs no kill(1)),
// and waits for the daemon to report the reload it made.
func cmdReload(args []string) int {
	fs := newFlagSet("reload", "reload PID [--socket PATH] [--timeout 10s]", `Makes the daemon with process id PID (mailctl serve, or mailctl dev) re-read its
config, as SIGHUP does, and reports what the daemon did: the keys it applied,
those that wait for a restart, the declared mailboxes it does not serve (and
why) and the DKIM keys it signs with now, or why it refused the file (the running config is then kept). It exits 0 only when the daemon reloaded. The systemd unit runs
it as ExecReload (mailctl reload $MAINPID), so `+"`sudo systemctl reload mailctl`"+`
works on any system and fails when the config does not load.

The daemon's control socket is --socket, else $MAILCTL_SOCKET, else the one
process PID listens on, else the config's. PID must be the daemon answering
there: nothing else is signalled. Given no PID, it signals nothing and names the
daemon answering on the socket, with the line that reloads it.`)
	socket := fs.String("socket", "", "the daemon's control socket (default: $MAILCTL_SOCKET, then the one PID listens on)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the daemon to report the reload")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return usageError(fs, "%s", withoutPID(*socket))
	}
	if fs.NArg() != 1 {
		return usageError(fs, "give the daemon's process id (systemd passes $MAINPID)")
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil || pid <= 1 {
		return usageError(fs, "%q is not a daemon's process id", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	sock, before, err := daemonOf(ctx, pid, *socket)
	if err != nil {
		return failure(fs, err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return failure(fs, fmt.Errorf("signalling %d: %w", pid, err))
	}
	seen := 0
	if before.Reload != nil {
		seen = before.Reload.Count
	}
	for {
		now, err := protocol.VersionAt(ctx, sock)
		if err == nil && now.Reload != nil && now.Reload.Count > seen {
			return reportReload(pid, now.Reload)
		}
		select {
		case <-ctx.Done():
			return failure(fs, fmt.Errorf("signalled %d, but it reported no reload within %s (its log may say why)", pid, *timeout))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// withoutPID is the answer to a reload given no process id: nothing is
// signalled (the id is what ties the signal to the daemon the operator
// means), but the daemon answering on the socket is named with the line
// that reloads it, since without systemd nothing passes $MAINPID.
func withoutPID(named string) string {
	const unit = "under systemd, `sudo systemctl reload mailctl` passes it"
	sock := cmp.Or(named, os.Getenv("MAILCTL_SOCKET"))
	if sock == "" {
		sock = protocol.DefaultSocket
		if cfg, err := config.Load(configPath("")); err == nil {
			sock = cfg.Paths.Socket
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := protocol.VersionAt(ctx, sock)
	if err != nil || v.PID <= 1 {
		return fmt.Sprintf("give the daemon's process id (%s); no daemon answers at %s, so none is named here", unit, sock)
	}
	if v.Dev {
		return fmt.Sprintf("give the daemon's process id: the dev daemon answering at %s is process %d, reloaded with `mailctl reload %d`; nothing was signalled", sock, v.PID, v.PID)
	}
	return fmt.Sprintf("give the daemon's process id: the daemon answering at %s is process %d, reloaded with `sudo mailctl reload %d` (%s); nothing was signalled", sock, v.PID, v.PID, unit)
}

// reportReload prints what the daemon said of its reload and returns the
// exit code: 0 only when it reloaded.
func reportReload(pid int, r *protocol.ReloadStatus) int {
	if !r.OK {
		why := inert(cmp.Or(r.Error, "the daemon's log says why"))
		fmt.Fprintf(stderr, "mailctl reload: the daemon (pid %d) refused the config and keeps running the one it had: %s\n", pid, why)
		return 1
	}
	switch {
	case len(r.Applied) > 0:
		fmt.Fprintf(stdout, "reloaded (pid %d): applied %s\n", pid, inert(strings.Join(r.Applied, ", ")))
	case len(r.Pending) > 0:
		// Settings did change: none of them is one a reload applies.
		fmt.Fprintf(stdout, "reloaded (pid %d): nothing applied now\n", pid)
	default:
		fmt.Fprintf(stdout, "reloaded (pid %d): no setting changed\n", pid)
	}
	if len(r.Pending) > 0 {
		fmt.Fprintf(stdout, "changed but applied only at a restart: %s; restart with %s, or restart mailctl dev\n", inert(strings.Join(r.Pending, ", ")), protocol.RestartLine())
	}
	for _, p := range r.NotServed {
		fmt.Fprintf(stdout, "declared in the config but not served: %s; fix its [[mailboxes]] table, then reload\n", inert(p))
	}
	switch {
	case r.DKIMKeys == nil: // a daemon that does not say
	case len(r.DKIMKeys) == 0:
		fmt.Fprintln(stdout, "DKIM keys: none, so outbound mail goes unsigned and is likely refused (mailctl dkim keygen, then reload)")
	default:
		fmt.Fprintf(stdout, "DKIM keys signing: %s\n", inert(strings.Join(r.DKIMKeys, ", ")))
	}
	return 0
}

// daemonOf finds the control socket of the daemon with process id pid and
// its version answer there: the socket named (flag, then $MAILCTL_SOCKET),
// else the sockets pid listens on, else the config's and the default. The
// process answering must be pid.
func daemonOf(ctx context.Context, pid int, named string) (string, protocol.VersionInfo, error) {
	candidates := []string{cmp.Or(named, os.Getenv("MAILCTL_SOCKET"))}
	if candidates[0] == "" {
		candidates = listeningSockets(pid)
		if cfg, err := config.Load(configPath("")); err == nil {
			candidates = append(candidates, cfg.Paths.Socket)
		}
		candidates = append(candidates, protocol.DefaultSocket)
	}
	for _, sock := range candidates {
		v, err := protocol.VersionAt(ctx, sock)
		if err != nil {
			continue
		}
		if v.PID != pid {
			return "", v, fmt.Errorf("the daemon at %s is process %d, not %d: nothing signalled (give that daemon's process id, or the other daemon's socket with --socket)", sock, v.PID, pid)
		}
		return sock, v, nil
	}
	return "", protocol.VersionInfo{}, fmt.Errorf("process %d is no mailctl daemon answering at %s, so its reload could not be confirmed and nothing was signalled (name the daemon's socket with --socket)",
		pid, strings.Join(candidates, " or "))
}

// listeningSockets are the paths of the Unix sockets process pid listens
// on, from its descriptors and /proc/net/unix (readable for one's own
// processes, and root's).
func listeningSockets(pid int) []string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil {
			if in, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(in, "]")] = true
			}
		}
	}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path; Flags 00010000
		// is a listening socket.
		fields := strings.Fields(sc.Text())
		if len(fields) == 8 && fields[3] == "00010000" && inodes[fields[6]] && strings.HasPrefix(fields[7], "/") {
			out = append(out, fields[7])
		}
	}
	return out
}
