package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The search language is Gmail's, the one agents and their users already
// know:
//
//	word "a phrase"            words anywhere: subject, sender, recipients,
//	                           cc, body, attachment file names
//	from: to: cc: subject:     a word or "phrase" in that field (names and
//	filename:                  addresses; attachment file names)
//	label:NAME                 carrying the label (ignoring case)
//	is:unread is:read is:starred
//	has:attachment
//	in:FOLDER in:anywhere      inbox, sent, archive, trash, drafts, or all
//	after:DATE before:DATE     received on or after / before, DATE as
//	                           2026/01/31, 2026-01-31 or Unix seconds (UTC)
//	newer_than:N older_than:N  N days (7d), months (2m) or years (1y)
//	-term                      negation
//	a OR b                     either (OR in capitals; | too)
//	( … )                      grouping; terms side by side must all match
//
// ParseSearch turns a query into a tree; an error names the token it could
// not read.

// MaxSearchLen bounds a query's length, and a filter's (List), and
// maxSearchTerms and maxSearchDepth a query's terms and nesting.
const (
	MaxSearchLen   = 2048
	maxSearchTerms = 64
	maxSearchDepth = 16
)

// SearchError is a query the store cannot read, naming the token.
type SearchError struct {
	Token  string
	Reason string
}

func (e *SearchError) Error() string {
	if e.Token == "" {
		return "query: " + e.Reason
	}
	return fmt.Sprintf("query: cannot read %q: %s", e.Token, e.Reason)
}

// searchOp is the kind of a node of a query tree.
type searchOp int

const (
	opTerm searchOp = iota
	opAnd
	opOr
	opNot
)

// searchNode is a node of a parsed query.
type searchNode struct {
	op   searchOp
	kids []*searchNode
	// For opTerm.
	field  string // "" for text anywhere, else the operator without its colon
	value  string // the word or phrase; for dates, the bound in Unix ns
	token  string // as written, for messages
	phrase bool   // quoted
	when   int64  // for date operators: the bound, Unix nanoseconds
}

// Operators and their accepted values.
var (
	textFields   = []string{"from", "to", "cc", "subject", "filename"}
	isValues     = []string{"unread", "read", "starred"}
	dateFields   = []string{"after", "before", "newer_than", "older_than"}
	allOperators = "from:, to:, cc:, subject:, filename:, label:, is:, has:, in:, after:, before:, newer_than:, older_than:"
)

// ParseSearch parses a query; now is the time newer_than: and older_than:
// count back from.
func ParseSearch(q string, now time.Time) (*searchNode, error) {
	if len(q) > MaxSearchLen {
		return nil, &SearchError{Reason: fmt.Sprintf("the query is %d bytes long, the maximum is %d", len(q), MaxSearchLen)}
	}
	if !utf8.ValidString(q) {
		return nil, &SearchError{Reason: "the query is not valid UTF-8"}
	}
	toks, err := lexSearch(q)
	if err != nil {
		return nil, err
	}
	p := &searchParser{toks: toks, now: now}
	n, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, &SearchError{Token: p.toks[p.pos].text, Reason: "a closing parenthesis without an opening one"}
	}
	if n == nil {
		return nil, &SearchError{Reason: "the query is empty"}
	}
	return n, nil
}

// searchToken is a lexical token: a parenthesis, OR, a negation mark, or a
// term (possibly op:value, possibly quoted).
type searchToken struct {
	kind   byte // '(' ')' '|' '-' or 't'
	text   string
	field  string
	value  string
	phrase bool
}

func lexSearch(q string) ([]searchToken, error) {
	var out []searchToken
	i := 0
	for i < len(q) {
		r, size := utf8.DecodeRuneInString(q[i:])
		switch {
		case unicode.IsSpace(r):
			i += size
		case r == '(' || r == ')' || r == '|':
			out = append(out, searchToken{kind: byte(r), text: string(r)})
			i++
		case r == '-' && i+1 < len(q) && !unicode.IsSpace(rune(q[i+1])) && (i == 0 || isBreak(q[i-1])):
			out = append(out, searchToken{kind: '-', text: "-"})
			i++
		default:
			t, n, err := lexTerm(q[i:])
			if err != nil {
				return nil, err
			}
			out = append(out, t)
			i += n
		}
		if len(out) > 4*maxSearchTerms {
			return nil, &SearchError{Reason: fmt.Sprintf("more than %d terms", maxSearchTerms)}
		}
	}
	return out, nil
}

