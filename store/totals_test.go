package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestFlagListingsKnowTheirTotal: a listing filtered on flags and dates,
// whose total the folder keeps from an earlier call, gives the same pages
// (rows, total, cursor) as counting every row, and the kept total follows
// every change: marks, stars and new messages.
func TestFlagListingsKnowTheirTotal(t *testing.T) {
	// Files at rest at once (ext4 times are exact to the nanosecond), so
	// that listings use what the index keeps instead of re-reading.
	old := racyWindow
	racyWindow = 0
	t.Cleanup(func() { racyWindow = old })
	s := newTestStore(t)
	r := rand.New(rand.NewPCG(1, 2))
	var ids []string
	for i := range 300 {
		ids = append(ids, deliver(t, s, "inbox", testMessage(i), "body"))
	}
	yes, no := true, false
	since := t0.Add(150 * time.Minute)
	flags := []*bool{nil, &yes, &no}
	check := func(step string) {
		t.Helper()
		for _, unread := range flags {
			for _, starred := range flags {
				for _, bounds := range []Query{{}, {Since: &since}, {Until: &since}} {
					q := bounds
					q.Unread, q.Starred, q.Limit = unread, starred, 1+r.IntN(60)
					got := walk(t, s, q, true) // first, with what was kept before the change
					if want := walk(t, s, q, false); !slices.Equal(got, want) {
						t.Fatalf("%s: %+v: with the kept total\n%v\nwant (every row counted)\n%v", step, q, got, want)
					}
				}
			}
		}
	}
	check("fresh")
	for round := range 6 {
		pick := func() []string {
			var out []string
			for range 1 + r.IntN(40) {
				out = append(out, ids[r.IntN(len(ids))])
			}
			return out
		}
		if _, _, err := s.SetRead("agent", "inbox", pick(), round%2 == 0, t0); err != nil {
			t.Fatal(err)
		}
		star := round%3 == 0
		if _, _, err := s.Relabel("agent", "inbox", pick(), nil, nil, &star); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, deliver(t, s, "inbox", testMessage(1000+round), "new"))
		check(fmt.Sprintf("round %d", round))
	}
}

// walk lists every page of q, and returns each page's ids, total and
// whether more follows, as one line each. With kept, every page is listed
// after a first page with the same filter, whose total the folder keeps;
// without, the folder forgets the total it keeps for q's filter before each
// page, and counts every row.
func walk(t *testing.T, s *Store, q Query, kept bool) []string {
	t.Helper()
	fi := s.index("agent", "inbox")
	m := newMatcher(q)
	key, _ := m.totalKey()
	var lines []string
	for range 1000 {
		if kept {
			first := q
			first.Cursor = ""
			if _, err := s.List("agent", "inbox", first); err != nil {
				t.Fatal(err)
			}
		} else {
			fi.mu.Lock()
			delete(fi.totals, key)
			fi.mu.Unlock()
		}
		p, err := s.List("agent", "inbox", q)
		if err != nil {
			t.Fatal(err)
		}
		var page []string
		for _, it := range p.Items {
			page = append(page, it.ID)
		}
		lines = append(lines, fmt.Sprint(page, p.Total, p.HasMore))
		if !p.HasMore {
			return lines
		}
		q.Cursor = p.NextCursor
	}
	t.Fatal("no end to the pages")
	return nil
}
