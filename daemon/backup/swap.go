package backup

// Putting the restored state in place: the mailboxes completed, the DKIM
// keys checked, then the old state moved aside and the restored parts in,
// under the mark (IncompleteName) that keeps a daemon off a half-swapped
// state.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/store"
)

// finish completes the mailboxes (folders, owners, modes), checks the DKIM
// keys against those in place, then moves the old state aside and the
// restored one in.
func (rs *restorer) finish() (err error) {
	o := rs.o
	boxes := filepath.Join(rs.stage, "mailboxes")
	if err := os.MkdirAll(boxes, 0o700); err != nil {
		return err
	}
	names := make([]string, 0, len(rs.owners))
	for n := range rs.owners {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		ow := rs.owners[name]
		dir := filepath.Join(boxes, name)
		for _, f := range store.Folders {
			if err := os.MkdirAll(filepath.Join(dir, f), 0o700); err != nil {
				return err
			}
		}
		// Owned last, from the leaves up: the owner cannot enter a
		// mailbox before everything in it is in place.
		if err := chownTree(dir, int(ow.uid), int(ow.gid)); err != nil {
			return err
		}
		rs.res.Mailboxes = append(rs.res.Mailboxes, RestoredMailbox{Name: name, From: ow.from, To: ow.to, OldUID: ow.oldUID, NewUID: ow.uid, Files: rs.files[name]})
		// Counted whole, named up to MaxListed: an archive of any number
		// of mailboxes leaves the answer, and the line the CLI prints,
		// small.
		if !rs.registered[name] && !slices.Contains(o.Declared, name) {
			if rs.res.UndeclaredCount++; len(rs.res.Undeclared) < MaxListed {
				rs.res.Undeclared = append(rs.res.Undeclared, name)
			}
		}
		if uid, ok := o.DeclaredOwners[name]; ok && !rs.registered[name] && uid != ow.uid {
			if rs.res.OwnerDiffersCount++; len(rs.res.OwnerDiffers) < MaxListed {
				rs.res.OwnerDiffers = append(rs.res.OwnerDiffers, fmt.Sprintf("%s (restored for %s, uid %d; declared for uid %d)", name, ow.to, ow.uid, uid))
			}
		}
	}
	if err := os.Chmod(boxes, 0o711); err != nil {
		return err
	}
	for _, d := range []string{"registry/mailboxes", "registry/hooks", "queue"} {
		if err := os.MkdirAll(filepath.Join(rs.stage, d), 0o700); err != nil {
			return err
		}
	}
	for _, st := range rs.stamps { // a kind is the name of the directory it stamps
		if err := formats.WriteStamp(filepath.Join(rs.stage, st.Kind, formats.StampName), st.Kind, st.Version, st.WrittenBy); err != nil {
			return err
		}
	}
	var keyNames []string
	for n := range rs.keys {
		keyNames = append(keyNames, n)
	}
	sort.Strings(keyNames)
	var differ []string // every one, so a host set up in the backup's month learns of both of its keys at once
	for _, n := range keyNames {
		if p := filepath.Join(o.DKIMDir, n); !o.Force && keyDiffers(p, rs.keys[n]) {
			differ = append(differ, p)
		}
	}
	switch len(differ) {
	case 0:
	case 1:
		return fmt.Errorf("%s differs from the archive's key of that name: restore with --force to move it aside", differ[0])
	default:
		return fmt.Errorf("%s differ from the archive's keys of those names: restore with --force to move them aside", strings.Join(differ, ", "))
	}
	for _, n := range keyNames {
		if sel, ok := selector(n); ok {
			rs.res.DKIMRestored = append(rs.res.DKIMRestored, sel)
		}
	}
	if len(rs.res.DKIMRestored) > 0 {
		// This host's other keys, from the operator's directory listed a
		// batch at a time: MaxKeys of them (as many as an archive holds)
		// are enough to say that two hosts' keys are there.
		safeio.EachEntry(o.DKIMDir, func(e fs.DirEntry) error {
			if _, restored := rs.keys[e.Name()]; restored || e.IsDir() {
				return nil
			}
			if sel, ok := selector(e.Name()); ok {
				rs.res.DKIMBeside = append(rs.res.DKIMBeside, sel)
			}
			if len(rs.res.DKIMBeside) >= MaxKeys {
				return safeio.ErrStop
			}
			return nil
		})
		sort.Strings(rs.res.DKIMBeside)
	}
	// The point of no return: the old state goes aside, the new comes in.
	// The directory is new for each restore: one of an earlier restore in
	// the same second keeps what that one moved there. Until the last part
	// is in place the state is part old, part restored: the mark says so,
	// and a daemon start refuses it (CheckIncomplete) instead of serving
	// it and removing the staged rest.
	m := rs.res.Manifest
	mark := fmt.Sprintf("restore of the backup of %s cut at %s, begun %s\n", strconv.Quote(m.Host), m.CutAt.UTC().Format(time.RFC3339), o.Now().UTC().Format(time.RFC3339))
	markPath := filepath.Join(o.StateDir, IncompleteName)
	if err := safeio.WriteFile(markPath, []byte(mark)); err != nil {
		return err
	}
	moved := false
	defer func() {
		if err != nil && !moved {
			os.Remove(markPath) // refused before it moved anything: the state is whole
		}
	}()
	aside := ""
	moveAside := func(path string) error {
		if _, err := os.Lstat(path); os.IsNotExist(err) {
			return nil
		}
		if aside == "" {
			d, err := newDir(filepath.Join(o.StateDir, "pre-restore-"+o.Now().UTC().Format("20060102T150405Z")))
			if err != nil {
				return err
			}
			aside = d
		}
		err := os.Rename(path, filepath.Join(aside, strings.ReplaceAll(strings.TrimPrefix(path, o.StateDir+"/"), "/", "-")))
		moved = moved || err == nil
		return err
	}
	// The inbound journal goes with the mailboxes its copies were for: left
	// in place, the restored daemon would find their mailboxes gone (the
	// restored ones are others) and drop what it holds of them.
	// The send log goes with the sends it counts when the archive holds
	// its own; one made before backups held it keeps this host's.
	parts := []string{"mailboxes", "registry", "queue"}
	if rs.res.RateLog {
		parts = append(parts, rateLogName)
	}
	for _, part := range append(slices.Clone(parts), "inbound", "index", "bounce.key") {
		if err := moveAside(filepath.Join(o.StateDir, part)); err != nil {
			return err
		}
	}
	for _, part := range parts {
		if err := os.Rename(filepath.Join(rs.stage, part), filepath.Join(o.StateDir, part)); err != nil {
			return err
		}
		moved = true
		crashpoint.Hit("restore-swapping")
	}
	if rs.bounce != nil {
		if err := writeNew(filepath.Join(o.StateDir, "bounce.key"), rs.bounce, 0o600); err != nil {
			return err
		}
	}
	if len(keyNames) > 0 {
		if err := os.MkdirAll(o.DKIMDir, 0o700); err != nil {
			return err
		}
	}
	for _, n := range keyNames {
		p := filepath.Join(o.DKIMDir, n)
		if keyDiffers(p, rs.keys[n]) {
			if err := moveAside(p); err != nil {
				return err
			}
		} else if _, err := os.Lstat(p); err == nil {
			continue // the same key
		}
		if err := writeNew(p, rs.keys[n], 0o600); err != nil {
			return err
		}
		rs.res.Keys = append(rs.res.Keys, p)
	}
	if rs.config != nil && o.ConfigFile != "" {
		to := o.ConfigFile
		if _, err := os.Lstat(to); err == nil {
			to += ".restored"
			os.Remove(to)
		}
		if err := writeNew(to, rs.config, 0o640); err != nil {
			return err
		}
		rs.res.ConfigTo = to
	}
	rs.res.MovedAside = aside
	if err := os.Remove(filepath.Join(o.StateDir, IncompleteName)); err != nil {
		return err
	}
	return syncDir(o.StateDir)
}

