package store

import (
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// longBody is a body of about n bytes: filler words, with head placed at
// the start, a word that crosses the end of the ordered part, and tail
// after it.
func longBody(head, tail string, n int) string {
	const filler = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
	var b strings.Builder
	b.WriteString(head + " ")
	for b.Len() < orderedBody-5 {
		b.WriteString(filler[:min(len(filler), orderedBody-5-b.Len())])
	}
	b.WriteString(" straddleword ") // from orderedBody-4 on
	b.WriteString(filler)
	b.WriteString(tail + " ")
	for b.Len() < n {
		b.WriteString(filler)
	}
	return b.String()
}

func TestLongBodyWordsAndPhrases(t *testing.T) {
	s := newTestStore(t)
	// echo and foxtrot come one after the other among the tail's new
	// words, but never side by side in the body.
	long := deliver(t, s, "inbox", testMessage(1),
		longBody("alpha bravo", "echo lorem ipsum foxtrot amet charlie delta sit zulu Ünïcode", 100<<10))
	short := deliver(t, s, "inbox", testMessage(2), "echo foxtrot, and nothing else")
	for _, c := range []struct {
		query string
		want  []string
	}{
		{`zulu`, []string{long}},                // a word only past the ordered part
		{`unicode`, []string{long}},             // folded as in the ordered part
		{`straddleword`, []string{long}},        // a word across its end
		{`"alpha bravo"`, []string{long}},       // a phrase in the ordered part
		{`"echo foxtrot"`, []string{short}},     // never a phrase made of two words apart
		{`echo foxtrot`, []string{short, long}}, // both words
		{`"charlie delta"`, nil},                // a phrase past the ordered part is not found
		{`charlie delta`, []string{long}},       // its words are
		{`"lorem ipsum" zulu`, []string{long}},  // ordered and unordered parts together
	} {
		got := searchIDs(t, s, c.query)
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("search %s: %v, want %v", c.query, got, want)
		}
	}
	rows := allRows(t, s, "inbox", Query{Text: "zul"})
	if ids := summaryIDs(rows); !slices.Equal(ids, []string{long}) {
		t.Errorf("text zul: %v, want the long message", ids)
	}
}

// Regression: past the ordered part a body was split into words at every
// ASCII byte that is not a letter or a digit, so what a person searches as
// one word but the engine reads as words in a row (an address, a host
// name, 3.14159, e-mail, don't, a date) lost its order there and was not
// found: the search looks for those words as a phrase. Words joined
// without a space keep their order, past the ordered part and across its
// end; words a space apart still never make a phrase there.
func TestLongBodyWordsJoinedWithoutASpace(t *testing.T) {
	s := newTestStore(t)
	joined := []string{"carol@mail.test", "docs.host.test", "3.14159", "e-mail", "don't", "2024-01-05", "v1.2.3", "state-of-the-art"}
	tail := "write to (" + strings.Join(joined, "), (") + "). golf, hotel"
	body := longBody("first", tail, 64<<10)
	// A host name across the end of the ordered part.
	cross := "zz.across.test"
	at := orderedBody - 6
	body = body[:at] + " " + cross + " " + body[at:]
	long := deliver(t, s, "inbox", testMessage(1), body)
	for _, q := range append(joined, cross, "golf", "hotel") {
		if got := searchIDs(t, s, q); !slices.Equal(got, []string{long}) {
			t.Errorf("search %s: %v, want the long message", q, got)
		}
	}
	for _, q := range []string{`"golf hotel"`, `"mail test docs"`} {
		if got := searchIDs(t, s, q); len(got) != 0 {
			t.Errorf("search %s: %v, want none: its words are a space apart past the ordered part", q, got)
		}
	}
	if ids := summaryIDs(allRows(t, s, "inbox", Query{Text: "carol@mail.te"})); !slices.Equal(ids, []string{long}) {
		t.Errorf("text carol@mail.te: %v, want the long message", ids)
	}
}

func TestBodyTextKeepsTheOrderedPartAsItIs(t *testing.T) {
	body := longBody("first words", "later words", 40<<10)
	got := bodyText(body)
	cut := strings.Index(body, "straddleword")
	if !strings.HasPrefix(got, body[:cut]) || strings.Contains(got[cut:], "lorem ipsum") {
		t.Fatalf("ordered part not kept, or rest not reduced to its words: %.80q...", got[cut:])
	}
	if len(got) > orderedBody+1024 {
		t.Errorf("%d bytes indexed of a body of %d that repeats a few words", len(got), len(body))
	}
	if s := "short body § with a mark"; bodyText(s) != ftsText(s) {
		t.Errorf("short body changed: %q", bodyText(s))
	}
}

