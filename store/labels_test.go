package store

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
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

// Labels are the same label exactly when strings.EqualFold says so, and the
// index keys and filters them by that one rule: letters whose case forms are
// not plain lower and upper pairs (the Greek final sigma, the Kelvin sign and
// the long s, which a label written by hand in the frontmatter may hold, the
// Turkish dotted I) are neither split from their label by a filter nor
// merged into another.
func TestLabelsCompareByOneFolding(t *testing.T) {
	s := newTestStore(t)
	a := deliver(t, s, "inbox", testMessage(1), "a")
	hand := testMessage(2)
	hand.Labels = []string{"\u212Ailo", "\u017Fo\u017F"} // KELVIN SIGN, LATIN SMALL LETTER LONG S
	b := deliver(t, s, "inbox", hand, "b")
	allRows(t, s, "inbox", Query{})
	if _, _, err := s.Relabel("agent", "inbox", []string{a}, []string{"Σίσυφος", "kilo", "sos", "İstanbul"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Relabel("agent", "inbox", []string{b}, []string{"istanbul"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Other spellings of labels the messages carry: nothing changes.
	for id, same := range map[string][]string{a: {"σίσυφοσ", "ΣΊΣΥΦΟΣ", "İSTANBUL", "KILO"}, b: {"KILO", "SOS"}} {
		if changed, _, err := s.Relabel("agent", "inbox", []string{id}, same, nil, nil); err != nil || len(changed) != 0 {
			t.Errorf("adding %q to %s changed %v (%v)", same, id, changed, err)
		}
	}
	type filter struct {
		label string
		want  []string
	}
	check := func(what string, filters []filter) {
		t.Helper()
		for _, tc := range filters {
			qs := []Query{{Label: tc.label}}
			if ValidLabel(tc.label) == nil {
				qs = append(qs, Query{Search: "label:" + tc.label})
			}
			for _, q := range qs {
				p, err := s.List("agent", "inbox", q)
				if err != nil {
					t.Fatalf("%s: label %+q search %+q: %v", what, q.Label, q.Search, err)
				}
				if got := summaryIDs(p.Items); !slices.Equal(got, tc.want) || p.Total != len(tc.want) {
					t.Errorf("%s: label %+q search %+q: got %v (total %d), want %v", what, q.Label, q.Search, got, p.Total, tc.want)
				}
			}
		}
	}
	check("after adding", []filter{
		{"Σίσυφος", []string{a}}, {"σίσυφοσ", []string{a}}, {"ΣΊΣΥΦΟΣ", []string{a}}, {"σΊσυφος", []string{a}},
		{"KILO", []string{b, a}}, {"kilo", []string{b, a}}, {"\u212Ailo", []string{b, a}},
		{"SOS", []string{b, a}}, {"\u017Fo\u017F", []string{b, a}},
		// İ folds to no other letter, and i only to I.
		{"İSTANBUL", []string{a}}, {"ISTANBUL", []string{b}}, {"ıstanbul", nil},
	})
	if m, _, err := s.Get("agent", "inbox", a); err != nil || !slices.Equal(m.Labels, []string{"Σίσυφος", "kilo", "sos", "İstanbul"}) {
		t.Fatalf("labels of a: %q (%v)", m.Labels, err)
	}
	// Removing by another spelling removes the label.
	for id, remove := range map[string][]string{a: {"ΣΊΣΥΦΟΣ", "KILO"}, b: {"kilo", "sos"}} {
		if changed, _, err := s.Relabel("agent", "inbox", []string{id}, nil, remove, nil); err != nil || !slices.Equal(changed, []string{id}) {
			t.Fatalf("removing %q from %s: changed %v (%v)", remove, id, changed, err)
		}
	}
	for id, want := range map[string][]string{a: {"sos", "İstanbul"}, b: {"istanbul"}} {
		if m, _, err := s.Get("agent", "inbox", id); err != nil || !slices.Equal(m.Labels, want) {
			t.Errorf("labels of %s after removing: %q (%v)", id, m.Labels, err)
		}
	}
	check("after removing", []filter{
		{"σίσυφοσ", nil}, {"kilo", nil}, {"\u212Ailo", nil}, {"\u017Fo\u017F", []string{a}}, {"ISTANBUL", []string{b}},
	})
}

// LabelKey keys every character by a member of its simple-folding orbit,
// the same member for each member: so keys are equal exactly when
// strings.EqualFold says the labels are, for every character there is.
func TestLabelKeyIsEqualFold(t *testing.T) {
	orbit := func(r rune) []rune {
		o := []rune{r}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			o = append(o, f)
		}
		return o
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if utf8.ValidRune(r) {
			o := orbit(r)
			k := foldRune(r)
			if !slices.Contains(o, k) {
				t.Fatalf("%U keys as %U, outside its orbit %U", r, k, o)
			}
			for _, f := range o {
				if foldRune(f) != k {
					t.Fatalf("%U keys as %U, and %U of its orbit as %U", r, k, f, foldRune(f))
				}
			}
		}
	}
	for _, c := range []struct{ l, key string }{
		{"Invoices", "invoices"}, {"ΣΊΣΥΦΟΣ", "σίσυφοσ"}, {"Σίσυφος", "σίσυφοσ"},
		{"\u212Aelvin", "kelvin"}, {"\u017Fo\u017F", "sos"}, {"İi", "İi"}, {"Iı", "iı"}, {"ǅ", "ǆ"}, {"ß", "ß"},
	} {
		if got := LabelKey(c.l); got != c.key {
			t.Errorf("LabelKey(%q) = %q, want %q", c.l, got, c.key)
		}
	}
}

// FuzzLabelKey: two strings have one key exactly when strings.EqualFold
// says they are equal, invalid UTF-8 included.
func FuzzLabelKey(f *testing.F) {
	for _, p := range [][2]string{{"Σίσυφος", "σίσυφοσ"}, {"\u212A", "k"}, {"ſ", "S"}, {"İ", "i"}, {"ı", "I"}, {"\xff", "\ufffd"}, {"ǅ", "Ǆ"}, {"ß", "ss"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if same, fold := LabelKey(a) == LabelKey(b), strings.EqualFold(a, b); same != fold {
			t.Errorf("%q and %q: same key %v, EqualFold %v", a, b, same, fold)
		}
	})
}

// An index that a release before LabelKey wrote (format 1, labels lowered
// with strings.ToLower) is rebuilt at open, and then filters by LabelKey:
// a filter that spells a label another way finds it.
func TestIndexOfLoweredLabelsIsRebuilt(t *testing.T) {
	atRest(t) // no row is read again for being recent: only the rebuild can fix them
	s := newTestStore(t)
	a := deliver(t, s, "inbox", testMessage(1), "a")
	allRows(t, s, "inbox", Query{})
	if _, _, err := s.Relabel("agent", "inbox", []string{a}, []string{"Σίσυφος"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	allRows(t, s, "inbox", Query{})
	root, idx := s.Root(), s.idx.path
	s.Close()

	// What format 1 wrote: the same rows, each label lowered.
	db, err := sql.Open("sqlite", idx)
	if err != nil {
		t.Fatal(err)
	}
	lowered := listSep + strings.ToLower("Σίσυφος") + listSep
	if res, err := db.Exec("UPDATE messages SET labels_fold = ? WHERE labels != ''", lowered); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%d rows carry labels", n)
	}
	if _, err := db.Exec("PRAGMA user_version = 1"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = OpenIndexed(root, idx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, l := range []string{"Σίσυφος", "σίσυφοσ", "ΣΊΣΥΦΟΣ"} {
		if p, err := s.List("agent", "inbox", Query{Label: l}); err != nil || !slices.Equal(summaryIDs(p.Items), []string{a}) || p.Total != 1 {
			t.Errorf("label %q after the upgrade: %v (total %d, %v)", l, summaryIDs(p.Items), p.Total, err)
		}
	}
	if v, err := DatabaseVersion(idx); err != nil || v != IndexVersion {
		t.Errorf("index version after the upgrade: %d, %v", v, err)
	}
}

// A label or an address written by hand in the frontmatter may hold the
// index's list separator: it stays one element, found by its own spelling,
// never split into others a filter would find.
func TestListSeparatorInAHandWrittenLabel(t *testing.T) {
	s := newTestStore(t)
	hand := testMessage(1)
	hand.Labels = []string{"a\x1fb", "c"}
	hand.To = []string{"x@example.test\x1fy@example.test"}
	id := deliver(t, s, "inbox", hand, "hand")
	for label, want := range map[string][]string{"a": nil, "b": nil, "c": {id}, "a\x1fb": {id}, "A\x1fB": {id}} {
		p, err := s.List("agent", "inbox", Query{Label: label})
		if err != nil {
			t.Fatal(err)
		}
		if got := summaryIDs(p.Items); !slices.Equal(got, want) {
			t.Errorf("label %+q: got %v, want %v", label, got, want)
		}
	}
	p, err := s.List("agent", "inbox", Query{})
	if err != nil || len(p.Items) != 1 {
		t.Fatalf("list: %+v, %v", p, err)
	}
	if got := p.Items[0]; len(got.Labels) != 2 || len(got.To) != 1 {
		t.Errorf("the listing split the hand-written elements: labels %q, to %q", got.Labels, got.To)
	}
}
