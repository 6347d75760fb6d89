package hooks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// Owner is the account a hook runs as: the owner of the hook's mailbox.
type Owner struct {
	UID    uint32
	GID    uint32   // primary group
	Groups []uint32 // supplementary groups
	Name   string
	Home   string
	Shell  string // login shell from /etc/passwd, exported as SHELL when known
}

// ErrRootOwner is returned when a hook would run as uid 0.
var ErrRootOwner = errors.New("hooks never run as root: give the mailbox to an ordinary user (mailctl mailboxes create NAME --owner USER)")

// passwdPath is a variable so tests can point the shell lookup elsewhere.
var passwdPath = "/etc/passwd"

// LookupOwner resolves uid to the account a hook runs as: name, home, primary
// group and supplementary groups. It refuses uid 0 and a uid with no passwd
// entry, because a hook must never run with more rights than its owner has.
func LookupOwner(uid uint32) (Owner, error) {
	if uid == 0 {
		return Owner{}, ErrRootOwner
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return Owner{}, fmt.Errorf("hook owner uid %d has no account, so the hook cannot run: recreate the user or give the mailbox to an existing user: %w", uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return Owner{}, fmt.Errorf("hook owner %s: primary group %q is not numeric: %w", u.Username, u.Gid, err)
	}
	o := Owner{UID: uid, GID: uint32(gid), Name: u.Username, Home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return Owner{}, fmt.Errorf("hook owner %s: listing supplementary groups: %w", u.Username, err)
	}
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return Owner{}, fmt.Errorf("hook owner %s: group id %q is not numeric: %w", u.Username, s, err)
		}
		o.Groups = append(o.Groups, uint32(g))
	}
	o.Shell = lookupShell(uid)
	return o, nil
}

// lookupShell reads the login shell from the passwd file; os/user does not
// expose it. Accounts served by NSS modules other than files have none here,
// and the hook then runs without SHELL.
func lookupShell(uid uint32) string {
	f, err := os.Open(passwdPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	want := strconv.FormatUint(uint64(uid), 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[2] == want {
			return fields[6]
		}
	}
	return ""
}
