package logsum

import (
	"fmt"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRepeatsAreCountedAndReportedOnce(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := &Summarizer{Window: 10 * time.Second, Now: c.now}
	written, counted := 0, 0
	for range 1000 {
		if ok, n := s.Allow("refused 192.0.2.1"); ok {
			written++
			counted += n
		}
	}
	if written != 1 {
		t.Fatalf("%d lines written for 1000 repeats in one window, want 1", written)
	}
	c.t = c.t.Add(10 * time.Second)
	ok, n := s.Allow("refused 192.0.2.1")
	if !ok || n != 999 {
		t.Fatalf("after the window: write=%v counted=%d, want true 999", ok, n)
	}
	// Another kind is not held back by the first.
	if ok, _ := s.Allow("refused 192.0.2.2"); !ok {
		t.Fatal("a new kind was suppressed")
	}
}

func TestFlushReportsWhatABurstLeftAndForgets(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := &Summarizer{Window: time.Second, Now: c.now}
	for range 5 {
		s.Allow("b")
	}
	for range 3 {
		s.Allow("a")
	}
	s.Allow("quiet")
	var got []string
	s.Flush(func(k string, n int) { got = append(got, fmt.Sprintf("%s=%d", k, n)) })
	if len(got) != 0 {
		t.Fatalf("flushed inside the window: %v", got)
	}
	c.t = c.t.Add(time.Second)
	s.Flush(func(k string, n int) { got = append(got, fmt.Sprintf("%s=%d", k, n)) })
	if fmt.Sprint(got) != "[a=2 b=4]" {
		t.Fatalf("flush reported %v, want [a=2 b=4]", got)
	}
	if ok, n := s.Allow("b"); !ok || n != 0 {
		t.Fatalf("after a flush the kind starts over: write=%v counted=%d", ok, n)
	}
}

func TestManyKindsShareOneOverflowEntry(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := &Summarizer{MaxKeys: 3, Now: c.now}
	written := 0
	for i := range 100 {
		if ok, _ := s.Allow(fmt.Sprintf("ip %d", i)); ok {
			written++
		}
	}
	if written != 4 || len(s.kind) != 4 {
		t.Fatalf("%d written, %d kinds kept; want 3 kinds + the overflow entry", written, len(s.kind))
	}
	c.t = c.t.Add(DefaultWindow)
	var n int
	s.Flush(func(k string, c int) {
		if k == OverflowKey {
			n = c
		}
	})
	if n != 96 {
		t.Fatalf("overflow counted %d, want 96", n)
	}
}

// TestGroupKindsAreBoundedPerGroup: one group's many kinds fold into its
// own overflow kind past MaxPerGroup and leave room for another group's;
// once their window ends, the group's room is free again.
func TestGroupKindsAreBoundedPerGroup(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	s := &Summarizer{MaxKeys: 10, MaxPerGroup: 3, Now: c.now}
	written := 0
	for i := range 50 {
		if ok, _ := s.AllowIn("uid=1", fmt.Sprintf("uid=1 kind %d", i)); ok {
			written++
		}
	}
	if written != 4 {
		t.Fatalf("uid=1: %d lines written, want its 3 kinds and its overflow kind", written)
	}
	if ok, _ := s.AllowIn("uid=2", "uid=2 kind 0"); !ok {
		t.Fatal("another group's first line was not written")
	}
	c.t = c.t.Add(DefaultWindow)
	counts := map[string]int{}
	s.Flush(func(k string, n int) { counts[k] = n })
	if counts[GroupOverflowKey("uid=1")] != 46 || counts[OverflowKey] != 0 {
		t.Fatalf("counts after the window: %v; want uid=1's overflow at 46", counts)
	}
	if ok, _ := s.AllowIn("uid=1", "uid=1 kind 99"); !ok || s.groups["uid=1"] != 1 {
		t.Fatalf("after the window uid=1 holds %d kinds; a new kind should be written and counted alone", s.groups["uid=1"])
	}
}
