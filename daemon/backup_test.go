package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestBackupRestoreRoundTrip: a snapshot of a daemon with messages in
// several folders, held sends in the queue and files an owner planted
// (a symlink to a root file, a root-owned file, a FIFO, an uncommitted raw
// copy) becomes an archive holding every message once and nothing planted;
// restored for another user and started, a daemon has every message, every
// queued item and the mailbox, owned by that user.
func TestBackupRestoreRoundTrip(t *testing.T) {
	rt := newBackupRoundTrip(t, "mcbk", "")
	td, ownerA, ownerB := rt.a, rt.ownerA, rt.ownerB
	want := map[string]string{} // Message-ID -> folder
	var sentIDs []string        // mailbox/id of each held send's sent copy
	for i := range 12 {
		mid := fmt.Sprintf("<m%d@remote.test>", i)
		raw := fmt.Sprintf("From: a@remote.test\r\nTo: bk@example.test\r\nSubject: n%d\r\nMessage-ID: %s\r\n\r\nbody %d\r\n", i, mid, i)
		id, _, err := td.store.Deliver("bk", "inbox", &store.Message{MessageID: mid, Subject: fmt.Sprint("n", i)}, "body", []byte(raw), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[mid] = "inbox"
		if i%4 == 0 {
			if err := td.store.Move("bk", id, "inbox", "archive"); err != nil {
				t.Fatal(err)
			}
			want[mid] = "archive"
		}
	}
	for i := range 3 {
		var res protocol.SendResult
		if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "bk", To: []string{"x@remote.test"}, Subject: fmt.Sprint("out", i), Body: "b"}, &res); err != nil {
			t.Fatal(err)
		}
		sentIDs = append(sentIDs, "bk/"+res.ID)
	}
	// A declared mailbox's identity includes its owner's uid: its queued
	// item and its hook made over the socket must follow the owner.
	var declRes protocol.SendResult
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "decl", To: []string{"y@remote.test"}, Subject: "declared", Body: "b"}, &declRes); err != nil {
		t.Fatal(err)
	}
	sentIDs = append(sentIDs, "decl/"+declRes.ID)
	if err := td.call(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "decl", Event: protocol.EventOnReceive, Cmd: []string{"/bin/true"}, Name: "h"}, nil); err != nil {
		t.Fatal(err)
	}
	inbox := filepath.Join(td.store.Path("bk"), "inbox")
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600)
	os.Symlink(secret, filepath.Join(inbox, "link.md"))
	os.WriteFile(filepath.Join(inbox, "rootfile.md"), []byte("ROOT-SECRET"), 0o600)
	syscall.Mkfifo(filepath.Join(inbox, "fifo.md"), 0o600)
	os.WriteFile(filepath.Join(inbox, "orphan.eml"), []byte("half"), 0o600)
	os.Lchown(filepath.Join(inbox, "link.md"), int(ownerA.UID), int(ownerA.GID))
	os.Chown(filepath.Join(inbox, "fifo.md"), int(ownerA.UID), int(ownerA.GID))
	os.Chown(filepath.Join(inbox, "orphan.eml"), int(ownerA.UID), int(ownerA.GID))

	sentInSnap := 0
	archive, st := rt.backUp(t, func(snap protocol.BackupSnapshot) {
		if snap.QueueItems != 4 {
			t.Errorf("snapshot has %d queued items, want 4", snap.QueueItems)
		}
		// A held send's sent copy is written after its first attempt, which
		// may come before or after the snapshot: the archive holds the 12
		// received messages and whichever sent copies the snapshot linked.
		filepath.WalkDir(snap.Dir, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() && strings.HasSuffix(p, ".md") && filepath.Base(filepath.Dir(p)) == "sent" {
				sentInSnap++
			}
			return nil
		})
	})
	if sentInSnap > len(sentIDs) {
		t.Errorf("the snapshot holds %d sent copies, more than the %d sends", sentInSnap, len(sentIDs))
	}
	if st.Messages != 12+sentInSnap {
		t.Errorf("archive holds %d messages, want the 12 received and the %d sent copies the snapshot linked", st.Messages, sentInSnap)
	}
	rd, err := backup.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		e, body, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(body)
		if bytes.Contains(data, []byte("ROOT-SECRET")) {
			t.Errorf("archive entry %s holds the root file's content", e.Name)
		}
		names = append(names, e.Name)
	}
	for _, n := range names {
		for _, bad := range []string{"link.md", "rootfile.md", "fifo.md", "orphan.eml"} {
			if strings.HasSuffix(n, "/"+bad) {
				t.Errorf("archive holds planted %s", n)
			}
		}
	}

	// Host B: its own config and paths, the mailbox's owner another user.
	opts := rt.hostB(t)
	if _, err := backup.Restore(bytes.NewReader(archive), opts); err != nil {
		t.Fatalf("restore: %v", err)
	}
	// Again, over the restored store: refused without --force.
	_, err = backup.Restore(bytes.NewReader(archive), opts)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore over a restored store: %v, want a refusal saying it is not empty", err)
	}
	opts.Force, opts.MapOwner = true, map[string]string{ownerA.Name: ownerB.Name}
	res, err := backup.Restore(bytes.NewReader(archive), opts)
	if err != nil {
		t.Fatalf("restore --force --map-owner: %v", err)
	}
	if res.MovedAside == "" {
		t.Error("restore --force did not say where the old state went")
	}
	if len(res.Mailboxes) != 2 || res.Mailboxes[0].Name != "bk" || res.Mailboxes[1].Name != "decl" ||
		res.Mailboxes[0].NewUID != ownerB.UID || res.Mailboxes[1].NewUID != ownerB.UID {
		t.Fatalf("restored mailboxes %+v, want bk and decl for uid %d", res.Mailboxes, ownerB.UID)
	}
	// Each held send's sent copy is restored: written in its mailbox, or
	// carried by its queue item, which writes it when the daemon starts.
	checkSentCopies(t, opts.StateDir, sentIDs)
	tb := rt.startB(t)
	got := map[string]string{}
	for _, folder := range store.Folders {
		dir := filepath.Join(tb.store.Path("bk"), folder)
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".md") {
				continue
			}
			var st syscall.Stat_t
			syscall.Lstat(filepath.Join(dir, e.Name()), &st)
			if st.Uid != ownerB.UID {
				t.Errorf("%s/%s is owned by uid %d, want %d", folder, e.Name(), st.Uid, ownerB.UID)
			}
			m, _, err := tb.store.Get("bk", folder, strings.TrimSuffix(e.Name(), ".md"))
			if err != nil {
				t.Fatal(err)
			}
			if folder == "sent" {
				continue
			}
			if prev, dup := got[m.MessageID]; dup {
				t.Errorf("%s is in %s and %s", m.MessageID, prev, folder)
			}
			got[m.MessageID] = folder
		}
	}
	if fmt.Sprint(sortedPairs(got)) != fmt.Sprint(sortedPairs(want)) {
		t.Errorf("restored messages\n got %v\nwant %v", sortedPairs(got), sortedPairs(want))
	}
	var ql protocol.QueueList
	if err := tb.call(t, protocol.VerbQueueList, protocol.Empty{}, &ql); err != nil {
		t.Fatal(err)
	}
	if len(ql.Items) != 4 {
		t.Errorf("restored queue has %d items, want 4", len(ql.Items))
	}
	decl, _ := tb.lookupMailbox("decl")
	for _, it := range tb.out.queue.List() {
		if it.Mailbox == "decl" && it.MailboxID != decl.ID {
			t.Errorf("queued item %s of decl is bound to %s, the mailbox is %s on the new host", it.ID, it.MailboxID, decl.ID)
		}
	}
	var hooks []protocol.Hook
	for _, h := range tb.allHooks() {
		if h.Mailbox == "decl" && h.Name == "h" {
			hooks = append(hooks, h)
		}
	}
	if bound := decl.Hooks(hooks); len(bound) != 1 {
		t.Errorf("the hook made on decl is bound to it %d times on the new host, want 1 (hooks %+v, mailbox %s)", len(bound), hooks, decl.ID)
	}
	var mb protocol.Mailbox
	if err := tb.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "bk"}, &mb); err != nil {
		t.Fatal(err)
	}
	if mb.OwnerUID != ownerB.UID {
		t.Errorf("restored mailbox's owner uid is %d, want %d", mb.OwnerUID, ownerB.UID)
	}
}

