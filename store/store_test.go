package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestStore opens a store in a temporary directory with a mailbox "agent"
// owned by the current user.
func newTestStore(t testing.TB) *Store {
	t.Helper()
	dir := t.TempDir()
	s, err := OpenIndexed(filepath.Join(dir, "mailboxes"), filepath.Join(dir, "index", IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	return s
}

var t0 = time.Date(2025, 4, 15, 14, 30, 22, 0, time.UTC)

func testMessage(i int) *Message {
	return &Message{
		MessageID:  fmt.Sprintf("<m%d@example.com>", i),
		From:       fmt.Sprintf("Sender %d <s%d@example.com>", i, i),
		To:         []string{"agent@example.org"},
		Subject:    fmt.Sprintf("Message %d", i),
		Date:       t0.Add(time.Duration(i) * time.Minute),
		ReceivedAt: t0.Add(time.Duration(i) * time.Minute),
		Trusted:    "none",
	}
}

func deliver(t testing.TB, s *Store, folder string, m *Message, body string) string {
	t.Helper()
	id, dup, err := s.Deliver("agent", folder, m, body, []byte("raw "+m.Subject), nil)
	if err != nil || dup {
		t.Fatalf("Deliver: id %q dup %v err %v", id, dup, err)
	}
	return id
}

func TestOpenCreatesRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "mailboxes")
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o711 {
		t.Errorf("root mode %v, want 0711", fi.Mode().Perm())
	}
	if s.Root() != root || s.Path("x") != filepath.Join(root, "x") {
		t.Errorf("Root %q Path %q", s.Root(), s.Path("x"))
	}
}

func TestCreate(t *testing.T) {
	s := newTestStore(t)
	for _, f := range Folders {
		fi, err := os.Lstat(filepath.Join(s.Path("agent"), f))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("folder %s: %v %v", f, fi, err)
		}
	}
	fi, _ := os.Stat(s.Path("agent"))
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("mailbox mode %v, want 0700", fi.Mode().Perm())
	}
	created, err := s.Create("agent", os.Getuid(), os.Getgid())
	if err != nil || created {
		t.Errorf("second Create: created %v err %v, want false nil", created, err)
	}
	// A removed folder is repaired by Create.
	os.Remove(filepath.Join(s.Path("agent"), "drafts"))
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Path("agent"), "drafts")); err != nil {
		t.Errorf("drafts not recreated: %v", err)
	}
	uid, gid, err := s.Owner("agent")
	if err != nil || uid != os.Getuid() || gid != os.Getgid() {
		t.Errorf("Owner = %d %d %v", uid, gid, err)
	}
	if !s.Exists("agent") || s.Exists("nobody") {
		t.Errorf("Exists is wrong")
	}
	if _, err := s.Create("Bad/Name", 0, 0); err == nil {
		t.Errorf("Create accepted an invalid name")
	}
	if _, _, err := s.Owner("nobody"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Owner(nobody) = %v, want ErrNotFound", err)
	}
	names, err := s.Mailboxes()
	if err != nil || !slices.Equal(names, []string{"agent"}) {
		t.Errorf("Mailboxes = %v %v", names, err)
	}
}

func TestCreateOwnerMismatch(t *testing.T) {
	s := newTestStore(t)
	_, err := s.Create("agent", os.Getuid()+1, os.Getgid())
	if !errors.Is(err, ErrOwnerMismatch) {
		t.Errorf("Create with another owner = %v, want ErrOwnerMismatch", err)
	}
}

