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

// Summarizer decides which repeated lines to write.
type Summarizer struct {
	Window  time.Duration    // DefaultWindow when zero
	MaxKeys int              // DefaultMaxKeys when zero
	Now     func() time.Time // time.Now when nil

	mu   sync.Mutex
	kind map[string]*entry
}

type entry struct {
	start      time.Time
	suppressed int
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
func (s *Summarizer) Allow(key string) (write bool, suppressed int) {
	window, max := s.Window, s.MaxKeys
	if window <= 0 {
		window = DefaultWindow
	}
	if max <= 0 {
		max = DefaultMaxKeys
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kind == nil {
		s.kind = map[string]*entry{}
	}
	e, ok := s.kind[key]
	if !ok && len(s.kind) >= max {
		key = OverflowKey
		e, ok = s.kind[key]
	}
	switch {
	case !ok:
		s.kind[key] = &entry{start: now}
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
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	for _, p := range out {
		report(p.key, p.n)
	}
}