// ftsTerms are the terms the engine's tokenizer, as the index configures
// it, makes of text (without wordGap).
func ftsTerms(t testing.TB, db *sql.DB, text string) []string {
	t.Helper()
	return ftsQuery(t, db, text, "SELECT term FROM v WHERE term != ? ORDER BY term", wordGap)
}

// ftsSequence is the terms the engine makes of text, in order, wordGap
// included.
func ftsSequence(t testing.TB, db *sql.DB, text string) []string {
	t.Helper()
	return ftsQuery(t, db, text, "SELECT term FROM vi ORDER BY offset")
}

// ftsQuery indexes text alone and returns the terms query reads of it.
func ftsQuery(t testing.TB, db *sql.DB, text, query string, args ...any) []string {
	t.Helper()
	if _, err := db.Exec("DELETE FROM f"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO f(x) VALUES(?)", text); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// ftsRuns splits a sequence of terms at wordGap: the ordered part first
// (maybe empty), then each piece of the rest.
func ftsRuns(seq []string) [][]string {
	runs := [][]string{nil}
	for _, term := range seq {
		if term == wordGap {
			runs = append(runs, nil)
			continue
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], term)
	}
	return runs
}

// FuzzBodyText checks, against the engine's own tokenizer, that the text
// bodyText makes of a body holds exactly the words of the body, none of
// them a scope term, and words in a row only where the body has them in a
// row.
func FuzzBodyText(f *testing.F) {
	for _, s := range []string{"", "a b a", "Ünïcode  über-wörds, e-mail a_b x.y", "日本語のテキスト と English", "word§mark §f1 §", "\x00a\x01b\xffc\u00a0d\u2014e", "a-a-a-a b.b c'd", "x \xa7f1 \xe0\x82\xa7m2", "one two one three two four"} {
		f.Add(uint8(3), s)
	}
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		f.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	if _, err := db.Exec(`CREATE VIRTUAL TABLE f USING fts5(x, tokenize="unicode61 remove_diacritics 2 tokenchars '§'");
		CREATE VIRTUAL TABLE v USING fts5vocab(f, 'row');
		CREATE VIRTUAL TABLE vi USING fts5vocab(f, 'instance')`); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ordered uint8, body string) {
		if len(body) > 4096 {
			return
		}
		n := int(ordered) % (len(body) + 1)
		got := bodyTextOrdered(body, n)
		terms := ftsTerms(t, db, got)
		if want := ftsText(body); !slices.Equal(terms, ftsTerms(t, db, want)) {
			t.Fatalf("ordered %d: terms of %q\n  are %q,\n want %q", n, got, terms, ftsTerms(t, db, want))
		}
		for _, term := range terms {
			if strings.HasPrefix(term, scopeMark) {
				t.Fatalf("ordered %d: %q holds the term %q, which could be a scope term", n, body, term)
			}
		}
		// Words next to each other in the text are next to each other in
		// the body: the ordered part is its start, and each run between
		// two gaps is found in it as a run, so no phrase is found that
		// the body does not hold.
		all := strings.Join(ftsSequence(t, db, ftsText(body)), " ")
		for i, run := range ftsRuns(ftsSequence(t, db, got)) {
			if len(run) == 0 {
				continue
			}
			if s := strings.Join(run, " "); i == 0 && !strings.HasPrefix(all+" ", s+" ") || !strings.Contains(" "+all+" ", " "+s+" ") {
				t.Fatalf("ordered %d: the words %q are in a row in the text of %q, not in its body", n, s, body)
			}
		}
		if len(body) > n {
			head, _, _ := strings.Cut(got, " "+wordGap+" ")
			if len(head) > n || !strings.HasPrefix(ftsText(body), head) {
				t.Fatalf("ordered %d: ordered part %q is not the body's start", n, head)
			}
		}
	})
}

// BenchmarkBodyText is the text of a 100 KiB body of words drawn as
// wordBodies draws them: the store's share of its index writes.
func BenchmarkBodyText(b *testing.B) {
	next := wordBodies(1)
	var body strings.Builder
	for body.Len() < 100<<10 {
		body.WriteString(next() + "\n")
	}
	s := body.String()
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		bodyText(s)
	}
}

func TestWordSet(t *testing.T) {
	var s wordSet
	words := make([]string, 10000)
	for i := range words {
		words[i] = strconv.Itoa(i)
		if !s.add(words[i]) {
			t.Fatalf("word %d taken for one seen", i)
		}
	}
	for i, w := range words {
		if s.add(w) {
			t.Fatalf("word %d taken for a new one", i)
		}
	}
	if s.n != len(words) || len(s.slots) < 2*s.n {
		t.Errorf("%d words in %d slots", s.n, len(s.slots))
	}
}
