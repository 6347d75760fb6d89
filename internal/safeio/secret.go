package safeio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// MaxSecretBytes bounds a secret file. Passwords, tokens and private keys
// (an RSA-8192 key in PEM is about 6.5 KiB) are far smaller; anything larger
// is not what the config says it is.
const MaxSecretBytes = 64 << 10

// SecretError says why a file may not hold a secret and how to fix it.
type SecretError struct {
	Path    string
	Problem string // what is wrong, e.g. "has mode 0644: group and others can read it"
	Fix     string // the command to run, or what to do when no command fits
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("%s %s; a file holding a secret must be a regular file owned by %s and readable by its owner only: %s",
		e.Path, e.Problem, secretOwnerName(), e.Fix)
}

// secretOwner is the uid a secret file must belong to: root for the system
// daemon, the running user for `mailctl dev` and tests that run unprivileged.
func secretOwner() int { return os.Geteuid() }

func secretOwnerName() string {
	uid := secretOwner()
	if uid == 0 {
		return "root"
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}

// sudo prefixes a command the operator runs: root's files need root.
func sudo(cmd string) string {
	if secretOwner() == 0 {
		return "sudo " + cmd
	}
	return cmd
}

// ReadSecret reads a file that holds a secret (a password, a private key)
// the way input is read: opened without following a symbolic link and
// without blocking on a FIFO, checked on the open descriptor (a regular
// file, owned by the running user — root for the daemon — with no group or
// other permission bits), bounded by MaxSecretBytes, then read. A file that
// breaks a rule is refused with a *SecretError naming the command that
// fixes it; nothing of it is read.
func ReadSecret(path string) ([]byte, error) {
	f, err := openSecret(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > MaxSecretBytes {
		return nil, tooLarge(path)
	}
	return b, nil
}

// CheckSecret applies ReadSecret's rules to path without reading it.
func CheckSecret(path string) error {
	f, err := openSecret(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func tooLarge(path string) error {
	return &SecretError{Path: path, Problem: fmt.Sprintf("is larger than %d KiB", MaxSecretBytes>>10),
		Fix: "point the config key at the file that holds only the secret"}
}

// openSecret opens path and checks the descriptor against the rules.
func openSecret(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, &SecretError{Path: path, Problem: "is a symbolic link (secrets are opened without following links, so a link cannot point the daemon at another file)",
				Fix: "point the config key at the file itself, not a link (certbot's live/ names are links: the deploy hook in docs/setup.md copies the pair into /etc/mailctl/tls/)"}
		}
		return nil, err
	}
	if err := checkSecretFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkSecretFile(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return &SecretError{Path: path, Problem: "is not a regular file", Fix: "point the config key at a regular file"}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("safeio: no owner information for " + path)
	}
	var problems, fixes []string
	if want := secretOwner(); int(st.Uid) != want {
		problems = append(problems, fmt.Sprintf("belongs to uid %d", st.Uid))
		owner := "root:root"
		if want != 0 {
			owner = secretOwnerName() + ":"
		}
		fixes = append(fixes, "sudo chown "+owner+" "+path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		problems = append(problems, fmt.Sprintf("has mode %04o: %s can read or change it", perm, whoElse(perm)))
		fixes = append(fixes, sudo("chmod 600 "+path))
	}
	if len(problems) > 0 {
		e := &SecretError{Path: path, Problem: problems[0], Fix: "run `" + fixes[0] + "`"}
		if len(problems) == 2 {
			e.Problem += " and " + problems[1]
			e.Fix = "run `" + fixes[0] + " && " + fixes[1] + "`"
		}
		return e
	}
	if fi.Size() > MaxSecretBytes {
		return tooLarge(path)
	}
	return nil
}

// whoElse names the classes a mode lets in beside the owner.
func whoElse(perm fs.FileMode) string {
	switch {
	case perm&0o070 != 0 && perm&0o007 != 0:
		return "group and others"
	case perm&0o070 != 0:
		return "its group"
	default:
		return "others"
	}
}