// backupRoundTrip is the setting the backup round-trip tests share: host
// A, a running daemon that holds its sends and declares mailbox decl for
// ownerA, where ownerA made mailbox bk over the socket; and host B,
// another directory whose config is the same but for ownerB.
type backupRoundTrip struct {
	ownerA, ownerB testusers.User
	send           string // more keys of [send]
	a              *testDaemon
	dirB, cfgB     string
}

// newBackupRoundTrip starts host A as root with two new users named after
// prefix; send is more keys of the config's [send], one a line.
func newBackupRoundTrip(t *testing.T, prefix, send string) *backupRoundTrip {
	t.Helper()
	testusers.RequireRoot(t)
	rt := &backupRoundTrip{ownerA: testusers.Create(t, prefix), ownerB: testusers.Create(t, prefix), send: send}
	rt.a = startDaemonWith(t, rt.conf(rt.ownerA.Name), Options{Resolver: &resolver.Map{}})
	if err := rt.a.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "bk", Owner: rt.ownerA.Name}, nil); err != nil {
		t.Fatal(err)
	}
	return rt
}

// conf is the config both hosts share, with decl's owner.
func (rt *backupRoundTrip) conf(owner string) string {
	return "[send]\nhold = true\n" + rt.send + "\n[[mailboxes]]\nname = \"decl\"\nowner = \"" + owner + "\"\n"
}

