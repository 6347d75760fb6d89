// Package logsum keeps repeated log lines cheap. The first line of a kind
// (a key such as "refused 192.0.2.1" or "uid 1000 send forbidden") in a window
// is written in full; the repeats in that window are only counted, and the
// count is written once, by the next line of the kind after the window or by
// Flush. Nothing is dropped without being counted.
package logsum

import (
	"sort"
	"sync"
	"time"
)

// DefaultWindow is how long repeats of a kind are counted instead of logged.
const DefaultWindow = 10 * time.Second

// DefaultMaxKeys bounds the kinds remembered at once; past it, new kinds are
// counted together under OverflowKey, so a flood of distinct keys (many
// addresses) cannot grow memory or the log.
const DefaultMaxKeys = 4096

// OverflowKey collects the kinds that found the table full.
const OverflowKey = "(other)"

// DefaultMaxPerGroup bounds the kinds of one group (AllowIn) remembered at
// once; past it, the group's new kinds are counted together under the
// group's own overflow kind, so that one group's flood of distinct kinds
// (one user naming a new mailbox in each request) cannot fill the table
// and have every other group's lines counted, unwritten, under OverflowKey.
const DefaultMaxPerGroup = 64

// Summarizer decides which repeated lines to write.
type Summarizer struct {
	Window  time.Duration // DefaultWindow when zero
	MaxKeys int           // DefaultMaxKeys when zero
	// MaxPerGroup is DefaultMaxPerGroup when zero.
	MaxPerGroup int
	Now         func() time.Time // time.Now when nil

	mu     sync.Mutex
	kind   map[string]*entry
	groups map[string]int // kinds remembered per group, its overflow kind not counted
}

type entry struct {
	start      time.Time
	suppressed int
	group      string // counted in groups; "" for none
}

func (s *Summarizer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Allow reports whether a line of kind key should be written now, and how
// many lines of the kind were counted instead since the last one written
// (to be written with it).
func (s *Summarizer) Allow(key string) (write bool, suppressed int) { return s.AllowIn("", key) }

// AllowIn is Allow for a kind of group ("" for none): a group remembers at
// most MaxPerGroup kinds at once, and past that its new kinds are counted
// together under GroupOverflowKey(group).
func (s *Summarizer) AllowIn(group, key string) (write bool, suppressed int) {
	window, max, perGroup := s.Window, s.MaxKeys, s.MaxPerGroup
	if window <= 0 {
		window = DefaultWindow
	}
	if max <= 0 {
		max = DefaultMaxKeys
	}
	if perGroup <= 0 {
		perGroup = DefaultMaxPerGroup
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kind == nil {
		s.kind, s.groups = map[string]*entry{}, map[string]int{}
	}
	e, ok := s.kind[key]
	if !ok && group != "" && s.groups[group] >= perGroup {
		key, group = GroupOverflowKey(group), ""
		e, ok = s.kind[key]
	}
	if !ok && len(s.kind) >= max {
		key, group = OverflowKey, ""
		e, ok = s.kind[key]
	}
	switch {
	case !ok:
		s.kind[key] = &entry{start: now, group: group}
		if group != "" {
			s.groups[group]++
		}
		return true, 0
	case now.Sub(e.start) >= window:
		n := e.suppressed
		e.start, e.suppressed = now, 0
		return true, n
	default:
		e.suppressed++
		return false, 0
	}
}

// GroupOverflowKey is the kind that collects group's kinds past its bound.
func GroupOverflowKey(group string) string { return group + " " + OverflowKey }

// Flush reports, sorted by key, the kinds whose window has ended with lines
// counted but not yet written, and forgets every kind whose window has
// ended. Call it periodically so a burst that stops is still reported.
func (s *Summarizer) Flush(report func(key string, suppressed int)) { s.flush(false, report) }

// FlushAll reports every count not yet written, window ended or not, and
// forgets every kind: for the last lines before the program stops.
func (s *Summarizer) FlushAll(report func(key string, suppressed int)) { s.flush(true, report) }

func (s *Summarizer) flush(all bool, report func(key string, suppressed int)) {
	window := s.Window
	if window <= 0 {
		window = DefaultWindow
	}
	now := s.now()
	type pending struct {
		key string
		n   int
	}
	var out []pending
	s.mu.Lock()
	for k, e := range s.kind {
		if !all && now.Sub(e.start) < window {
			continue
		}
		if e.suppressed > 0 {
			out = append(out, pending{k, e.suppressed})
		}
		delete(s.kind, k)
		if e.group != "" {
			if s.groups[e.group]--; s.groups[e.group] <= 0 {
				delete(s.groups, e.group)
			}
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	for _, p := range out {
		report(p.key, p.n)
	}
}