func TestDeliverGetRaw(t *testing.T) {
	s := newTestStore(t)
	m := testMessage(1)
	atts := []AttachmentData{
		{Filename: "../../report.pdf", ContentType: "application/pdf", Data: []byte("%PDF")},
		{Filename: "report.pdf", ContentType: "application/pdf", Data: []byte("%PDF2")},
		{Filename: "", ContentType: "text/plain", Data: []byte("x")},
	}
	id, dup, err := s.Deliver("agent", "inbox", m, "Hello **there**", []byte("raw message"), atts)
	if err != nil || dup {
		t.Fatal(id, dup, err)
	}
	if id != "2025-04-15-143122-message-1" || m.ID != id || m.Mailbox != "agent" || m.SizeBytes != 11 {
		t.Errorf("id %q m.ID %q mailbox %q size %d", id, m.ID, m.Mailbox, m.SizeBytes)
	}
	wantAtts := []Attachment{
		{Filename: "report.pdf", ContentType: "application/pdf", Size: 4, Path: id + ".attachments/report.pdf"},
		{Filename: "report-2.pdf", ContentType: "application/pdf", Size: 5, Path: id + ".attachments/report-2.pdf"},
		{Filename: "attachment", ContentType: "text/plain", Size: 1, Path: id + ".attachments/attachment"},
	}
	if !slices.Equal(m.Attachments, wantAtts) {
		t.Errorf("attachments:\n-want %+v\n+got  %+v", wantAtts, m.Attachments)
	}
	got, body, err := s.Get("agent", "inbox", id)
	if err != nil {
		t.Fatal(err)
	}
	if body != "Hello **there**" || got.Subject != "Message 1" || !slices.Equal(got.Attachments, wantAtts) {
		t.Errorf("Get = %+v %q", got, body)
	}
	raw, err := s.Raw("agent", "inbox", id, 1<<20)
	if err != nil || string(raw) != "raw message" {
		t.Errorf("Raw = %q %v", raw, err)
	}
	if _, err := s.Raw("agent", "inbox", id, 5); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Raw over max = %v, want ErrTooLarge", err)
	}
	data, err := os.ReadFile(filepath.Join(s.Path("agent"), "inbox", wantAtts[1].Path))
	if err != nil || string(data) != "%PDF2" {
		t.Errorf("attachment file: %q %v", data, err)
	}
	for _, name := range []string{id + ".md", id + ".eml", wantAtts[0].Path} {
		fi, err := os.Stat(filepath.Join(s.Path("agent"), "inbox", name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", name, fi, err)
		}
	}
	for _, bad := range []string{"../x", ".hidden", "", "nope"} {
		if _, _, err := s.Get("agent", "inbox", bad); err == nil {
			t.Errorf("Get(%q) succeeded", bad)
		}
	}
	if _, _, err := s.Get("agent", "inbox", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(nope) = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get("agent", "../agent", id); err == nil {
		t.Errorf("Get with folder ../agent succeeded")
	}
}

func TestDeliverCollision(t *testing.T) {
	s := newTestStore(t)
	id1 := deliver(t, s, "inbox", testMessage(1), "a")
	// Same time and subject, another Message-ID: a suffixed id.
	m := testMessage(1)
	m.MessageID = "<other@example.com>"
	id2 := deliver(t, s, "inbox", m, "b")
	m = testMessage(1)
	m.MessageID = ""
	id3 := deliver(t, s, "inbox", m, "c")
	if id2 != id1+"-2" || id3 != id1+"-3" {
		t.Errorf("ids %q %q, want %q-2 and -3", id2, id3, id1)
	}
	if got, ok := s.FindByMessageID("agent", "inbox", "<other@example.com>"); !ok || got != id2 {
		t.Errorf("FindByMessageID = %q %v", got, ok)
	}
}

func TestDeliverConcurrent(t *testing.T) {
	s := newTestStore(t)
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := testMessage(0) // same time and subject for all
			m.MessageID = ""
			deliver := s.Deliver
			if i%2 == 0 {
				// Ten repeats of one delivery, racing each other.
				m.MessageID = "<same@example.com>"
				deliver = func(mb, f string, m *Message, body string, raw []byte, atts []AttachmentData) (string, bool, error) {
					return s.DeliverOnce(DeliveryKey{1}, mb, f, m, body, raw, atts)
				}
			}
			id, _, err := deliver("agent", "inbox", m, "x", []byte("raw"), nil)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
			if _, err := s.List("agent", "inbox", Query{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	p, err := s.List("agent", "inbox", Query{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	if p.Total != 11 { // 10 distinct + 1 for the repeated delivery
		t.Errorf("Total = %d, want 11", p.Total)
	}
	for _, id := range ids {
		if _, _, err := s.Get("agent", "inbox", id); err != nil {
			t.Errorf("Get(%q): %v", id, err)
		}
	}
}

func TestSetReadUpdateCounts(t *testing.T) {
	s := newTestStore(t)
	a := deliver(t, s, "inbox", testMessage(1), "a")
	b := deliver(t, s, "inbox", testMessage(2), "b")
	deliver(t, s, "sent", testMessage(3), "c")
	c, err := s.Counts("agent")
	if err != nil || c != (Counts{Total: 2, Unread: 2, Sent: 1}) {
		t.Errorf("Counts = %+v %v", c, err)
	}
	now := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	changed, nf, err := s.SetRead("agent", "inbox", []string{a, "missing", a, "../x"}, true, now)
	if err != nil || !slices.Equal(changed, []string{a}) || !slices.Equal(nf, []string{"missing", "../x"}) {
		t.Errorf("SetRead = %v %v %v", changed, nf, err)
	}
	changed, _, _ = s.SetRead("agent", "inbox", []string{a}, true, now)
	if len(changed) != 0 {
		t.Errorf("SetRead of a read message changed %v", changed)
	}
	m, body, _ := s.Get("agent", "inbox", a)
	if !m.Read || m.ReadAt == nil || !m.ReadAt.Equal(now) || body != "a" {
		t.Errorf("after SetRead: read %v read_at %v body %q", m.Read, m.ReadAt, body)
	}
	c, _ = s.Counts("agent")
	if c.Unread != 1 {
		t.Errorf("Unread = %d, want 1", c.Unread)
	}
	s.SetRead("agent", "inbox", []string{a}, false, now)
	if m, _, _ := s.Get("agent", "inbox", a); m.Read || m.ReadAt != nil {
		t.Errorf("after unread: %v %v", m.Read, m.ReadAt)
	}
	err = s.Update("agent", "inbox", b, func(m *Message) error { m.DeliveryStatus = "delivered"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.List("agent", "inbox", Query{})
	if p.Items[0].ID != b || p.Items[0].DeliveryStatus != "delivered" {
		t.Errorf("List after Update: %+v", p.Items[0])
	}
	boom := errors.New("boom")
	if err := s.Update("agent", "inbox", b, func(*Message) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Update error = %v", err)
	}
	if err := s.Update("agent", "inbox", "missing", func(*Message) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("Update(missing) = %v", err)
	}
}

func TestMove(t *testing.T) {
	s := newTestStore(t)
	id, _, err := s.Deliver("agent", "inbox", testMessage(1), "body", []byte("raw"),
		[]AttachmentData{{Filename: "a.txt", Data: []byte("A")}})
	if err != nil {
		t.Fatal(err)
	}
	s.List("agent", "archive", Query{}) // load the destination index
	if err := s.Move("agent", id, "inbox", "archive"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get("agent", "inbox", id); !errors.Is(err, ErrNotFound) {
		t.Errorf("still in inbox: %v", err)
	}
	m, body, err := s.Get("agent", "archive", id)
	if err != nil || body != "body" {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.Path("agent"), "archive", m.Attachments[0].Path))
	if err != nil || string(data) != "A" {
		t.Errorf("attachment after move: %q %v", data, err)
	}
	if raw, err := s.Raw("agent", "archive", id, 100); err != nil || string(raw) != "raw" {
		t.Errorf("raw after move: %q %v", raw, err)
	}
	p, _ := s.List("agent", "archive", Query{})
	if p.Total != 1 || p.Items[0].ID != id || p.Items[0].Folder != "archive" {
		t.Errorf("archive listing: %+v", p)
	}
	if p, _ := s.List("agent", "inbox", Query{}); p.Total != 0 {
		t.Errorf("inbox listing: %+v", p)
	}
	// An id taken in the destination is refused, and nothing moves: the
	// inbox gets a file of the same id (as its owner may write one), with
	// another body.
	archived, err := os.ReadFile(filepath.Join(s.Path("agent"), "archive", id+".md"))
	if err != nil {
		t.Fatal(err)
	}
	cut := bytes.LastIndex(archived, []byte("body"))
	other := append(archived[:cut:cut], "other"...)
	if err := os.WriteFile(filepath.Join(s.Path("agent"), "inbox", id+".md"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Move("agent", id, "inbox", "archive"); !errors.Is(err, ErrExists) {
		t.Errorf("Move onto existing = %v, want ErrExists", err)
	}
	if _, body, _ := s.Get("agent", "inbox", id); body != "other" {
		t.Errorf("source changed by failed move: %q", body)
	}
	if err := s.Move("agent", "missing", "inbox", "trash"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Move(missing) = %v", err)
	}
}

func TestDelete(t *testing.T) {
	s := newTestStore(t)
	if err := s.Delete("agent", false); err != nil {
		t.Fatalf("Delete of empty mailbox: %v", err)
	}
	if s.Exists("agent") {
		t.Fatal("mailbox still exists")
	}
	s.Create("agent", os.Getuid(), os.Getgid())
	deliver(t, s, "trash", testMessage(1), "x")
	if err := s.Delete("agent", false); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Delete of non-empty = %v, want ErrNotEmpty", err)
	}
	if err := s.Delete("agent", true); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(s.Root())
	if len(entries) != 0 {
		t.Errorf("root not empty after delete: %v", entries)
	}
	if err := s.Delete("agent", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of missing = %v, want ErrNotFound", err)
	}
	// A fresh mailbox of the same name starts empty (no stale index).
	s.Create("agent", os.Getuid(), os.Getgid())
	if p, err := s.List("agent", "trash", Query{}); err != nil || p.Total != 0 {
		t.Errorf("List after re-create: %+v %v", p, err)
	}
}

func TestListPaging(t *testing.T) {
	s := newTestStore(t)
	for i := range 25 {
		m := testMessage(i)
		if i%3 == 0 {
			m.Read = true
		}
		if i%5 == 0 {
			m.Trusted = "true"
			m.Subject = "Invoice " + m.Subject
		}
		switch i {
		case 0:
			m.From = `"s9@example.com spoof.example" <s0@example.com>`
		case 1:
			m.From = `"` + strings.Repeat("x <y@z.example> ", 100) + `" <s1@example.com>`
		}
		deliver(t, s, "inbox", m, fmt.Sprintf("body number %d   with\n\nspaces", i))
	}
	// Newest first, pages of 10 through the cursor.
	var seen []string
	q := Query{Limit: 10}
	for pages := 0; ; pages++ {
		p, err := s.List("agent", "inbox", q)
		if err != nil {
			t.Fatal(err)
		}
		if p.Total != 25 {
			t.Fatalf("Total = %d", p.Total)
		}
		for _, it := range p.Items {
			seen = append(seen, it.Subject)
		}
		if !p.HasMore {
			if p.NextCursor != "" || pages != 2 {
				t.Errorf("last page: cursor %q pages %d", p.NextCursor, pages)
			}
			break
		}
		q.Cursor = p.NextCursor
	}
	if len(seen) != 25 || seen[0] != "Message 24" || seen[24] != "Invoice Message 0" {
		t.Errorf("order: %v", seen)
	}
	yes, no := true, false
	tests := []struct {
		name  string
		q     Query
		total int
		first string
	}{
		{"offset", Query{Offset: 20}, 25, "Message 4"},
		{"unread", Query{Unread: &yes}, 16, "Message 23"},
		{"read", Query{Unread: &no}, 9, "Message 24"},
		{"trusted", Query{Trusted: &yes}, 5, "Invoice Message 20"},
		{"subject", Query{Subject: "invoice"}, 5, "Invoice Message 20"},
		{"from", Query{From: "S7@EXAMPLE"}, 1, "Message 7"},
		{"from a name", Query{From: "sender 7"}, 1, "Message 7"},
		{"from a domain", Query{From: "example.com"}, 25, "Message 24"},
		// Regression: an address filter matched the display name the
		// sender typed (Message 0's is "s9@example.com").
		{"from an address, not the name", Query{From: "s9@example.com"}, 1, "Message 9"},
		{"from a domain, not the name", Query{From: "spoof.example"}, 0, ""},
		{"from an address after a long name", Query{From: "s1@example.com"}, 1, "Message 1"},
		{"from a domain only a long name holds", Query{From: "z.example"}, 0, ""},
		{"text in snippet", Query{Text: "NUMBER 13 WITH SPACES"}, 1, "Message 13"},
		{"since until", Query{Since: ptr(t0.Add(10 * time.Minute)), Until: ptr(t0.Add(12 * time.Minute))}, 2, "Message 11"},
		{"limit clamp", Query{Limit: 1000}, 25, "Message 24"},
		{"nothing", Query{Subject: "zzz"}, 0, ""},
	}
	for _, tt := range tests {
		p, err := s.List("agent", "inbox", tt.q)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		first := ""
		if len(p.Items) > 0 {
			first = p.Items[0].Subject
		}
		if p.Total != tt.total || first != tt.first {
			t.Errorf("%s: total %d first %q, want %d %q", tt.name, p.Total, first, tt.total, tt.first)
		}
	}
	p, _ := s.List("agent", "inbox", Query{Limit: 1})
	if it := p.Items[0]; it.Snippet != "body number 24 with spaces" || it.Folder != "inbox" || it.MessageID != "<m24@example.com>" {
		t.Errorf("summary: %+v", it)
	}
	if _, err := s.List("agent", "inbox", Query{Cursor: "!!"}); !errors.Is(err, ErrInvalidCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	if _, err := s.List("agent", "nope", Query{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing folder: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestSnippet(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"  a \n\n b\t c  ", 160, "a b c"},
		{"abcdef", 3, "abc"},
		{"ab cd", 3, "ab "},
		{"é\x00è", 10, "é è"},
		{"\xff", 10, "\uFFFD"},
		{strings.Repeat("x ", 1<<20), 5, "x x x"},
	}
	for _, tt := range tests {
		if got := Snippet(tt.in, tt.n); got != tt.want {
			t.Errorf("Snippet(%q, %d) = %q, want %q", trunc(tt.in), tt.n, got, tt.want)
		}
	}
}

func TestDirReadFileRefusals(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("hello"), 0o600)
	os.Symlink("f", filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	if err := mkfifo(filepath.Join(dir, "fifo")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b, err := d.ReadFile("f", 5); err != nil || string(b) != "hello" {
		t.Errorf("ReadFile = %q %v", b, err)
	}
	if _, err := d.ReadFile("f", 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over max: %v", err)
	}
	for _, name := range []string{"link", "sub", "fifo", "../f", "", ".."} {
		if _, err := d.ReadFile(name, 100); err == nil {
			t.Errorf("ReadFile(%q) succeeded", name)
		}
	}
	if _, err := d.OpenDir("link"); err == nil {
		t.Errorf("OpenDir followed a symlink")
	}
	if _, err := OpenDir(filepath.Join(dir, "link")); err == nil {
		t.Errorf("OpenDir(path) opened a symlink to a file")
	}
	os.Symlink("sub", filepath.Join(dir, "dirlink"))
	if _, err := OpenDir(filepath.Join(dir, "dirlink")); err == nil {
		t.Errorf("OpenDir(path) followed a symlink to a directory")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "reg.toml")
	for _, content := range []string{"one", "two"} {
		if err := WriteFileAtomic(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if string(b) != content || fi.Mode().Perm() != 0o640 {
			t.Errorf("got %q %v", b, fi.Mode())
		}
	}
	// Replacing a symlink replaces the link, not its target.
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o600)
	os.Remove(p)
	os.Symlink(target, p)
	if err := WriteFileAtomic(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("target written through a symlink: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func TestCleanTemps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{".tmp-old", ".tmp-new", "keep.md"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	os.Chtimes(filepath.Join(dir, ".tmp-old"), old, old)
	os.Chtimes(filepath.Join(dir, "keep.md"), old, old)
	d, _ := OpenDir(dir)
	defer d.Close()
	CleanTemps(d)
	left := names(t, d)
	slices.Sort(left)
	if !slices.Equal(left, []string{".tmp-new", "keep.md"}) {
		t.Errorf("after CleanTemps: %v", left)
	}
}

func TestRemoveAllDoesNotFollow(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o600)
	os.MkdirAll(filepath.Join(dir, "tree", "a", "b"), 0o700)
	os.WriteFile(filepath.Join(dir, "tree", "a", "b", "f"), []byte("x"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "tree", "a", "link"))
	os.Symlink(filepath.Join(outside, "keep"), filepath.Join(dir, "tree", "flink"))
	d, _ := OpenDir(dir)
	defer d.Close()
	if err := d.RemoveAll("tree"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "tree")); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || !bytes.Equal(b, []byte("x")) {
		t.Errorf("outside file touched: %q %v", b, err)
	}
	if err := d.RemoveAll("tree"); err != nil {
		t.Errorf("RemoveAll of missing: %v", err)
	}
}

func TestMkdirOwnedRepairsMode(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sub, err := d.MkdirOwned("sub", 0o700, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	if fi, _ := os.Stat(filepath.Join(dir, "sub")); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", fi.Mode().Perm())
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00"} {
		if _, err := d.MkdirOwned(bad, 0o700, -1, -1); err == nil {
			t.Errorf("MkdirOwned(%q) succeeded", bad)
		}
	}
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o600)
	if _, err := d.MkdirOwned("file", 0o700, -1, -1); err == nil {
		t.Errorf("MkdirOwned over a file succeeded")
	}
	if err := d.Remove("sub"); err != nil {
		t.Errorf("Remove(dir): %v", err)
	}
	if err := d.Remove("file"); err != nil {
		t.Errorf("Remove(file): %v", err)
	}
}

func TestConcurrentMixedOperations(t *testing.T) {
	s := newTestStore(t)
	var ids []string
	for i := range 20 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), "b"))
	}
	var wg sync.WaitGroup
	run := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				f(i)
			}
		}()
	}
	run(func(i int) { s.SetRead("agent", "inbox", []string{ids[i]}, i%2 == 0, time.Now()) })
	run(func(i int) {
		if i%4 == 0 {
			s.Move("agent", ids[i], "inbox", "archive")
		}
	})
	run(func(i int) { s.List("agent", "inbox", Query{Limit: 5}) })
	run(func(i int) { s.Counts("agent") })
	run(func(i int) {
		m := testMessage(100 + i)
		s.Deliver("agent", "inbox", m, "new", nil, nil)
	})
	run(func(i int) {
		s.Update("agent", "inbox", ids[(i+1)%20], func(m *Message) error { m.Labels = []string{"x"}; return nil })
	})
	wg.Wait()
	inbox, _ := s.List("agent", "inbox", Query{Limit: MaxLimit})
	archive, _ := s.List("agent", "archive", Query{Limit: MaxLimit})
	if inbox.Total != 35 || archive.Total != 5 {
		t.Errorf("inbox %d archive %d, want 35 and 5", inbox.Total, archive.Total)
	}
}

// Many messages with one subject in one second take base, base-2, base-3...
// in order; a name someone else took meanwhile (a file the owner wrote) is
// passed over, and ids stay unique after a removal.
func TestSameSubjectInOneSecondGetsTheNextSuffix(t *testing.T) {
	s := newTestStore(t)
	m := func(i int) *Message {
		msg := testMessage(i)
		msg.Subject, msg.ReceivedAt = "Same subject", t0
		return msg
	}
	base := NewID(t0, "Same subject")
	seen := map[string]bool{}
	for i := range 300 {
		id := deliver(t, s, "inbox", m(i), "body")
		want := base
		if i > 0 {
			want = fmt.Sprintf("%s-%d", base, i+1)
		}
		if id != want {
			t.Fatalf("message %d got id %s, want %s", i, id, want)
		}
		seen[id] = true
	}
	planted := filepath.Join(s.Root(), "agent", "inbox", base+"-302.md")
	if err := os.WriteFile(planted, []byte("+++\n+++\nplanted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMessage("agent", "inbox", base+"-2"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{base + "-301", base + "-303"} {
		if id := deliver(t, s, "inbox", m(300+i), "body"); id != want {
			t.Fatalf("after a planted %s-302.md: got id %s, want %s", base, id, want)
		}
	}
}

// GetUpTo reads a message file only within the bound its caller gives (the
// daemon's own sent copy, which its owner may have replaced with a larger
// file), checked before a byte is read.
func TestGetUpToBoundsTheFile(t *testing.T) {
	s := newTestStore(t)
	id := deliver(t, s, "inbox", testMessage(1), strings.Repeat("body ", 1000))
	fi, err := os.Stat(filepath.Join(s.Path("agent"), "inbox", id+".md"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetUpTo("agent", "inbox", id, fi.Size()-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file one byte over the bound: %v, want ErrTooLarge", err)
	}
	m, body, err := s.GetUpTo("agent", "inbox", id, fi.Size())
	if err != nil || m.Subject != "Message 1" || !strings.HasPrefix(body, "body body") {
		t.Fatalf("a file at the bound: %v %+v %q", err, m, body[:min(len(body), 20)])
	}
}
