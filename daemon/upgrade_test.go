package daemon

import (
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestUpgradeFixtureStore starts this build on the state a release before
// format stamps wrote (testdata/store-v1.tar.gz): the mailbox, its hook, its
// messages and both queue items are there; the per-item queue files are in
// the journal and gone; the mailbox's old index file is gone; the registry
// and the mailbox tree are stamped with their versions; the rate-limit log
// is in its current format; the journal and the index databases keep theirs.
func TestUpgradeFixtureStore(t *testing.T) {
	dir := newFixtureDir(t)
	state := extractFixture(t, dir, os.Getuid(), os.Getgid())
	cfg, err := config.Load(fixtureDaemonConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	td := runTestDaemon(t, cfg, dir, Options{})

	var ml protocol.MailboxList
	if err := td.call(t, protocol.VerbMailboxList, nil, &ml); err != nil {
		t.Fatal(err)
	}
	boxes := ml.Mailboxes
	if len(boxes) != 1 || boxes[0].Name != "agent" {
		t.Fatalf("mailboxes after the upgrade: %+v", boxes)
	}
	var hl protocol.HookList
	if err := td.call(t, protocol.VerbHookList, protocol.HookListArgs{Mailbox: "agent"}, &hl); err != nil {
		t.Fatal(err)
	}
	hooks := hl.Hooks
	if len(hooks) != 1 || hooks[0].Name != "note" {
		t.Fatalf("hooks after the upgrade: %+v", hooks)
	}
	for folder, want := range map[string]string{"inbox": "fixture inbox message", "sent": "fixture held send"} {
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Folder: folder}, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Messages) != 1 || l.Messages[0].Subject != want {
			t.Fatalf("%s after the upgrade: %+v", folder, l.Messages)
		}
	}
	var ql protocol.QueueList
	if err := td.call(t, protocol.VerbQueueList, nil, &ql); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, it := range ql.Items {
		if !it.Held {
			t.Errorf("item %s is no longer held", it.ID)
		}
		ids = append(ids, it.ID)
	}
	slices.Sort(ids)
	if len(ids) != 2 || ids[1] != fixtureLegacyItem || !strings.HasPrefix(ids[0], "agent.") {
		t.Fatalf("queue after the upgrade: %v", ids)
	}
	for _, gone := range []string{"queue/" + fixtureLegacyItem + ".json", "queue/" + fixtureLegacyItem + ".eml", "mailboxes/agent/.mailctl-index.inbox"} {
		if _, err := os.Lstat(filepath.Join(state, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after the upgrade: %v", gone, err)
		}
	}
	for kind, dir := range map[string]string{"registry": "registry", "mailboxes": "mailboxes"} {
		s, err := formats.ReadStamp(filepath.Join(state, dir, formats.StampName), kind)
		if err != nil || s.Version != 1 || s.WrittenBy != "test" {
			t.Errorf("stamp of %s: %+v, %v", dir, s, err)
		}
	}
	if v, err := queue.JournalVersion(filepath.Join(state, "queue")); err != nil || v != formats.QueueJournal {
		t.Errorf("journal version %d, %v", v, err)
	}
	if v, err := policy.LogVersion(filepath.Join(state, "ratelimit.log")); err != nil || v != formats.RateLimitLog {
		t.Errorf("rate-limit log version %d, %v", v, err)
	}
	td.stop()
	for db, want := range map[string]int{store.IndexFile: formats.Index, store.DeliveriesFile: formats.Deliveries} {
		if v, err := store.DatabaseVersion(filepath.Join(state, "index", db)); err != nil || v != want {
			t.Errorf("%s version %d, %v", db, v, err)
		}
	}
}

// TestNewerFormatIsRefused: state a later release wrote is refused at
// start, the error naming both versions, the release to run and the
// backup, and nothing in the state directory changes. A damaged stamp is
// refused the same way.
func TestNewerFormatIsRefused(t *testing.T) {
	setVersion := func(path string, v int) func(t *testing.T, state string) {
		return func(t *testing.T, state string) {
			db, err := sql.Open("sqlite", filepath.Join(state, path))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	stamp := func(dir, text string) func(t *testing.T, state string) {
		return func(t *testing.T, state string) {
			os.WriteFile(filepath.Join(state, dir, formats.StampName), []byte(text), 0o600)
		}
	}
	// A later release stamped the registry: the formats that do not say
	// who wrote them are blamed on it.
	laterRegistry := stamp("registry", "mailctl registry format 1\nwritten by mailctl 9.1.0\n")
	cases := []struct {
		name    string
		prepare []func(t *testing.T, state string)
		want    []string
		is      error
	}{
		{"registry", []func(*testing.T, string){stamp("registry", "mailctl registry format 2\nwritten by mailctl 9.1.0\n")},
			[]string{"the registry ", "is format version 2", "reads versions up to 1", "run mailctl 9.1.0 (which wrote it) or later", "restore the backup taken before the upgrade"}, formats.ErrNewer},
		{"mailbox tree", []func(*testing.T, string){stamp("mailboxes", "mailctl mailboxes format 3\n")},
			[]string{"the mailbox tree ", "is format version 3", "run the newer mailctl that wrote it"}, formats.ErrNewer},
		{"journal", []func(*testing.T, string){laterRegistry, func(t *testing.T, state string) {
			path := filepath.Join(state, "queue", "journal")
			raw, _ := os.ReadFile(path)
			os.WriteFile(path, append([]byte("mailctl queue journal 2\n"), raw[len("mailctl queue journal 1\n"):]...), 0o600)
		}}, []string{"the queue journal ", "is format version 2", "run mailctl 9.1.0 (which wrote it) or later"}, formats.ErrNewer},
		{"index", []func(*testing.T, string){laterRegistry, setVersion("index/index.db", formats.Index+1)},
			[]string{"the index ", fmt.Sprintf("is format version %d", formats.Index+1), "run mailctl 9.1.0", "or remove it (the index is rebuilt from the mail)"}, formats.ErrNewer},
		{"deliveries", []func(*testing.T, string){setVersion("index/deliveries.db", formats.Deliveries+1)},
			[]string{"the deliveries record ", fmt.Sprintf("is format version %d", formats.Deliveries+1), "or remove it"}, formats.ErrNewer},
		{"rate-limit log", []func(*testing.T, string){laterRegistry, func(t *testing.T, state string) {
			os.WriteFile(filepath.Join(state, "ratelimit.log"), []byte("mailctl ratelimit log 3\n1 0 \"agent\"\n"), 0o600)
		}}, []string{"the rate-limit log ", "is format version 3", "reads versions up to 2", "run mailctl 9.1.0 (which wrote it) or later"}, formats.ErrNewer},
		{"damaged stamp", []func(*testing.T, string){stamp("mailboxes", "mailctl mailboxes format banana\n")},
			[]string{"the format stamp of the mailboxes", "is damaged", "restore it from the backup"}, formats.ErrDamaged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := newFixtureDir(t)
			state := extractFixture(t, dir, os.Getuid(), os.Getgid())
			for _, p := range c.prepare {
				p(t, state)
			}
			before := treeHash(t, state)
			cfg, err := config.Load(fixtureDaemonConfig(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			if _, err = New(cfg, Options{Version: "test", Logger: quietLogger(t)}); err == nil {
				t.Fatal("the daemon started")
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q:\n%v", s, err)
				}
			}
			if after := treeHash(t, state); after != before {
				t.Errorf("the refused state changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// treeHash lists every path under dir with its mode and content hash.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := e.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v", rel, info.Mode())
		if e.Type().IsRegular() {
			fmt.Fprintf(&b, " %s", fileHash(t, path))
		}
		b.WriteString("; ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))[:16]
}

// Each start by another release writes the stamps again with its name, so
// that they name the last release that ran on the state; a release that
// finds its own stamps leaves them.
func TestStampsNameTheLastRelease(t *testing.T) {
	state := t.TempDir()
	p := config.Paths{StateDir: state}
	for _, d := range []string{p.RegistryDir(), p.MailboxesDir(), filepath.Join(p.RegistryDir(), "hooks"), filepath.Join(p.RegistryDir(), "mailboxes")} {
		os.Mkdir(d, 0o700)
	}
	// A crash's leftover of a stamp being written goes.
	leftover := filepath.Join(p.RegistryDir(), safeio.TempPrefix+formats.StampName+"-123")
	os.WriteFile(leftover, nil, 0o600)
	for i, release := range []string{"1.0", "1.0", "1.1"} {
		sf, err := checkFormats(p, release)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := os.Stat(sf.dirs[0].path())
		if err := sf.writeStamps(release, quietLogger(t)); err != nil {
			t.Fatal(err)
		}
		for _, s := range sf.dirs {
			got, err := formats.ReadStamp(s.path(), s.kind)
			if err != nil || got.Version != s.current || got.WrittenBy != release {
				t.Errorf("%s after a start of %s: %+v, %v", s.kind, release, got, err)
			}
		}
		if _, err := os.Lstat(leftover); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the leftover temporary stamp is still there: %v", err)
		}
		// A rewrite renames a new file into place.
		after, _ := os.Stat(sf.dirs[0].path())
		if mine := sf.dirs[0].found.WrittenBy == release; mine != (before != nil && os.SameFile(before, after)) {
			t.Errorf("start %d of %s: stamp found %+v, file replaced: %v", i, release, sf.dirs[0].found, before == nil || !os.SameFile(before, after))
		}
	}
}

// Directories mailctl setup made and left empty (the registry with its
// empty subdirectories) are new, not written before stamps: the first start stamps them without saying it migrated
// anything. One that holds files and no stamp is from before stamps.
func TestEmptyDirsWithoutStampsAreNew(t *testing.T) {
	p := config.Paths{StateDir: t.TempDir()}
	for _, d := range []string{p.RegistryDir(), p.MailboxesDir(), filepath.Join(p.RegistryDir(), "hooks"), filepath.Join(p.RegistryDir(), "mailboxes")} {
		os.Mkdir(d, 0o700)
	}
	os.WriteFile(filepath.Join(p.RegistryDir(), safeio.TempPrefix+formats.StampName+"-1"), nil, 0o600)
	sf, err := checkFormats(p, "1.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sf.dirs {
		if s.before {
			t.Errorf("%s: an empty directory taken for one written before stamps", s.kind)
		}
	}
	p2 := config.Paths{StateDir: t.TempDir()}
	os.MkdirAll(filepath.Join(p2.MailboxesDir(), "agent"), 0o700)
	if sf, err = checkFormats(p2, "1.0"); err != nil {
		t.Fatal(err)
	}
	if s := sf.dirs[1]; s.kind != "mailboxes" || !s.before {
		t.Errorf("a mailbox tree with a mailbox and no stamp: %+v, want written before stamps", s)
	}
	os.MkdirAll(filepath.Join(p2.RegistryDir(), "mailboxes"), 0o700)
	os.WriteFile(filepath.Join(p2.RegistryDir(), "mailboxes", "agent.toml"), []byte("x"), 0o600)
	if sf, err = checkFormats(p2, "1.0"); err != nil {
		t.Fatal(err)
	}
	if s := sf.dirs[0]; s.kind != "registry" || !s.before {
		t.Errorf("a registry with a record and no stamp: %+v, want written before stamps", s)
	}
}
