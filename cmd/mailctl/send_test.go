package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestAttachFilesAreBoundedTogether: each --attach file was read up to
// what a request may carry, so a list of large files (sparse here) was all
// in memory before the request was refused as too large, with words about
// frames rather than attachments. The files together are bounded now: the
// one that passes the bound is named, and nothing after it is read.
func TestAttachFilesAreBoundedTogether(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, name := range []string{"a.bin", "b.bin", "c.bin"} {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(protocol.MaxFrame/2 + 1); err != nil {
			t.Fatal(err)
		}
		f.Close()
		paths = append(paths, p)
	}
	atts, err := readAttachmentFiles(paths[:1])
	if err != nil || len(atts) != 1 {
		t.Fatalf("one file under the bound: %d read, %v", len(atts), err)
	}
	atts, err = readAttachmentFiles(paths)
	if err == nil || !strings.Contains(err.Error(), "b.bin") || !strings.Contains(err.Error(), "attachments") {
		t.Fatalf("files over the bound together: %d read, err %v; want an error naming b.bin", len(atts), err)
	}
}
