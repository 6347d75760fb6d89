package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/give"
)

func mailboxGive(args []string) int {
	fs := newFlagSet("mailboxes give", "mailboxes give --to OWNER[:GROUP] FOLDER",
		`Gives the mailbox folder FOLDER and the mail in it to OWNER, and to GROUP
(without it the group is left as it is), when they belong to someone else: a
restore gave them to the archive's owner, or the owner line changed. The
daemon's log, `+"`mailctl doctor`"+` and `+"`mailctl restore`"+` print this command with
the folder and the owner filled in. Root only.

Only FOLDER, the folders below it and their files of one link that are
FOLDER's present owner's are given, each through the descriptor it was
looked at by, so that owner cannot swap in, meanwhile, a link that leads the
change elsewhere. Symbolic links (neither followed nor changed), files of
more than one link or of another owner (they may be hard links to files
outside the mailbox), FIFOs, sockets, devices and mounts are left as they
are: standard error counts them and names the first few. FOLDER itself may
not be a symbolic link, and must be a folder in a daemon's mailboxes folder
(one that holds its format stamp, `+"`.format`"+`): the mailboxes folder itself, a
home or / is refused, not given away whole.`)
	to := fs.String("to", "", "the new owner, OWNER[:GROUP]: a user name or uid, and a group name or gid")
	if code, ok := parseArgs(fs, args, 1, "give exactly one FOLDER, the mailbox's folder"); !ok {
		return code
	}
	uid, gid, err := parseOwner(*to)
	if err != nil {
		return usageError(fs, "--to %q: %v", *to, err)
	}
	if os.Geteuid() != 0 {
		return failure(fs, errors.New("giving a folder to another owner takes root: run it with sudo"))
	}
	folder := fs.Arg(0)
	if err := inMailboxes(folder); err != nil {
		return failure(fs, err)
	}
	res, err := give.Folder(folder, uid, gid)
	if res != nil && res.LeftCount > 0 {
		fmt.Fprintf(stderr, "mailctl %s: %d left as they were (not folders, nor the folder's owner's files of one link):\n", fs.Name(), res.LeftCount)
		for _, l := range res.Left {
			fmt.Fprintf(stderr, "  %s: %s\n", inert(strconv.Quote(l.Path)), l.Why)
		}
		if more := res.LeftCount - len(res.Left); more > 0 {
			fmt.Fprintf(stderr, "  and %d more\n", more)
		}
	}
	if err != nil {
		return failure(fs, err)
	}
	fmt.Fprintf(stdout, "gave %s and %d folders and files in it to %s\n", inert(strconv.Quote(folder)), res.Given-1, inert(*to))
	return 0
}

// inMailboxes refuses a folder that is not in a daemon's mailboxes folder:
// its parent must hold the mailboxes format stamp, which the daemon writes
// there at every start (and a restore with what it restores). A slip that
// names the mailboxes folder itself, its parent, a home or / then gives
// nothing away.
func inMailboxes(folder string) error {
	abs, err := filepath.Abs(folder)
	if err != nil {
		return err
	}
	parent := filepath.Dir(abs)
	stamp := filepath.Join(parent, formats.StampName)
	if parent == abs {
		return fmt.Errorf("%s is not a mailbox's folder: name one mailbox's folder in the daemon's mailboxes folder (paths.state_dir/mailboxes)", inert(strconv.Quote(folder)))
	}
	if _, err := formats.ReadStamp(stamp, formats.KindMailboxes); err != nil {
		why := "holds no mailboxes format stamp"
		if !errors.Is(err, fs.ErrNotExist) {
			why = "holds no mailboxes format stamp that can be read (" + err.Error() + ")"
		}
		return fmt.Errorf("%s is not a mailbox's folder: %s %s, as the daemon's mailboxes folder (paths.state_dir/mailboxes) does once the daemon has started; name one mailbox's folder in it",
			inert(strconv.Quote(folder)), inert(strconv.Quote(parent)), inert(why))
	}
	return nil
}

// parseOwner reads OWNER[:GROUP], each a name or a number, into a uid and
// a gid (-1 when no group is given: it is left as it is).
func parseOwner(s string) (uid, gid int, err error) {
	owner, group, hasGroup := strings.Cut(s, ":")
	if owner == "" {
		return 0, 0, errors.New("name the new owner: OWNER or OWNER:GROUP, each a name or a number")
	}
	if uid, err = lookupID(owner, "user", func(n string) (string, error) {
		u, err := user.Lookup(n)
		if err != nil {
			return "", err
		}
		return u.Uid, nil
	}); err != nil {
		return 0, 0, err
	}
	if !hasGroup {
		return uid, -1, nil
	}
	if group == "" {
		return 0, 0, errors.New("name the group after the colon, or leave the colon out to keep the group")
	}
	if gid, err = lookupID(group, "group", func(n string) (string, error) {
		g, err := user.LookupGroup(n)
		if err != nil {
			return "", err
		}
		return g.Gid, nil
	}); err != nil {
		return 0, 0, err
	}
	return uid, gid, nil
}

// lookupID is the id s says: s itself when it is a number, else what
// lookup finds for the name.
func lookupID(s, kind string, lookup func(string) (string, error)) (int, error) {
	if s[0] >= '0' && s[0] <= '9' {
		n, err := strconv.ParseUint(s, 10, 32)
		// (uid_t)-1 means "leave it as it is" to chown(2): not an owner.
		if err != nil || n == math.MaxUint32 {
			return 0, fmt.Errorf("%s id %q is not a number below %d", kind, s, uint64(math.MaxUint32))
		}
		return int(n), nil
	}
	id, err := lookup(s)
	if err != nil {
		return 0, fmt.Errorf("no %s %q here", kind, s)
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil || n == math.MaxUint32 {
		return 0, fmt.Errorf("%s %q has id %q, not a number below %d", kind, s, id, uint64(math.MaxUint32))
	}
	return int(n), nil
}
