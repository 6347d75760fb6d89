package store

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// streamed is a RawSource that has no bytes in memory to give: it writes
// n bytes of a pattern as a spooled message would.
type streamed struct{ n int64 }

func (s streamed) Size() int64 { return s.n }
func (s streamed) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, io.LimitReader(patternReader{}, s.n))
}

type patternReader struct{}

func (patternReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return len(p), nil
}

// TestDeliverStreamsRawAndSpills: a delivery whose raw copy streams from a
// source and whose large attachment was written, as it was decoded, into a
// spill in the folder stores both byte for byte: the spill is moved into
// the attachment folder (the same file, not a copy), owned and moded like
// every other file, and no temporary file is left in the folder.
func TestDeliverStreamsRawAndSpills(t *testing.T) {
	s := newTestStore(t)
	sp, err := s.NewSpill("agent", "inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if _, err := io.Copy(sp, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var before os.FileInfo
	if before, err = sp.f.Stat(); err != nil {
		t.Fatal(err)
	}
	m := testMessage(1)
	atts := []AttachmentData{{Filename: "big.bin", ContentType: "application/octet-stream", File: sp}, {Filename: "small.txt", ContentType: "text/plain", Data: []byte("small")}}
	id, dup, err := s.DeliverOnceFrom(sha256.Sum256([]byte("k")), "agent", "inbox", m, "body", streamed{3 << 20}, atts)
	if err != nil || dup {
		t.Fatal(id, dup, err)
	}
	folder := filepath.Join(s.Path("agent"), "inbox")
	got, err := os.ReadFile(filepath.Join(folder, id+".attachments", "big.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("attachment: %d bytes, %v", len(got), err)
	}
	after, err := os.Stat(filepath.Join(folder, id+".attachments", "big.bin"))
	if err != nil || !os.SameFile(before, after) || after.Mode().Perm() != FileMode {
		t.Errorf("attachment is not the spill moved in place with mode %v: %v %v", FileMode, after.Mode(), err)
	}
	raw, err := os.ReadFile(filepath.Join(folder, id+".eml"))
	if err != nil || int64(len(raw)) != 3<<20 || !bytes.HasPrefix(raw, []byte("abcdefghij")) {
		t.Fatalf("raw copy: %d bytes, %v", len(raw), err)
	}
	gm, _, err := s.Get("agent", "inbox", id)
	if err != nil || gm.SizeBytes != 3<<20 || len(gm.Attachments) != 2 || gm.Attachments[0].Size != int64(len(data)) {
		t.Fatalf("frontmatter: %+v %v", gm, err)
	}
	entries, _ := os.ReadDir(folder)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Errorf("temporary file %s left in the folder", e.Name())
		}
	}
	sp.Discard() // spent: does nothing
}

// TestSpillDiscardLeavesNothing: a message refused after its attachment
// began leaves no file behind.
func TestSpillDiscardLeavesNothing(t *testing.T) {
	s := newTestStore(t)
	sp, err := s.NewSpill("agent", "inbox")
	if err != nil {
		t.Fatal(err)
	}
	sp.Write([]byte("partial"))
	sp.Discard()
	entries, _ := os.ReadDir(filepath.Join(s.Path("agent"), "inbox"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Errorf("temporary file %s left after Discard", e.Name())
		}
	}
	if _, err := sp.Write([]byte("more")); err == nil {
		t.Error("a discarded spill took more bytes")
	}
}

// TestSpillIntoReplacedFolderIsCopied: when the folder a spill was started
// in is replaced before the message is stored (the owner moved it away),
// the attachment is written into the new folder from the spill's bytes,
// and the spill's file goes with the old folder.
func TestSpillIntoReplacedFolderIsCopied(t *testing.T) {
	s := newTestStore(t)
	sp, err := s.NewSpill("agent", "inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Discard()
	sp.Write([]byte("spilled bytes"))
	folder := filepath.Join(s.Path("agent"), "inbox")
	if err := os.Rename(folder, folder+"-old"); err != nil {
		t.Fatal(err)
	}
	id, _, err := s.DeliverOnceFrom(sha256.Sum256([]byte("k2")), "agent", "inbox", testMessage(2), "body", rawOf([]byte("raw")), []AttachmentData{{Filename: "a.bin", File: sp}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(folder, id+".attachments", "a.bin")); err != nil || string(got) != "spilled bytes" {
		t.Fatalf("attachment in the new folder: %q %v", got, err)
	}
	old, _ := os.ReadDir(folder + "-old")
	if len(old) != 0 {
		t.Errorf("the old folder keeps %d entries (the spill's temporary file)", len(old))
	}
}

// TestLargeBodyWrittenAsRendered: the message file of a large body is
// written without copying the body after the frontmatter, and holds the
// very bytes Render makes, on either side of copyBodyMax.
func TestLargeBodyWrittenAsRendered(t *testing.T) {
	s := newTestStore(t)
	for i, n := range []int{10, copyBodyMax, copyBodyMax + 1, 1 << 20} {
		m := testMessage(i)
		body := strings.Repeat("ä line of the body\n", n/20+1)[:n]
		id := deliver(t, s, "inbox", m, body)
		got, err := os.ReadFile(filepath.Join(s.Path("agent"), "inbox", id+".md"))
		if err != nil {
			t.Fatal(err)
		}
		stored, gotBody, err := Parse(got)
		if err != nil || gotBody != body {
			t.Fatalf("%d-byte body: read back %d bytes, %v", n, len(gotBody), err)
		}
		if want := Render(stored, body); !bytes.Equal(got, want) {
			t.Fatalf("%d-byte body: the file is not what Render makes", n)
		}
	}
	body := strings.Repeat("x", 1<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	renderedOf(testMessage(9), body).WriteTo(io.Discard)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Fatalf("writing a message file of a 1 MiB body allocated %d bytes", got)
	}
}
