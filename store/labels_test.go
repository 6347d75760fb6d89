package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func summaryIDs(rows []Summary) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// Labels and the star are in the frontmatter: a store that lost its index
// file (or never had one) lists and filters them the same, and so does one
// restarted on the index file it wrote.
func TestLabelsAndStarSurviveReindex(t *testing.T) {
	s := newTestStore(t)
	a := deliver(t, s, "inbox", testMessage(1), "a")
	b := deliver(t, s, "inbox", testMessage(2), "b")
	c := deliver(t, s, "inbox", testMessage(3), "c")
	allRows(t, s, "inbox", Query{}) // index them before the change

	changed, missing, err := s.Relabel("agent", "inbox", []string{a, b, "nope"}, []string{"Invoices", "todo"}, nil, ptr(true))
	if err != nil || !slices.Equal(changed, []string{a, b}) || !slices.Equal(missing, []string{"nope"}) {
		t.Fatalf("Relabel: changed %v missing %v err %v", changed, missing, err)
	}
	// Case-insensitive: "TODO" is the label "todo"; b loses it and its star.
	if changed, _, err := s.Relabel("agent", "inbox", []string{b}, []string{"invoices"}, []string{"TODO"}, ptr(false)); err != nil || !slices.Equal(changed, []string{b}) {
		t.Fatalf("second Relabel: %v %v", changed, err)
	}
	// Nothing to change.
	if changed, _, err := s.Relabel("agent", "inbox", []string{a}, []string{"INVOICES"}, nil, ptr(true)); err != nil || len(changed) != 0 {
		t.Fatalf("no-op Relabel changed %v (%v)", changed, err)
	}
	m, _, err := s.Get("agent", "inbox", a)
	if err != nil || !slices.Equal(m.Labels, []string{"Invoices", "todo"}) || !m.Starred {
		t.Fatalf("frontmatter of %s: labels %v starred %v (%v)", a, m.Labels, m.Starred, err)
	}

	queries := map[string]struct {
		q    Query
		want []string
	}{
		"label":           {Query{Label: "invoices"}, []string{b, a}},
		"label todo":      {Query{Label: "ToDo"}, []string{a}},
		"label none":      {Query{Label: "invoice"}, nil},
		"starred":         {Query{Starred: ptr(true)}, []string{a}},
		"unstarred":       {Query{Starred: ptr(false)}, []string{c, b}},
		"label, unstar":   {Query{Label: "invoices", Starred: ptr(false)}, []string{b}},
		"label and query": {Query{Label: "invoices", Subject: "message 2"}, []string{b}},
	}
	check := func(what string, s *Store) {
		t.Helper()
		for name, tc := range queries {
			if got := summaryIDs(allRows(t, s, "inbox", tc.q)); !slices.Equal(got, tc.want) {
				t.Errorf("%s, %s: got %v, want %v", what, name, got, tc.want)
			}
		}
		rows := allRows(t, s, "inbox", Query{})
		if len(rows) != 3 || !rows[2].Starred || !slices.Equal(rows[2].Labels, []string{"Invoices", "todo"}) {
			t.Errorf("%s: rows %+v", what, rows)
		}
	}
	check("live", s)
	s = reopen(t, s)
	check("restarted on its index file", s)
	s.Close()
	removeDB(s.idx.path)
	s = reopen(t, s)
	check("index deleted", s)
}

func TestRelabelRefusals(t *testing.T) {
	s := newTestStore(t)
	a := deliver(t, s, "inbox", testMessage(1), "a")
	for _, bad := range []string{"", " x", "a,b", "tab\there", strings.Repeat("x", MaxLabelLen+1), "\u202eevil", "\xff",
		// Line separators, and compatibility forms NFKC folds into other
		// labels or into a comma.
		"a\u2028b", "a\u2029b", "\uff29\uff2e\uff36\uff2f\uff29\uff23\uff25\uff33", "a\uff0cb", "a\ufe50b", "\ufb01le", "x\u00a0y", "Zoe\u0308"} {
		if _, _, err := s.Relabel("agent", "inbox", []string{a}, []string{bad}, nil, nil); err == nil {
			t.Errorf("label %q accepted", bad)
		}
	}
	other := deliver(t, s, "inbox", testMessage(2), "b")
	for _, ok := range []string{"invoices", "Zoë", "日本語", "follow-up", "Łódź"} {
		if _, _, err := s.Relabel("agent", "inbox", []string{other}, []string{ok}, nil, nil); err != nil {
			t.Errorf("label %q refused: %v", ok, err)
		}
	}
	var many []string
	for i := range MaxLabels + 1 {
		many = append(many, strings.Repeat("l", i+1))
	}
	if _, _, err := s.Relabel("agent", "inbox", []string{a}, many, nil, nil); !errors.Is(err, ErrTooManyLabels) {
		t.Errorf("%d labels: %v", len(many), err)
	}
	if _, _, err := s.Relabel("agent", "inbox", []string{a}, many[:MaxLabels], nil, nil); err != nil {
		t.Errorf("%d labels: %v", MaxLabels, err)
	}
	// A message over the limit by hand can still lose labels.
	if _, _, err := s.Relabel("agent", "inbox", []string{a}, nil, many[:1], nil); err != nil {
		t.Errorf("removing a label: %v", err)
	}
}

// FuzzRelabel: any label ValidLabel accepts survives the frontmatter (both
// decoders) and the index file, and is found again by the label filter.
func FuzzRelabel(f *testing.F) {
	for _, s := range []string{"invoices", "Ünïcödé", `quote " and \ back`, "+++", "a]b[c", "#hash = 1", "日本語", "x\u00a0y"} {
		f.Add(s)
	}
	s := newTestStore(f)
	id := deliver(f, s, "inbox", testMessage(1), "body")
	f.Fuzz(func(t *testing.T, label string) {
		_, _, err := s.Relabel("agent", "inbox", []string{id}, []string{label}, nil, nil)
		if ValidLabel(label) != nil {
			if err == nil {
				t.Fatalf("label %q refused by ValidLabel but accepted", label)
			}
			return
		}
		if err != nil {
			t.Fatalf("label %q: %v", label, err)
		}
		defer s.Relabel("agent", "inbox", []string{id}, nil, []string{label}, nil)
		m, _, err := s.Get("agent", "inbox", id)
		if err != nil || !HasLabel(m.Labels, label) {
			t.Fatalf("label %q after Get: %v %v", label, m.Labels, err)
		}
		data, _ := os.ReadFile(filepath.Join(s.Path("agent"), "inbox", id+".md"))
		fast, _, err := parseForIndex(data)
		if err != nil || !HasLabel(fast.Labels, label) {
			t.Fatalf("label %q in the index parser: %v %v", label, fast, err)
		}
		p, err := s.List("agent", "inbox", Query{Label: label})
		if err != nil || len(p.Items) != 1 || !HasLabel(p.Items[0].Labels, label) {
			t.Fatalf("label %q: list %+v %v", label, p.Items, err)
		}
	})
}
