package store

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// searchFixture is a mailbox with a few messages chosen so that each
// operator of the search language selects a different set.
type searchFixture struct {
	s   *Store
	ids map[string]string // name -> id
}

func newSearchFixture(t *testing.T) *searchFixture {
	t.Helper()
	atRest(t)
	s := newTestStore(t)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	f := &searchFixture{s: s, ids: map[string]string{}}
	add := func(name, folder string, m *Message, body string, atts []AttachmentData) {
		t.Helper()
		id, _, err := s.Deliver("agent", folder, m, body, []byte("raw"), atts)
		if err != nil {
			t.Fatal(err)
		}
		f.ids[name] = id
	}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	add("invoice", "inbox", &Message{
		MessageID: "<1@example.com>", From: "Alice Example <alice@example.com>", To: []string{"bob@example.org"},
		Cc: []string{"Carol <carol@example.net>"}, Subject: "Quarterly invoice 2026", ReceivedAt: at("2026-01-10T09:00:00Z"),
		Labels: []string{"Invoices"}, Starred: true, Trusted: "true",
	}, "Please pay the invoice by Friday.\n\n"+strings.Repeat("filler line\n", 41)+"The secret word is zanzibarquux.\n", nil)
	add("lunch", "inbox", &Message{
		MessageID: "<2@builder.test>", From: "Bob Builder <bob@builder.test>", To: []string{"alice@example.com"},
		Subject: "Re: lunch plans", ReceivedAt: at("2026-02-15T10:00:00Z"), Read: true,
	}, "Let's meet at the café near the station.", []AttachmentData{{Filename: "agenda-frühling.pdf", ContentType: "application/pdf", Data: []byte("%PDF")}})
	add("cyrillic", "archive", &Message{
		MessageID: "<3@example.ru>", From: "Дмитрий <dmitry@example.ru>", To: []string{"agent@example.org"},
		Subject: "ΣΟΦΙΑ report", ReceivedAt: at("2026-03-01T08:00:00Z"),
	}, "Numbers for the quarter, **Ünïcödé** and [a link](https://example.org/hidden-target). §f1 §f2 §f3 §m1 §m2", nil)
	add("sent", "sent", &Message{
		MessageID: "<4@example.org>", From: "agent@example.org", To: []string{"alice@example.com"},
		Subject: "Invoice sent", ReceivedAt: at("2026-03-05T08:00:00Z"), Read: true, Outbound: true,
	}, "Here it is.", nil)
	add("fox", "inbox", &Message{
		MessageID: "<5@example.com>", From: "Eve <eve@example.com>", To: []string{"agent@example.org"},
		Subject: "Typing practice", ReceivedAt: at("2025-12-01T08:00:00Z"),
	}, "the quick brown fox jumps; a brown dog is not quick", nil)
	return f
}

// search lists the ids matching a query (whole, every page), as fixture
// names.
func (f *searchFixture) search(t *testing.T, folder string, q Query) ([]string, error) {
	t.Helper()
	q.Limit = 2
	var got []string
	for {
		p, err := f.s.List("agent", folder, q)
		if err != nil {
			return nil, err
		}
		for _, it := range p.Items {
			for name, id := range f.ids {
				if id == it.ID {
					got = append(got, name)
				}
			}
		}
		if !p.HasMore {
			if p.Total != len(got) {
				t.Errorf("%+v: total %d, %d rows", q, p.Total, len(got))
			}
			break
		}
		q.Cursor = p.NextCursor
	}
	slices.Sort(got)
	return got, nil
}

