package store

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refWindow is the window of s as ranging over a Go string counts it.
func refWindow(s string, off, n int) Window {
	var w Window
	var b strings.Builder
	for _, r := range s {
		_ = r
		w.Chars++
	}
	i := 0
	for pos, r := range s {
		if i >= off && i < off+n {
			size := len(string(r))
			if r == '\uFFFD' && !strings.HasPrefix(s[pos:], "\uFFFD") {
				size = 1
			}
			b.WriteString(s[pos : pos+size])
		}
		i++
	}
	w.Text, w.More = b.String(), off+n < w.Chars
	return w
}

func TestGetWindowMatchesTheWholeBody(t *testing.T) {
	s := newTestStore(t)
	bodies := []string{"", "hello", "Grüße, 世界 😀 " + strings.Repeat("é", 70000), "bad \xff\xfe utf8 \xe4\xb8", "\nstarts with a newline", "+++\nnot a delimiter"}
	for _, body := range bodies {
		m := testMessage(1)
		m.Subject = "w"
		id := deliver(t, s, "inbox", m, body)
		_, whole, err := s.Get("agent", "inbox", id)
		if err != nil {
			t.Fatal(err)
		}
		for _, win := range [][2]int{{0, 5}, {3, 70000}, {0, 1 << 20}, {69990, 20}, {1 << 20, 10}} {
			_, got, err := s.GetWindow("agent", "inbox", id, win[0], win[1], false)
			if err != nil {
				t.Fatal(err)
			}
			if want := refWindow(whole, win[0], win[1]); got != want {
				t.Errorf("body %.20q window %v: got %d chars %.30q more=%v, want %d chars %.30q more=%v",
					body, win, got.Chars, got.Text, got.More, want.Chars, want.Text, want.More)
			}
		}
	}
}

func TestGetWindowRaw(t *testing.T) {
	s := newTestStore(t)
	raw := "Subject: x\r\n\r\n" + strings.Repeat("raw line ü\r\n", 10000)
	id, _, err := s.Deliver("agent", "inbox", testMessage(1), "body", []byte(raw), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, w, err := s.GetWindow("agent", "inbox", id, 10, 100, true)
	if err != nil || m.ID != id {
		t.Fatal(m, err)
	}
	if want := refWindow(raw, 10, 100); w != want {
		t.Errorf("raw window %+v, want %+v", w, want)
	}
}

// TestGetWindowRefusesPlantedFiles: a FIFO (which would block a plain open),
// a symlink or an endless frontmatter in the owner's folder is an error,
// not a hang or a large read.
func TestGetWindowRefusesPlantedFiles(t *testing.T) {
	s := newTestStore(t)
	inbox := filepath.Join(s.Path("agent"), "inbox")
	if err := syscall.Mkfifo(filepath.Join(inbox, "2026-01-01-000000-fifo.md"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc/passwd", filepath.Join(inbox, "2026-01-01-000000-link.md"))
	os.WriteFile(filepath.Join(inbox, "2026-01-01-000000-huge.md"), []byte("+++\n"+strings.Repeat("x = 1\n", MaxFrontmatter/5)), 0o600)
	for _, id := range []string{"2026-01-01-000000-fifo", "2026-01-01-000000-link", "2026-01-01-000000-huge"} {
		done := make(chan error, 1)
		go func() { _, _, err := s.GetWindow("agent", "inbox", id, 0, 10, false); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: read", id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: GetWindow hangs", id)
		}
	}
}
