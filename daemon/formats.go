package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
)

// The daemon reads every on-disk format's version before it changes
// anything at start, so that state a later release wrote is refused whole
// (formats.NewerError) rather than half taken over. The config's is checked
// by config.Load, the index databases' by the store as it opens them, the
// first lines of the queue journal and the rate-limit log here and again as
// they open. The registry and the mailbox tree carry a stamp file
// (formats.StampName), written once they are open: a directory without one
// was written by a release before stamps and is version 1.

// stampedDir is a directory whose format a stamp file says.
type stampedDir struct {
	kind, what, dir string
	current         int
	found           formats.Stamp // zero: no stamp
	// before says the directory was there without a stamp: a release
	// before stamps wrote it.
	before bool
	// records says the directory's entries are in its subdirectories, so
	// that empty ones (mailctl setup makes the registry's) hold nothing.
	records bool
}

func (s *stampedDir) path() string { return filepath.Join(s.dir, formats.StampName) }

// startFormats is what checkFormats found, for writeStamps.
type startFormats struct {
	dirs []*stampedDir
	// writer is the release a stamp names as its writer, when it is not
	// this one: the likely release to run when something else is newer.
	writer string
}

// stampedDirs are the directories with a stamp file.
func stampedDirs(p config.Paths) []*stampedDir {
	return []*stampedDir{
		{kind: formats.KindRegistry, what: "the registry", dir: p.RegistryDir(), current: formats.Registry, records: true},
		{kind: formats.KindMailboxes, what: "the mailbox tree", dir: p.MailboxesDir(), current: formats.Mailboxes},
	}
}

// checkFormats reads the stamps and the first lines of the queue journal and
// the rate-limit log, and refuses a newer or damaged one. It changes
// nothing.
func checkFormats(p config.Paths, release string) (*startFormats, error) {
	sf := &startFormats{dirs: stampedDirs(p)}
	for _, s := range sf.dirs {
		st, err := formats.ReadStamp(s.path(), s.kind)
		if errors.Is(err, fs.ErrNotExist) {
			// A directory with files and no stamp was written before
			// stamps; an empty one (made by mailctl setup, say) is new.
			s.before = holdsFiles(s.dir, s.records)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.found = st
		if st.WrittenBy != "" && st.WrittenBy != release && sf.writer == "" {
			sf.writer = st.WrittenBy
		}
	}
	for _, s := range sf.dirs {
		if err := formats.Check(s.what, s.dir, s.found.Version, s.current, s.found.WrittenBy); err != nil {
			return nil, err
		}
	}
	if _, err := queue.JournalVersion(p.QueueDir()); err != nil {
		return nil, sf.named(err)
	}
	if _, err := policy.LogVersion(rateLimitLog(p)); err != nil {
		return nil, sf.named(err)
	}
	return sf, nil
}

// holdsFiles reports whether dir exists and holds an entry besides a
// crash's leftover temporary stamp; with records, an empty subdirectory is
// not one.
func holdsFiles(dir string, records bool) bool {
	f, err := safeio.OpenDir(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(64)
		for _, n := range names {
			if strings.HasPrefix(n, safeio.TempPrefix) {
				continue
			}
			// Only the registry's entries (root's) are looked into: the
			// mailbox tree's are its owners', one of whom may have mounted a
			// FUSE file system there whose daemon never answers a stat.
			if !records {
				return true
			}
			if st, err := os.Lstat(filepath.Join(dir, n)); err == nil && st.IsDir() && !holdsFiles(filepath.Join(dir, n), false) {
				continue
			}
			return true
		}
		if err != nil {
			return false
		}
	}
}

// named adds to a refusal of a newer format the release that last wrote a
// stamp, when the format itself does not say which release wrote it. The
// refusal says all there is to say, so it replaces what wrapped it (whose
// text was made before the release was known).
func (sf *startFormats) named(err error) error {
	var ne *formats.NewerError
	if errors.As(err, &ne) && ne.WrittenBy == "" && sf.writer != "" {
		ne.WrittenBy = sf.writer
		return ne
	}
	return err
}

// writeStamps stamps the registry and the mailbox tree, once open, with
// their format and this release: the stamp a directory lacked (written
// before stamps: version 1), or one another release wrote.
func (sf *startFormats) writeStamps(release string, log *slog.Logger) error {
	for _, s := range sf.dirs {
		// The daemon's lock is held: a stamp's temporary file is a crash's.
		safeio.CleanTemps(s.dir, formats.StampName, time.Now())
		if s.found.Version == s.current && s.found.WrittenBy == release {
			continue
		}
		if s.before {
			// A format that moves past 1 migrates its version-1 files here,
			// before the stamp says it has.
			log.Info("format stamp added: written before stamps, so version 1", "format", s.kind, "version", s.current, "dir", s.dir)
		}
		if err := formats.WriteStamp(s.path(), s.kind, s.current, release); err != nil {
			return fmt.Errorf("writing the format stamp of %s: %w", s.what, err)
		}
	}
	return nil
}