// isBreak reports whether c ends a token, so that a '-' after it starts a
// negation.
func isBreak(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(' }

// lexTerm reads one term: "phrase", word, op:word or op:"phrase".
func lexTerm(s string) (searchToken, int, error) {
	if s[0] == '"' {
		v, n, err := lexQuoted(s)
		return searchToken{kind: 't', text: s[:n], value: v, phrase: true}, n, err
	}
	end := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '(' || r == ')' || r == '"' })
	if end < 0 {
		end = len(s)
	}
	word := s[:end]
	field, value, hasOp := strings.Cut(word, ":")
	if !hasOp || !isOperatorName(field) {
		return searchToken{kind: 't', text: word, value: word}, end, nil
	}
	field = strings.ToLower(field)
	if !isKnownOperator(field) {
		return searchToken{}, 0, &SearchError{Token: word, Reason: fmt.Sprintf("unknown operator %q: use one of %s, or put the text in quotes", field+":", allOperators)}
	}
	if value == "" && end < len(s) && s[end] == '"' {
		v, n, err := lexQuoted(s[end:])
		if err != nil {
			return searchToken{}, 0, err
		}
		return searchToken{kind: 't', text: s[:end+n], field: field, value: v, phrase: true}, end + n, nil
	}
	if value == "" {
		return searchToken{}, 0, &SearchError{Token: word, Reason: fmt.Sprintf("%s: needs a value right after the colon, a word or a \"quoted phrase\"", field)}
	}
	return searchToken{kind: 't', text: word, field: field, value: value}, end, nil
}

func lexQuoted(s string) (string, int, error) {
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", 0, &SearchError{Token: s, Reason: "a quote that is never closed"}
	}
	return s[1 : 1+end], end + 2, nil
}

// isOperatorName reports whether s looks like an operator (letters and
// underscores): "12:30" or "C:" in other text are words.
func isOperatorName(s string) bool {
	if len(s) < 2 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_') {
			return false
		}
	}
	return true
}

func isKnownOperator(f string) bool {
	return slices.Contains(textFields, f) || slices.Contains(dateFields, f) || f == "label" || f == "is" || f == "has" || f == "in"
}

type searchParser struct {
	toks  []searchToken
	pos   int
	terms int
	now   time.Time
}

func (p *searchParser) peek() *searchToken {
	if p.pos < len(p.toks) {
		return &p.toks[p.pos]
	}
	return nil
}

// or parses alternatives: and (OR and)*.
func (p *searchParser) or(depth int) (*searchNode, error) {
	if depth > maxSearchDepth {
		return nil, &SearchError{Reason: fmt.Sprintf("parentheses nested deeper than %d", maxSearchDepth)}
	}
	first, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	alts := []*searchNode{first}
	for {
		t := p.peek()
		if t == nil || !isOr(t) {
			break
		}
		p.pos++
		next, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		if first == nil || next == nil {
			return nil, &SearchError{Token: t.text, Reason: "OR needs a term on each side"}
		}
		alts = append(alts, next)
	}
	if len(alts) == 1 {
		return first, nil
	}
	return &searchNode{op: opOr, kids: alts}, nil
}

func isOr(t *searchToken) bool {
	return t.kind == '|' || t.kind == 't' && !t.phrase && t.field == "" && t.value == "OR"
}

// and parses terms side by side until OR, a closing parenthesis or the end.
func (p *searchParser) and(depth int) (*searchNode, error) {
	var kids []*searchNode
	for {
		t := p.peek()
		if t == nil || t.kind == ')' || isOr(t) {
			break
		}
		n, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		if n != nil {
			kids = append(kids, n)
		}
	}
	switch len(kids) {
	case 0:
		return nil, nil
	case 1:
		return kids[0], nil
	}
	return &searchNode{op: opAnd, kids: kids}, nil
}

// unary parses -x, ( … ) or a term. AND between terms is accepted and
// means what a space means.
func (p *searchParser) unary(depth int) (*searchNode, error) {
	t := p.peek()
	p.pos++
	switch t.kind {
	case '-':
		next := p.peek()
		if next == nil || next.kind == ')' || isOr(next) {
			return nil, &SearchError{Token: "-", Reason: "a minus needs a term right after it"}
		}
		n, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		if n == nil {
			return nil, &SearchError{Token: "-", Reason: "a minus needs a term right after it"}
		}
		return &searchNode{op: opNot, kids: []*searchNode{n}}, nil
	case '(':
		n, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if c := p.peek(); c == nil || c.kind != ')' {
			return nil, &SearchError{Token: "(", Reason: "a parenthesis that is never closed"}
		}
		p.pos++
		if n == nil {
			return nil, &SearchError{Token: "()", Reason: "empty parentheses"}
		}
		return n, nil
	case ')':
		return nil, &SearchError{Token: ")", Reason: "a closing parenthesis without an opening one"}
	}
	if !t.phrase && t.field == "" && t.value == "AND" {
		return nil, nil
	}
	p.terms++
	if p.terms > maxSearchTerms {
		return nil, &SearchError{Token: t.text, Reason: fmt.Sprintf("more than %d terms", maxSearchTerms)}
	}
	return p.term(t)
}