func TestSearchCorrectness(t *testing.T) {
	f := newSearchFixture(t)
	cases := []struct {
		q    string
		want []string
	}{
		// Words anywhere: body (line 42), subject, case, a word only in an
		// attachment's file name, accents either way.
		{"zanzibarquux", []string{"invoice"}},
		{"ZanzibarQuux", []string{"invoice"}},
		{"invoice", []string{"invoice"}},
		{"agenda", []string{"lunch"}},
		{"frühling", []string{"lunch"}},
		{"fruhling", []string{"lunch"}},
		{"café", []string{"lunch"}},
		{"CAFE", []string{"lunch"}},
		{"nosuchword", nil},
		// Phrases.
		{`"quick brown fox"`, []string{"fox"}},
		{`"brown quick"`, nil},
		{`"the secret word"`, []string{"invoice"}},
		// Fields: names and addresses.
		{"from:alice", []string{"invoice"}},
		{"from:alice@example.com", []string{"invoice"}},
		{"from:example.com", []string{"fox", "invoice"}},
		{`from:"Bob Builder"`, []string{"lunch"}},
		{"from:builder", []string{"lunch"}},
		{"to:bob", []string{"invoice"}},
		{"to:alice@example.com", []string{"lunch"}},
		{"cc:carol", []string{"invoice"}},
		{"cc:alice", nil},
		{"subject:lunch", []string{"lunch"}},
		{"subject:friday", nil},
		{"filename:agenda", []string{"lunch"}},
		{"FROM:alice", []string{"invoice"}},
		// Flags and labels.
		{"label:invoices", []string{"invoice"}},
		{"label:INVOICES", []string{"invoice"}},
		{"label:other", nil},
		{"is:starred", []string{"invoice"}},
		{"is:unread", []string{"fox", "invoice"}},
		{"is:read", []string{"lunch"}},
		{"has:attachment", []string{"lunch"}},
		// Dates: received time, UTC; now is 2026-03-10 12:00.
		{"after:2026/02/01", []string{"lunch"}},
		{"before:2026/01/01", []string{"fox"}},
		{"after:2026-01-01 before:2026-02-01", []string{"invoice"}},
		{"after:1767225600", []string{"invoice", "lunch"}},
		{"newer_than:30d", []string{"lunch"}},
		{"older_than:2m", []string{"fox", "invoice"}},
		{"older_than:1y", nil},
		{"newer_than:1y", []string{"fox", "invoice", "lunch"}},
		// Negation, OR, parentheses, combinations.
		{"-invoice", []string{"fox", "lunch"}},
		{"-is:read -label:invoices", []string{"fox"}},
		{"invoice OR lunch", []string{"invoice", "lunch"}},
		{"invoice | lunch", []string{"invoice", "lunch"}},
		{"(invoice OR lunch) -from:bob", []string{"invoice"}},
		{"from:bob OR from:alice", []string{"invoice", "lunch"}},
		{"is:unread has:attachment", nil},
		{"quick -dog", nil},
		{"quick -zanzibarquux", []string{"fox"}},
		{"-(invoice OR lunch)", []string{"fox"}},
		{"from:example.com is:unread -label:invoices", []string{"fox"}},
		{"invoice AND friday", []string{"invoice"}},
		// Folders.
		{"in:anywhere invoice", []string{"invoice", "sent"}},
		{"in:sent", []string{"sent"}},
		{"in:archive", []string{"cyrillic"}},
		{"in:inbox OR in:archive is:unread", []string{"cyrillic", "fox", "invoice", "lunch"}},
		{"in:anywhere -in:inbox", []string{"cyrillic", "sent"}},
		// Unicode and case, in every script.
		{"in:anywhere σοφια", []string{"cyrillic"}},
		{"in:anywhere ΣΟΦΙΑ", []string{"cyrillic"}},
		{"in:anywhere дмитрий", []string{"cyrillic"}},
		{"in:anywhere from:ДМИТРИЙ", []string{"cyrillic"}},
		{"in:anywhere unicode", []string{"cyrillic"}},
		// Text cannot pass for the index's scope terms: a body spelling
		// them stays in its own folder.
		{"numbers", nil},
		{"in:archive numbers", []string{"cyrillic"}},
		{`"§f1"`, nil},
		{"in:anywhere f1", []string{"cyrillic"}},
		// Markdown made from HTML: its text counts, not its syntax.
		{"in:anywhere link", []string{"cyrillic"}},
	}
	for _, tc := range cases {
		got, err := f.search(t, "inbox", Query{Search: tc.q})
		if err != nil {
			t.Errorf("%q: %v", tc.q, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, want %v", tc.q, got, tc.want)
		}
	}
}

// The structured filters keep working beside a query, and text reaches the
// body.
func TestSearchWithStructuredFilters(t *testing.T) {
	f := newSearchFixture(t)
	cases := []struct {
		q    Query
		want []string
	}{
		{Query{Text: "zanzibarquux"}, []string{"invoice"}},
		{Query{Text: "zanzibar"}, []string{"invoice"}},
		{Query{Text: "QUARTERLY"}, []string{"invoice"}},
		{Query{Text: "arterly"}, []string{"invoice"}}, // a substring of the subject
		{Query{Text: "builder.test"}, []string{"lunch"}},
		{Query{Search: "invoice OR lunch", Unread: ptr(true)}, []string{"invoice"}},
		{Query{Search: "-fox", From: "bob"}, []string{"lunch"}},
		{Query{Search: "is:unread", Label: "invoices"}, []string{"invoice"}},
	}
	for _, tc := range cases {
		got, err := f.search(t, "inbox", tc.q)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%+v: got %v (%v), want %v", tc.q, got, err, tc.want)
		}
	}
}

