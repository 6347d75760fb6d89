package queue

import (
	"slices"
	"strings"
)

// Attempts in flight per recipient domain, bounded by
// Options.MaxPerDestination so that a few slow destinations cannot hold
// every place (see dispatch).

// destinations are the recipient domains an attempt of it would reach
// (its recipients not final and not held), lower case, each once.
func destinations(it *Item) []string {
	var doms []string
	for _, r := range it.Recipients {
		if Final(r.Status) || r.Status == StatusHeld {
			continue
		}
		d := strings.ToLower(r.Address[strings.LastIndexByte(r.Address, '@')+1:])
		if !slices.Contains(doms, d) {
			doms = append(doms, d)
		}
	}
	return doms
}

// roomFor reports whether every one of doms has an attempt's place left
// under MaxPerDestination. Call with q.mu held.
func (q *Queue) roomFor(doms []string) bool {
	for _, d := range doms {
		if q.busy[d] >= q.opts.MaxPerDestination {
			return false
		}
	}
	return true
}

// take counts an attempt to each of doms, in who's share (shareKey), as
// in flight. Call with q.mu held.
func (q *Queue) take(doms []string, who string) {
	for _, d := range doms {
		q.busy[d]++
	}
	q.sharing[who]++
}

// release ends the attempt take counted.
func (q *Queue) release(doms []string, who string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range doms {
		if q.busy[d]--; q.busy[d] <= 0 {
			delete(q.busy, d)
		}
	}
	if q.sharing[who]--; q.sharing[who] <= 0 {
		delete(q.sharing, who)
	}
}