// backUp writes host A's archive from a snapshot, as `mailctl backup`
// does, and stops its daemon; inspect, if not nil, sees the snapshot
// before it is written.
func (rt *backupRoundTrip) backUp(t *testing.T, inspect func(protocol.BackupSnapshot)) ([]byte, *backup.Stats) {
	t.Helper()
	snap, err := rt.a.backupSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inspect != nil {
		inspect(snap)
	}
	var buf bytes.Buffer
	st, err := backup.Write(&buf, backup.Source{Snapshot: snap, ConfigFile: rt.a.cfg.File, DKIMDir: rt.a.cfg.Paths.DKIMDir,
		UserName: func(uid uint32) string { return registry.UserName(uid) }})
	os.RemoveAll(snap.Dir)
	if err != nil {
		t.Fatal(err)
	}
	rt.a.stop()
	return buf.Bytes(), st
}

// hostB makes host B's directory and config, and returns the options of
// a restore onto it.
func (rt *backupRoundTrip) hostB(t *testing.T) backup.RestoreOptions {
	t.Helper()
	rt.dirB = testusers.SharedDir(t)
	rt.cfgB = filepath.Join(rt.dirB, "config.toml")
	os.WriteFile(rt.cfgB, []byte(fmt.Sprintf("hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n"+rt.conf(rt.ownerB.Name)+"[paths]\nstate_dir = %q\nsocket = %q\ndkim_dir = %q\n[smtp]\nlisten = [\"127.0.0.1:0\"]\n",
		filepath.Join(rt.dirB, "state"), filepath.Join(rt.dirB, "run", "mailctl.sock"), filepath.Join(rt.dirB, "dkim"))), 0o600)
	return backup.RestoreOptions{StateDir: filepath.Join(rt.dirB, "state"), DKIMDir: filepath.Join(rt.dirB, "dkim"),
		ConfigFile: rt.cfgB, LookupUser: registry.ResolveUser}
}

// startB starts host B's daemon on what was restored there.
func (rt *backupRoundTrip) startB(t *testing.T) *testDaemon {
	t.Helper()
	cfg, err := config.Load(rt.cfgB)
	if err != nil {
		t.Fatal(err)
	}
	return runTestDaemon(t, cfg, rt.dirB, Options{Resolver: &resolver.Map{}})
}

func sortedPairs(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// checkSentCopies fails t unless every sent copy (mailbox/id) is a file in
// state's mailboxes or the data of its item in state's queue journal.
func checkSentCopies(t *testing.T, state string, ids []string) {
	t.Helper()
	inJournal := map[string]bool{}
	f, err := os.Open(filepath.Join(state, "queue", queue.JournalName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := queue.RewriteJournal(f, io.Discard, func(st []byte) ([]byte, error) {
		var it struct {
			Mailbox  string `json:"mailbox"`
			SentID   string `json:"sent_id"`
			CopySize int64  `json:"copy_size"`
		}
		if json.Unmarshal(st, &it) == nil && it.CopySize > 0 {
			inJournal[it.Mailbox+"/"+it.SentID] = true
		}
		return st, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		mailbox, sid, _ := strings.Cut(id, "/")
		_, err := os.Stat(filepath.Join(state, "mailboxes", mailbox, "sent", sid+".md"))
		if err != nil && !inJournal[id] {
			t.Errorf("sent copy %s is neither in the restored mailbox nor in the restored queue", id)
		}
	}
}
