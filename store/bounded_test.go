package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// withBigBody replaces message id's file of folder with its frontmatter
// and a body of size bytes (sparse: NULs after "hello\n").
func withBigBody(t *testing.T, s *Store, folder, id string, size int64) string {
	t.Helper()
	m, _, err := s.Get("agent", folder, id)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.Path("agent"), folder, id+".md")
	if err := os.WriteFile(path, Render(m, "hello\n"), FileMode); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every read of a message file is charged before it starts, for what its
// fstat says the read will hold (the frontmatter, not the body); a refused
// charge is the read's error, and nothing is changed.
func TestChargeComesBeforeTheRead(t *testing.T) {
	s := newTestStore(t)
	id := deliver(t, s, "inbox", testMessage(1), "hello")
	path := withBigBody(t, s, "inbox", id, 40<<20)
	refused := errors.New("refused")
	var asked []int64
	c := s.Charged(func(n int64) (func(), error) {
		asked = append(asked, n)
		return nil, refused
	})
	reads := map[string]func() error{
		"Header":    func() error { _, err := c.Header("agent", "inbox", id); return err },
		"GetWindow": func() error { _, _, err := c.GetWindow("agent", "inbox", id, 0, 10, false); return err },
		"SetRead":   func() error { _, _, err := c.SetRead("agent", "inbox", []string{id}, true, time.Now()); return err },
		"Relabel": func() error {
			_, _, err := c.Relabel("agent", "inbox", []string{id}, []string{"x"}, nil, nil)
			return err
		},
		"Move": func() error { return c.Move("agent", id, "inbox", "archive") },
		"Rewrite": func() error {
			return c.Rewrite("agent", "inbox", id, func(*Message) (*string, error) { return nil, nil }, nil)
		},
	}
	for name, read := range reads {
		asked = nil
		if err := read(); !errors.Is(err, refused) {
			t.Errorf("%s with the charge refused: %v", name, err)
		}
		if len(asked) != 1 || asked[0] != frontmatterCost(40<<20) || asked[0] > 16<<20 {
			t.Errorf("%s asked %v, want once the frontmatter's cost %d", name, asked, frontmatterCost(40<<20))
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 40<<20 {
		t.Fatalf("the message changed: %v", err)
	}
}

// Changing a message's frontmatter copies its body without holding it:
// the body comes out byte for byte, and what was charged (and given back)
// is the frontmatter's cost.
func TestFrontmatterChangeStreamsTheBody(t *testing.T) {
	s := newTestStore(t)
	id := deliver(t, s, "inbox", testMessage(1), "hello")
	path := withBigBody(t, s, "inbox", id, 20<<20)
	before, _ := os.ReadFile(path)
	var held, most int64
	c := s.Charged(func(n int64) (func(), error) {
		held += n
		most = max(most, held)
		return func() { held -= n }, nil
	})
	if changed, _, err := c.SetRead("agent", "inbox", []string{id}, true, time.Now()); err != nil || len(changed) != 1 {
		t.Fatalf("SetRead: %v %v", changed, err)
	}
	if held != 0 || most != frontmatterCost(20<<20) {
		t.Errorf("charged at most %d, %d still held; want %d and nothing", most, held, frontmatterCost(20<<20))
	}
	after, _ := os.ReadFile(path)
	_, oldBody, _ := bytes.Cut(before, []byte("+++\n\n"))
	_, newBody, _ := bytes.Cut(after, []byte("+++\n\n"))
	if !bytes.Equal(oldBody, newBody) || !bytes.Contains(after, []byte("read = true")) {
		t.Fatalf("the body changed (%d bytes, was %d) or the flag was not written", len(newBody), len(oldBody))
	}
	m, w, err := s.GetWindow("agent", "inbox", id, 0, 5, false)
	if err != nil || !m.Read || w.Text != "hello" {
		t.Fatalf("after: %+v %q %v", m, w.Text, err)
	}
}

// A draft's file and its attachments are sized with fstat and refused past
// their limits before any is read, naming the file.
func TestReadDraftRefusesFromFstat(t *testing.T) {
	s := newTestStore(t)
	id, _, err := s.Deliver("agent", "drafts", testMessage(1), "body", nil, []AttachmentData{{Filename: "a.bin", Data: make([]byte, 1000)}})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Charged(nil)
	if dr, release, err := c.ReadDraft("agent", "drafts", id, DraftLimits{File: 1 << 20, Attachments: 1000}); err != nil || dr.Body != "body" || len(dr.Attachments) != 1 {
		t.Fatalf("within the limits: %+v %v", dr, err)
	} else {
		release()
	}
	var le *LimitError
	_, _, err = c.ReadDraft("agent", "drafts", id, DraftLimits{File: 1 << 20, Attachments: 999})
	if !errors.As(err, &le) || le.What != "attachments" || !strings.HasSuffix(le.Path, "a.bin") || !errors.Is(err, ErrTooLarge) {
		t.Errorf("attachments over the limit: %v", err)
	}
	_, _, err = c.ReadDraft("agent", "drafts", id, DraftLimits{File: 10, Attachments: 1000})
	if !errors.As(err, &le) || le.What != "file" || !strings.HasSuffix(le.Path, id+".md") {
		t.Errorf("file over the limit: %v", err)
	}
	// No limit set (zero) is the store's own bound, not zero bytes.
	if _, release, err := c.ReadDraft("agent", "drafts", id, DraftLimits{}); err != nil {
		t.Errorf("no limits set: %v", err)
	} else {
		release()
	}
}

// A draft's Digest names its content, not its files: copied into new files
// (as a restore on another host writes them: new inodes, new times) it is
// the same, with another Version; DraftDigest, which streams the files,
// agrees with ReadDraft; a changed byte of the Markdown or of an
// attachment is another digest.
func TestDraftDigestIsTheContent(t *testing.T) {
	s := newTestStore(t)
	id, _, err := s.Deliver("agent", "drafts", testMessage(1), "body", nil, []AttachmentData{{Filename: "a.bin", Data: []byte("attached")}})
	if err != nil {
		t.Fatal(err)
	}
	digests := func() (read, streamed, version string) {
		t.Helper()
		dr, release, err := s.Charged(nil).ReadDraft("agent", "drafts", id, DraftLimits{})
		if err != nil {
			t.Fatal(err)
		}
		release()
		if streamed, err = s.DraftDigest("agent", "drafts", id); err != nil {
			t.Fatal(err)
		}
		if version, err = s.Version("agent", "drafts", id); err != nil {
			t.Fatal(err)
		}
		return dr.Digest, streamed, version
	}
	read, streamed, version := digests()
	if read == "" || read != streamed {
		t.Fatalf("ReadDraft's digest %q, DraftDigest's %q: want the same", read, streamed)
	}
	drafts := filepath.Join(s.Path("agent"), "drafts")
	md, att := filepath.Join(drafts, id+".md"), filepath.Join(drafts, id+".attachments", "a.bin")
	rewrite := func(path string, edit func([]byte) []byte) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tmp := path + ".new"
		if err := os.WriteFile(tmp, edit(data), FileMode); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Hour)
		if err := os.Chtimes(tmp, later, later); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	same := func(b []byte) []byte { return b }
	rewrite(md, same)
	rewrite(att, same)
	r2, s2, v2 := digests()
	if v2 == version {
		t.Fatalf("the copied draft kept its version %q", version)
	}
	if r2 != read || s2 != read {
		t.Errorf("the copied draft: digests %q and %q, want %q", r2, s2, read)
	}
	rewrite(att, func(b []byte) []byte { return append(b, '!') })
	if r3, s3, _ := digests(); r3 == read || r3 != s3 {
		t.Errorf("an attachment changed: digests %q and %q, want one new digest", r3, s3)
	}
	rewrite(att, func(b []byte) []byte { return b[:len(b)-1] })
	rewrite(md, func(b []byte) []byte { return append(b, "edited\n"...) })
	if r4, s4, _ := digests(); r4 == read || r4 != s4 {
		t.Errorf("the body changed: digests %q and %q, want one new digest", r4, s4)
	}
}

// The index reads a file's frontmatter and the start of its body, however
// large the file; a frontmatter longer than that (MaxFrontmatter and a
// head) is too large, not read whole.
func TestIndexReadsAHeadOnly(t *testing.T) {
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	id := deliver(t, s, "inbox", testMessage(1), "hello")
	withBigBody(t, s, "inbox", id, 60<<20)
	huge := "2025-01-01-000000-huge"
	if err := os.WriteFile(filepath.Join(inbox, huge+".md"), []byte("+++\nsubject = \""+strings.Repeat("x", 2*MaxFrontmatter)+"\"\n+++\n\n"), FileMode); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if r := loadRow(d, id, os.Getuid(), time.Now()); r.err != nil || r.row.sum.Snippet != "hello" {
		t.Errorf("a 60 MiB message: %+v", r)
	}
	if r := loadRow(d, huge, os.Getuid(), time.Now()); !errors.Is(r.err, ErrTooLarge) {
		t.Errorf("a frontmatter of %d bytes: %v, want ErrTooLarge", 2*MaxFrontmatter, r.err)
	}
}

// TestReadDraftRefusesTooManyAttachmentsBeforeOpeningThem hand-edits a
// draft's frontmatter to list one empty attachment thousands of times: the
// bytes stay at zero, but each listed file was opened and held until all
// were sized, so a few such drafts sent at once took every descriptor the
// daemon has. The count is refused before any attachment is opened.
func TestReadDraftRefusesTooManyAttachmentsBeforeOpeningThem(t *testing.T) {
	s := newTestStore(t)
	id, _, err := s.Deliver("agent", "drafts", testMessage(1), "body", nil, []AttachmentData{{Filename: "empty", Data: []byte{}}})
	if err != nil {
		t.Fatal(err)
	}
	m, body, err := s.Get("agent", "drafts", id)
	if err != nil || len(m.Attachments) != 1 {
		t.Fatalf("draft: %+v %v", m, err)
	}
	listed := 4 * MaxDraftAttachments
	for len(m.Attachments) < listed {
		m.Attachments = append(m.Attachments, m.Attachments[0])
	}
	if err := os.WriteFile(filepath.Join(s.Path("agent"), "drafts", id+".md"), Render(m, body), FileMode); err != nil {
		t.Fatal(err)
	}
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before, most := openFDs(), 0
	c := s.Charged(func(n int64) (func(), error) {
		most = max(most, openFDs())
		return func() {}, nil
	})
	for _, lim := range []DraftLimits{{}, {Count: 20}} {
		most = 0
		dr, release, err := c.ReadDraft("agent", "drafts", id, lim)
		if err == nil {
			release()
			t.Errorf("limits %+v: read a draft listing %d attachments (%d of them)", lim, listed, len(dr.Attachments))
		}
		var le *LimitError
		if !errors.As(err, &le) || le.What != "attachment count" || !errors.Is(err, ErrTooLarge) {
			t.Errorf("limits %+v: %v, want a LimitError on the attachment count", lim, err)
		}
		if most-before > 16 {
			t.Errorf("limits %+v: %d descriptors open while the draft was read, %d before", lim, most, before)
		}
	}
}
