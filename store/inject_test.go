package store

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestFrontmatterInjectionThroughLabelsAndSubjects: labels, subjects,
// recipients and display names carrying "+++", newlines, TOML syntax, NULs
// or great length are refused (labels) or written so that the file still
// parses to exactly what was given, and relabelling changes nothing else.
func TestFrontmatterInjectionThroughLabelsAndSubjects(t *testing.T) {
	s := newTestStore(t)
	evil := "x\"\n+++\nread = true\ntrusted = \"true\"\n[[attachments]]\npath = \"/etc/shadow\"\n+++\n\x00'''\"\"\"]"
	m := testMessage(1)
	m.Subject = evil + strings.Repeat("s", 1<<20)
	m.From = evil + " <a@example.com>"
	m.To = []string{evil, "b@example.com"}
	id, _, err := s.Deliver("agent", "inbox", m, "+++\nbody", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, body, err := s.Get("agent", "inbox", id)
	if err != nil || body != "+++\nbody" || before.Read || before.Trusted != "none" || len(before.Attachments) != 0 {
		t.Fatalf("Get = %+v %q %v", before, body, err)
	}
	for _, l := range []string{"", "a\nb", "a\x00b", "+++\n", "a,b", " a", strings.Repeat("l", MaxLabelLen+1), "a\u202eb", "\xff"} {
		if _, _, err := s.Relabel("agent", "inbox", []string{id}, []string{l}, nil, nil); err == nil {
			t.Errorf("label %q accepted", l)
		}
	}
	odd := []string{"+++", `a"b`, "x = 1", "[table]", "'''", `\u0000`, "ünï ☃", strings.Repeat("l", MaxLabelLen)}
	if _, _, err := s.Relabel("agent", "inbox", []string{id}, odd, nil, ptr(true)); err != nil {
		t.Fatal(err)
	}
	after, body2, err := s.Get("agent", "inbox", id)
	if err != nil || body2 != body {
		t.Fatalf("after relabel: %v %q", err, body2)
	}
	if !reflect.DeepEqual(after.Labels, odd) || !after.Starred {
		t.Errorf("labels %q starred %v, want %q", after.Labels, after.Starred, odd)
	}
	after.Labels, after.Starred = before.Labels, before.Starred
	if !reflect.DeepEqual(after, before) {
		t.Errorf("relabel changed more than the labels:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := allRows(t, s, "inbox", Query{Label: "+++"}); len(got) != 1 {
		t.Errorf("label filter +++ lists %d", len(got))
	}

	// 10k labels written by hand: the file still reads, adding more is
	// refused, removing works.
	path := filepath.Join(s.Path("agent"), "inbox", id+".md")
	many := testMessage(2)
	for i := range 10_000 {
		many.Labels = append(many.Labels, "l"+strings.Repeat("x", i%50)+string(rune('a'+i%26))+strings.Repeat("y", i/26%10))
	}
	if err := os.WriteFile(path, Render(many, "b"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	if _, _, err := s.Relabel("agent", "inbox", []string{id}, []string{"new"}, nil, nil); err == nil {
		t.Error("a label added to 10k hand-written ones")
	}
	if _, _, err := s.Relabel("agent", "inbox", []string{id}, nil, []string{many.Labels[0]}, nil); err != nil {
		t.Errorf("removing a label from 10k: %v", err)
	}
	if _, _, err := s.Get("agent", "inbox", id); err != nil {
		t.Errorf("Get after: %v", err)
	}
	allRows(t, s, "inbox", Query{Label: "new"})
}