func TestSearchErrorsNameTheToken(t *testing.T) {
	f := newSearchFixture(t)
	cases := []struct{ q, token string }{
		{"foo:bar", "foo:bar"},
		{"invoice colour:red", "colour:red"},
		{`"never closed`, `"never closed`},
		{"is:maybe", "is:maybe"},
		{"has:pdf", "has:pdf"},
		{"in:spam", "in:spam"},
		{"before:yesterday", "before:yesterday"},
		{"older_than:3w", "older_than:3w"},
		{"newer_than:d", "newer_than:d"},
		{"(invoice", "("},
		{"invoice)", ")"},
		{"invoice -", "-"},
		{"OR invoice", "OR"},
		{"invoice OR", "OR"},
		{"from:", "from:"},
		{"label:a,b", "label:a,b"},
		{"!!!", "!!!"},
		{"()", "()"},
	}
	for _, tc := range cases {
		_, err := f.search(t, "inbox", Query{Search: tc.q})
		var se *SearchError
		if !errors.As(err, &se) || se.Token != tc.token || !strings.Contains(err.Error(), tc.token) {
			t.Errorf("%q: error %v, want one naming %q", tc.q, err, tc.token)
		}
	}
	for _, q := range []string{strings.Repeat("a ", MaxSearchLen), strings.Repeat("(", 40) + "a" + strings.Repeat(")", 40), strings.Repeat("a OR ", 100) + "a", "\xff"} {
		var se *SearchError
		if _, err := f.search(t, "inbox", Query{Search: q}); !errors.As(err, &se) {
			t.Errorf("%.40q...: error %v, want a SearchError", q, err)
		}
	}
}

func TestParseSearchTree(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	cases := map[string]string{
		"a b":                    "(a b)",
		"a OR b c":               "(a OR (b c))",
		"a (b OR c)":             "(a (b OR c))",
		"-a -from:b":             "(-a -from:b)",
		`subject:"x y" "p q"`:    `(subject:"x y" "p q")`,
		"12:30 C:drive":          "(12:30 C:drive)",
		"a-b":                    "a-b",
		"is:UNREAD In:Inbox":     "(is:unread in:inbox)",
		"a AND b":                "(a b)",
		"(((a)))":                "a",
		"from:alice -(b OR c) d": "(from:alice -(b OR c) d)",
	}
	for q, want := range cases {
		n, err := ParseSearch(q, now)
		if err != nil {
			t.Errorf("%q: %v", q, err)
			continue
		}
		if got := n.String(); got != want {
			t.Errorf("%q: %s, want %s", q, got, want)
		}
	}
}

