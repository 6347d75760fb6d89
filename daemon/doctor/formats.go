package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/store"
)

// formatFix is what to do about a format the daemon refuses.
const formatFix = "run the release the message names, or restore the backup taken before the upgrade (docs/operations.md, \"Upgrading and rolling back\")"

// checkRestore reports a restore stopped while it put the archive's state
// in place: the daemon refuses to start on that state until the restore is
// run again.
func checkRestore(f *findings, cfg *config.Config) {
	if err := backup.CheckIncomplete(cfg.Paths.StateDir); err != nil {
		f.add("restore.incomplete", Fail, "run `sudo mailctl restore --force ARCHIVE` again with the same archive, then start the daemon", "%v", err)
	}
}

// checkFormats reports, in one line, the version of each format it can
// read, as the daemon checks them at start: a newer one or a damaged stamp
// fails (the daemon will not start on it). What it may not read (doctor
// without root) it leaves out.
func checkFormats(f *findings, cfg *config.Config) {
	var parts []string
	if cfg.Format != 0 {
		parts = append(parts, fmt.Sprintf("config %d", cfg.Format))
	}
	bad := false
	each := func(name string, version int, stamped bool, err error) {
		switch {
		case errors.Is(err, formats.ErrNewer):
			f.add("format.newer", Fail, formatFix, "%v", err)
			bad = true
		case errors.Is(err, formats.ErrDamaged):
			f.add("format.damaged", Fail, formatFix, "%v", err)
			bad = true
		case errors.Is(err, fs.ErrPermission):
		case errors.Is(err, fs.ErrNotExist):
			parts = append(parts, name+" none yet")
		case err != nil:
			f.add("format.unreadable", Warn, "check the file the message names", "%s: %v", name, err)
			bad = true
		case !stamped:
			parts = append(parts, fmt.Sprintf("%s %d (stamped at the next start)", name, version))
		default:
			parts = append(parts, fmt.Sprintf("%s %d", name, version))
		}
	}
	for _, d := range []struct {
		name, kind, dir string
		current         int
	}{
		{"registry", "registry", cfg.Paths.RegistryDir(), formats.Registry},
		{"mailboxes", "mailboxes", cfg.Paths.MailboxesDir(), formats.Mailboxes},
	} {
		s, err := formats.ReadStamp(filepath.Join(d.dir, formats.StampName), d.kind)
		if errors.Is(err, fs.ErrNotExist) {
			// No stamp: a release before stamps wrote the directory (1), or
			// there is none yet.
			if _, serr := os.Stat(d.dir); serr == nil {
				each(d.name, 1, false, nil)
				continue
			}
		}
		if err == nil {
			err = formats.Check("the "+d.name, d.dir, s.Version, d.current, s.WrittenBy)
		}
		each(d.name, s.Version, true, err)
	}
	v, err := queue.JournalVersion(cfg.Paths.QueueDir())
	if err == nil && v == 0 {
		err = fs.ErrNotExist
	}
	each("queue journal", v, true, err)
	for _, db := range []struct {
		name, file string
		current    int
	}{{"index", store.IndexFile, formats.Index}, {"deliveries", store.DeliveriesFile, formats.Deliveries}} {
		path := filepath.Join(filepath.Dir(cfg.Paths.IndexFile()), db.file)
		v, err := store.DatabaseVersion(path)
		if err == nil {
			err = formats.Check("the "+db.name, path, v, db.current, "")
		}
		each(db.name, v, true, err)
	}
	if !bad {
		f.add("format.versions", OK, "", "formats: %s", strings.Join(parts, ", "))
	}
}