// IncompleteName is the file a restore writes in the state directory
// before it moves the archive's parts in, and removes once all of them,
// the keys and the config are in place.
const IncompleteName = "restore-incomplete"

// CheckIncomplete refuses a state directory a restore was stopped in while
// it put the archive's parts in place: some may be the archive's, some
// the old state's, some missing, and what the restore had staged is not in
// place. Running the restore again finishes it.
func CheckIncomplete(stateDir string) error {
	data, err := readHead(filepath.Join(stateDir, IncompleteName), 512)
	if os.IsNotExist(err) {
		return nil
	}
	what, _, _ := strings.Cut(string(data), "\n")
	if err != nil || what == "" || !utf8.ValidString(what) || strings.ContainsFunc(what, unicode.IsControl) {
		what = "a restore"
	}
	return fmt.Errorf("%s was stopped while it put the archive's state in place in %s (%s is there): "+
		"the state is part old, part restored; run `sudo mailctl restore --force ARCHIVE` again with the same archive "+
		"(what is there now is moved aside, nothing is deleted), then start the daemon",
		what, stateDir, IncompleteName)
}

func syncDir(dir string) error {
	f, err := safeio.OpenDir(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// keyDiffers says whether path holds something other than the key want:
// another key, or what is no key (a FIFO, a device, a symbolic link, a
// file larger than a key may be), which is never opened to wait on nor
// read past MaxKey. Nothing there is no difference.
func keyDiffers(path string, want []byte) bool {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return false
	}
	have, err := safeio.ReadRegular(path, MaxKey)
	return err != nil || !bytes.Equal(have, want)
}

// selector is the selector of the DKIM key file named name, as the daemon
// finds its keys (dkim.LoadKeys): <selector>.key, not hidden.
func selector(name string) (string, bool) {
	sel, ok := strings.CutSuffix(name, ".key")
	return sel, ok && sel != "" && !strings.HasPrefix(name, ".")
}

// newDir makes a directory named base, or base-2, base-3, ... when that
// exists, and returns its path.
func newDir(base string) (string, error) {
	for i := 1; ; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(name, 0o700)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
}

// chownTree gives dir and everything below it (directories and files the
// restore made) to uid:gid, without following symlinks (there are none: the
// restore made every entry).
func chownTree(dir string, uid, gid int) error {
	return filepathWalkPost(dir, func(path string) error { return os.Lchown(path, uid, gid) })
}

func filepathWalkPost(dir string, fn func(string) error) error {
	// A batch of names at a time: a restored folder holds any number of
	// messages. Nothing is added or removed while it is listed.
	err := safeio.EachEntry(dir, func(e fs.DirEntry) error {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			return filepathWalkPost(p, fn)
		}
		return fn(p)
	})
	if err != nil {
		return err
	}
	return fn(dir)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
