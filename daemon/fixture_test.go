package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// The fixture store is a state directory as a release writes it, kept in
// testdata so that every later release's tests upgrade it
// (TestUpgradeFixtureStore). Version 1 of every format is what releases
// before format stamps wrote: this build's files without the stamp files,
// plus the leftovers those releases could leave (a queue item of the
// per-item layout, a mailbox's old index file). Regenerate it with
//
//	go test ./daemon -run TestWriteFixtureStore -write-fixture
//
// only while every format this build writes is still at version 1; when one
// moves on, keep this fixture and add one of the new versions beside it.
var writeFixture = flag.Bool("write-fixture", false, "write testdata/"+fixtureName+" from a daemon of this build")

const (
	fixtureName = "store-v1.tar.gz"
	// fixtureUID stands for the mailbox owner in the fixture: its files
	// and its registry record. Extraction maps it to the user running
	// the test, as a restore maps owners.
	fixtureUID = 424242
	// fixtureLegacyItem is the queue item in the per-item layout.
	fixtureLegacyItem = "legacy-item-1"
)

// TestWriteFixtureStore writes the fixture: a mailbox created over the
// socket with a hook, a message in its inbox, a held send (in the journal
// and in sent), then, with the daemon stopped, the leftovers of earlier
// releases. Private keys the daemon made (the return-path key) stay out.
func TestWriteFixtureStore(t *testing.T) {
	if !*writeFixture {
		t.Skip("writes testdata/" + fixtureName + " only with -write-fixture")
	}
	td := startDaemonWith(t, "[send]\nhold = true\n", Options{Resolver: &resolver.Map{}})
	must := func(verb string, args, out any) {
		t.Helper()
		if err := td.call(t, verb, args, out); err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
	}
	must(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "agent"}, nil)
	must(protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "agent", Event: "on_receive", Cmd: []string{"/bin/true"}, Name: "note"}, nil)
	deliverTo(t, td, "agent", "fixture inbox message", time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), nil)
	var sent protocol.SendResult
	must(protocol.VerbSend, protocol.SendArgs{FromMailbox: "agent", To: []string{"x@remote.test"}, Subject: "fixture held send", Body: "held for approval"}, &sent)
	if sent.Status != "held" {
		t.Fatalf("the send is %q, want held", sent.Status)
	}
	rec, ok := td.reg.Mailbox("agent")
	if !ok {
		t.Fatal("agent is not registered")
	}
	td.stop()
	state := td.cfg.Paths.StateDir

	// A queue item as releases before the journal kept it.
	eml := []byte("From: agent@example.test\r\nTo: x@remote.test\r\nSubject: fixture legacy item\r\nMessage-ID: <legacy-1@example.test>\r\n\r\nqueued before the journal\r\n")
	it := queue.Item{ID: fixtureLegacyItem, Mailbox: "agent", MailboxID: rec.ID, MessageID: "<legacy-1@example.test>", MailFrom: "agent@example.test",
		Recipients: []protocol.RecipientStatus{{Address: "y@remote.test", Status: "held"}}, Created: time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC),
		Held: true, Size: int64(len(eml))}
	js, _ := json.Marshal(&it)
	os.WriteFile(filepath.Join(state, "queue", fixtureLegacyItem+".json"), js, 0o600)
	os.WriteFile(filepath.Join(state, "queue", fixtureLegacyItem+".eml"), eml, 0o600)
	// A mailbox's index file of the layouts before the index database.
	os.WriteFile(filepath.Join(state, "mailboxes", "agent", ".mailctl-index.inbox"), []byte("MCTLIDX3\n"), 0o600)

	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	var listing []string
	err := filepath.WalkDir(state, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(state, path)
		switch {
		case rel == ".":
			return nil
		case e.Name() == formats.StampName:
			return nil // what releases before stamps wrote
		case strings.HasSuffix(e.Name(), ".key"):
			return nil // no private key in the fixture
		case e.Type()&fs.ModeSocket != 0:
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		h.ModTime, h.AccessTime, h.ChangeTime, h.Format = info.ModTime().UTC(), time.Time{}, time.Time{}, tar.FormatPAX
		var data []byte
		if e.Type().IsRegular() {
			if data, err = os.ReadFile(path); err != nil {
				return err
			}
			if strings.HasPrefix(rel, "registry/mailboxes/") {
				data = bytes.ReplaceAll(data, fmt.Appendf(nil, `"owner_uid": %d`, rec.OwnerUID), fmt.Appendf(nil, `"owner_uid": %d`, fixtureUID))
				data = bytes.ReplaceAll(data, fmt.Appendf(nil, `"owner_gid": %d`, rec.OwnerGID), fmt.Appendf(nil, `"owner_gid": %d`, fixtureUID))
				h.Size = int64(len(data))
			}
		}
		if strings.HasPrefix(rel, "mailboxes/agent") {
			h.Uid, h.Gid = fixtureUID, fixtureUID
		}
		listing = append(listing, fmt.Sprintf("%s %o %d", h.Name, h.Mode&0o7777, h.Size))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", fixtureName), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sort.Strings(listing)
	head := "# The files of " + fixtureName + " (path, mode, bytes), written by TestWriteFixtureStore.\n"
	if err := os.WriteFile(filepath.Join("testdata", strings.TrimSuffix(fixtureName, ".tar.gz")+".txt"), []byte(head+strings.Join(listing, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// extractFixture unpacks the fixture into a new state directory under dir
// and returns it. The mailbox owner's files and registry record go to uid
// and gid (chown needs root; otherwise they are the caller's anyway);
// everything else is the caller's.
func extractFixture(t *testing.T, dir string, uid, gid int) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", fixtureName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o711); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("fixture entry %q leaves the directory", h.Name)
		}
		path := filepath.Join(state, filepath.FromSlash(h.Name))
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.Mkdir(path, mode)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				if strings.HasPrefix(h.Name, "registry/mailboxes/") {
					data = bytes.ReplaceAll(data, fmt.Appendf(nil, `"owner_uid": %d`, fixtureUID), fmt.Appendf(nil, `"owner_uid": %d`, uid))
					data = bytes.ReplaceAll(data, fmt.Appendf(nil, `"owner_gid": %d`, fixtureUID), fmt.Appendf(nil, `"owner_gid": %d`, gid))
				}
				err = os.WriteFile(path, data, mode)
			}
		default:
			t.Fatalf("fixture entry %q of type %c", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Chmod(path, mode) // past the umask
		}
		if err == nil && h.Uid == fixtureUID && os.Geteuid() == 0 {
			err = os.Lchown(path, uid, gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return state
}

// fixtureDaemonConfig writes a config whose state directory is state, as
// startDaemon's, with sends held.
func fixtureDaemonConfig(t *testing.T, dir string) string {
	t.Helper()
	text := fmt.Sprintf(`hostname = "mx.example.test"
domains = ["example.test"]
[send]
hold = true
[paths]
state_dir = %q
socket = %q
dkim_dir = %q
[smtp]
listen = ["127.0.0.1:0"]
`, filepath.Join(dir, "state"), filepath.Join(dir, "run", "mailctl.sock"), filepath.Join(dir, "dkim"))
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newFixtureDir is a directory for a daemon on the fixture, which other
// users (the mailbox owner) can enter.
func newFixtureDir(t *testing.T) string {
	t.Helper()
	return testusers.SharedDir(t)
}