// FuzzParseSearch: any query either parses or is refused with a SearchError;
// what parses prints back to a query that parses to the same tree, and runs
// against a real index without an engine error (every full-text term the
// compiler writes is one the engine reads).
func FuzzParseSearch(f *testing.F) {
	for _, q := range []string{
		"invoice", `"quick brown fox"`, "from:alice@example.com -label:done", "(a OR b) -(c OR d)",
		"in:anywhere is:unread has:attachment", "after:2026/01/31 before:1767225600 newer_than:7d older_than:2m",
		`subject:"x y" cc:bob to:"a@b.c" filename:report.pdf`, "a | b AND c", "12:30 C:drive", "ΣΟΦΙΑ café 東京",
		`"unclosed`, "((((a))))", "-", "OR", "foo:bar", "a\x00b", `""`, `from:""`, "NEAR(a b)", "a* ^b {subject}:c",
	} {
		f.Add(q)
	}
	s := newTestStore(f)
	deliver(f, s, "inbox", testMessage(1), "some words to find")
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, q string) {
		n, err := ParseSearch(q, now)
		if err != nil {
			var se *SearchError
			if !errors.As(err, &se) {
				t.Fatalf("%q: error %v is not a SearchError", q, err)
			}
			return
		}
		again, err := ParseSearch(n.String(), now)
		if err != nil || again.String() != n.String() {
			t.Fatalf("%q printed as %q, which parses to %v (%v)", q, n.String(), again, err)
		}
		if _, err := s.List("agent", "inbox", Query{Search: q}); err != nil {
			t.Fatalf("%q (%s): %v", q, n, err)
		}
	})
}

// A filter longer than a search query may be is refused, not run.
func TestListFiltersAreBounded(t *testing.T) {
	s := newTestStore(t)
	long := strings.Repeat("é", MaxSearchLen/2+1)
	for _, q := range []Query{{From: long}, {Subject: long}, {Text: long}, {ThreadID: long}, {Label: long}} {
		var se *SearchError
		if _, err := s.List("agent", "inbox", q); !errors.As(err, &se) {
			t.Errorf("%+v: %v, want a SearchError", q, err)
		}
	}
	if _, err := s.List("agent", "inbox", Query{Text: strings.Repeat("x", MaxSearchLen)}); err != nil {
		t.Errorf("a filter of the most bytes: %v", err)
	}
}

// Regression: from: with an address or a domain matched the display name the
// sender typed, so `"noreply@service.example" <attacker@evil.example>` was
// listed as the service's mail, as the listing's from filter and the waits
// did before (protocol.SenderMatches keeps the same rule). Such a term is
// looked for in the sender's address; a word is still looked for in the
// whole sender, name included. A sender the store could not parse, kept as
// it came, has no address part.
func TestSearchFromAddressIsNotTheDisplayName(t *testing.T) {
	s := newTestStore(t)
	for i, from := range []string{
		`"noreply@service.example" <attacker@evil.example>`, // spoof
		`Service <noreply@service.example>`,                 // real
		`noreply@service.example`,                           // bare
		`<noreply@service.example> attacker@evil.example`,   // broken
	} {
		m := testMessage(i)
		m.From, m.Subject = from, []string{"spoof", "real", "bare", "broken"}[i]
		deliver(t, s, "inbox", m, "body")
	}
	for _, tc := range []struct {
		q    Query
		want []string
	}{
		{Query{Search: "from:noreply@service.example"}, []string{"bare", "real"}},
		{Query{Search: "from:service.example"}, []string{"bare", "real"}},
		{Query{Search: "FROM:NOREPLY@Service.Example is:unread"}, []string{"bare", "real"}},
		{Query{Search: "-from:service.example"}, []string{"broken", "spoof"}},
		{Query{Search: "from:evil.example OR from:service.example"}, []string{"bare", "real", "spoof"}},
		{Query{Search: "from:noreply"}, []string{"bare", "broken", "real", "spoof"}},
		{Query{From: "noreply@service.example"}, []string{"bare", "real"}},
		{Query{From: "service.example"}, []string{"bare", "real"}},
	} {
		p, err := s.List("agent", "inbox", tc.q)
		if err != nil {
			t.Fatalf("%+v: %v", tc.q, err)
		}
		var got []string
		for _, it := range p.Items {
			got = append(got, it.Subject)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v: got %v, want %v", tc.q, got, tc.want)
		}
	}
}
