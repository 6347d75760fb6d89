package safeio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
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
// the way input is read: opened without following a symbolic link that
// anyone but root (or the secret's owner) could change, nor through a
// directory anyone else could change (untrustedWay), without blocking
// on a FIFO, checked on the open descriptor (a regular
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

// openSecret opens path and checks the descriptor against the rules. A
// symbolic link is followed only when no one but root or the secret's owner
// could have made or changed it (trustedTarget): certbot's live/ names are
// such links.
func openSecret(path string) (*os.File, error) {
	real := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if real, err = trustedTarget(path); err != nil {
			return nil, err
		}
	} else if err == nil && secretOwner() == 0 {
		// Named itself, root's secret is still found through its
		// directories: whoever else may change one of them could put a
		// link to a directory of root's (or a hard link of another of
		// root's files) where the secret is. (Under mailctl dev the files
		// a link could lead to are the user's own, who may keep a project
		// in a folder its group writes.)
		_, d, why, err := untrustedWay(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		if d != "" {
			return nil, &SecretError{Path: path, Problem: fmt.Sprintf("is reached through %s, which %s: another user could swap what is below it for a link to another file", d, why),
				Fix: "keep it below directories that only " + secretOwnerName() + " can change (as /etc/mailctl) and point the config key at it there"}
		}
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if err := checkSecretFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// maxLinks bounds the links followed to a secret, as the kernel bounds a
// path's.
const maxLinks = 8

// trustedTarget follows the links from path to the file they name. Every
// link must belong to root or the secret's owner, and so must every
// directory on the way to each link and to the file, none of them writable
// by anyone else (unless sticky, where others cannot replace what is not
// theirs): then nobody else can point the daemon at another file, and the
// file found is opened without following anything more.
func trustedTarget(path string) (string, error) {
	linkFix := "point the config key at the file itself, or keep a copy of it (the certbot deploy hook in docs/setup.md does)"
	real, c, err := wayTo(path)
	switch {
	case err != nil:
		return "", err
	case c == nil:
		return real, nil
	case c.chain:
		return "", &SecretError{Path: path, Problem: fmt.Sprintf("is a chain of more than %d symbolic links", maxLinks), Fix: linkFix}
	case c.link:
		return "", &SecretError{Path: path, Problem: fmt.Sprintf("is a symbolic link (%s) that %s", c.where, c.why), Fix: linkFix}
	}
	return "", &SecretError{Path: path, Problem: fmt.Sprintf("is a symbolic link whose way to its file passes %s, which %s", c.where, c.why), Fix: linkFix}
}

// changeable is a place on the way to a file that someone other than root
// or the secret's owner could change: a directory (why says how), a link of
// theirs (why: "belongs to uid N"), or a chain of too many links.
type changeable struct {
	where, why  string
	link, chain bool
}

// wayTo follows the links from path to the file they name, checking each
// directory on the way to each link and to the file (untrustedWay) and
// each link's owner. It returns the file, with no link left on its way, or
// the first place someone else could change. An error is one of looking.
func wayTo(path string) (string, *changeable, error) {
	cur := path
	for range maxLinks + 1 {
		dir, d, why, err := untrustedWay(filepath.Dir(cur))
		if err != nil {
			return "", nil, err
		}
		if d != "" {
			return "", &changeable{where: d, why: why}, nil
		}
		cur = filepath.Join(dir, filepath.Base(cur))
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return cur, nil, nil
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; !trustedUID(uid) {
			return "", &changeable{where: cur, why: fmt.Sprintf("belongs to uid %d", uid), link: true}, nil
		}
		dest, err := os.Readlink(cur)
		if err != nil {
			return "", nil, err
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(dir, dest)
		}
		cur = dest
	}
	return "", &changeable{chain: true}, nil
}

// trustedUID reports whether uid may own the links and directories on the
// way to a secret: root, or the secret's owner.
func trustedUID(uid uint32) bool { return uid == 0 || int(uid) == secretOwner() }

// untrustedDir names the first directory from dir (a path without links)
// up to the root that someone other than root or the secret's owner owns or
// may write in, and why; "" when there is none.
func untrustedDir(dir string) (string, string) {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return d, "cannot be examined: " + err.Error()
		}
		if why := untrusted(fi); why != "" {
			return d, why
		}
		if parent := filepath.Dir(d); parent == d {
			return "", ""
		}
	}
}

// untrustedWay is untrustedDir of dir as it is named, links and all: each
// directory on the way must pass, and each link on it belong to root or the
// secret's owner; then the directories the links lead through must pass
// too (untrustedDir of the way resolved, which it returns). A link someone
// else owns, or one in a directory someone else may change, could be
// pointed at any directory. An error is one of looking.
func untrustedWay(dir string) (resolved, d, why string, err error) {
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return "", "", "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if uid := fi.Sys().(*syscall.Stat_t).Uid; !trustedUID(uid) {
				return "", d, fmt.Sprintf("is a symbolic link that belongs to uid %d", uid), nil
			}
		} else if why := untrusted(fi); why != "" {
			return "", d, why, nil
		}
		if parent := filepath.Dir(d); parent == d {
			break
		}
	}
	if resolved, err = filepath.EvalSymlinks(dir); err != nil {
		return "", "", "", err
	}
	d, why = untrustedDir(resolved)
	return resolved, d, why, nil
}

// untrusted says why someone other than root or the secret's owner may
// change what the directory fi holds, or "" when no one may.
func untrusted(fi fs.FileInfo) string {
	st := fi.Sys().(*syscall.Stat_t)
	switch perm := fi.Mode(); {
	case !trustedUID(st.Uid):
		return fmt.Sprintf("belongs to uid %d", st.Uid)
	case perm&0o022 != 0 && perm&fs.ModeSticky == 0:
		return fmt.Sprintf("has mode %04o: others can write in it", perm.Perm())
	}
	return ""
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

// OthersCanChange names the first place on the way to path (a directory,
// a link, or the file itself) that someone other than root or the running
// user owns or may write in, and why; where is "" when no one else can
// change what path reads. It is for input the daemon trusts without it
// being secret (its config, a certificate authority, its certificate):
// such a file is not refused (a path that does not exist yet is no
// finding), but whoever may change it could have the daemon trust their
// own (`mailctl doctor`'s input.changeable).
func OthersCanChange(path string) (where, why string, err error) {
	if path, err = filepath.Abs(path); err != nil {
		return "", "", err
	}
	real, c, err := wayTo(path)
	switch {
	case err != nil:
		return "", "", err
	case c == nil:
		fi, err := os.Lstat(real)
		if err != nil {
			return "", "", err
		}
		if why := untrusted(fi); why != "" {
			return real, why, nil
		}
		return "", "", nil
	case c.chain:
		return path, fmt.Sprintf("leads through more than %d symbolic links", maxLinks), nil
	case c.link:
		return c.where, "is a symbolic link that " + c.why, nil
	}
	return c.where, c.why, nil
}