// term checks and converts one term.
func (p *searchParser) term(t *searchToken) (*searchNode, error) {
	n := &searchNode{op: opTerm, field: t.field, value: t.value, token: t.text, phrase: t.phrase}
	bad := func(format string, a ...any) (*searchNode, error) {
		return nil, &SearchError{Token: t.text, Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case t.field == "" || slices.Contains(textFields, t.field):
		if !hasWord(t.value) {
			return bad("nothing to search for: give letters or digits")
		}
	case t.field == "label":
		if err := ValidLabel(t.value); err != nil {
			return bad("%v", err)
		}
	case t.field == "is":
		n.value = strings.ToLower(t.value)
		if !slices.Contains(isValues, n.value) {
			return bad("is: takes unread, read or starred")
		}
	case t.field == "has":
		n.value = strings.ToLower(t.value)
		if n.value != "attachment" && n.value != "attachments" {
			return bad("has: takes attachment")
		}
	case t.field == "in":
		n.value = strings.ToLower(t.value)
		if n.value != "anywhere" && !slices.Contains(Folders, n.value) {
			return bad("in: takes %s or anywhere", strings.Join(Folders, ", "))
		}
	case t.field == "after" || t.field == "before":
		d, ok := parseSearchDate(t.value)
		if !ok {
			return bad("%s: takes a date as 2026/01/31, 2026-01-31 or Unix seconds", t.field)
		}
		n.when = UnixNano(d)
	case t.field == "newer_than" || t.field == "older_than":
		d, ok := searchAgo(p.now, t.value)
		if !ok {
			return bad("%s: takes a number and a unit: 7d (days), 2m (months) or 1y (years)", t.field)
		}
		n.when = UnixNano(d)
	}
	return n, nil
}

// hasWord reports whether s has a letter or a digit: the full-text index
// holds nothing else.
func hasWord(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }) >= 0
}

// parseSearchDate reads 2026/01/31, 2026/1/31, 2026-01-31 (midnight UTC)
// or Unix seconds.
func parseSearchDate(s string) (time.Time, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && len(s) > 8 && n >= 0 && n < 1<<40 {
		return time.Unix(n, 0).UTC(), true
	}
	for _, layout := range []string{"2006/1/2", "2006-1-2"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// searchAgo is now minus an amount such as 7d, 2m or 1y.
func searchAgo(now time.Time, s string) (time.Time, bool) {
	if len(s) < 2 {
		return time.Time{}, false
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n < 0 || n > 100_000 || s[0] == '+' || s[0] == '-' {
		return time.Time{}, false
	}
	switch s[len(s)-1] {
	case 'd', 'D':
		return now.AddDate(0, 0, -n), true
	case 'm', 'M':
		return now.AddDate(0, -n, 0), true
	case 'y', 'Y':
		return now.AddDate(-n, 0, 0), true
	}
	return time.Time{}, false
}

// usesFolders reports whether the query names folders (in:), which makes it
// search every folder of the mailbox rather than the one listed.
func (n *searchNode) usesFolders() bool {
	if n == nil {
		return false
	}
	if n.op == opTerm {
		return n.field == "in"
	}
	return slices.ContainsFunc(n.kids, (*searchNode).usesFolders)
}

// readsAsSyntax reports whether a word, written alone after a space, would
// be read as more than a word: one that starts with a minus (taken whole
// only right after another term) reads as a negation.
func readsAsSyntax(v string) bool {
	return len(v) > 1 && v[0] == '-'
}

// String writes the tree back in a canonical form, for tests.
func (n *searchNode) String() string {
	switch n.op {
	case opNot:
		if n.kids[0].op == opNot {
			// "--x" reads as the negation of the word "-x": a negation
			// of a negation keeps its parentheses.
			return "-(" + n.kids[0].String() + ")"
		}
		return "-" + n.kids[0].String()
	case opAnd, opOr:
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = k.String()
		}
		sep := " "
		if n.op == opOr {
			sep = " OR "
		}
		return "(" + strings.Join(parts, sep) + ")"
	}
	v := n.value
	// A phrase holds no quote. A word the tokenizer took whole though it
	// reads as syntax on its own ("0"-AA: gives the word -AA:) is written
	// as a phrase of itself, which searches the same words.
	if n.phrase || n.field == "" && !strings.Contains(v, `"`) && readsAsSyntax(v) {
		v = `"` + v + `"`
	}
	if n.field != "" {
		return n.field + ":" + v
	}
	return v
}
