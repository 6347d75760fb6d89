package daemon

import (
	"testing"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/protocol"
)

// A message with only an HTML part is found by the words a reader sees in
// it, over SMTP and the socket as an agent meets it: not by its tags, its
// attributes or the text of a style or script element.
func TestHTMLOnlyMessageIsSearchedByItsText(t *testing.T) {
	td := startDaemonWith(t, "", Options{Resolver: &resolver.Map{}})
	td.ensureMine(t, "alice")
	msg := "From: shop@remote.test\nTo: alice@example.test\nSubject: your order\n" +
		"MIME-Version: 1.0\nContent-Type: text/html; charset=utf-8\n\n" +
		"<html><head><style>.zqstyleword{color:red}</style><script>var zqscriptword=1</script></head>" +
		"<body><p class=\"zqclassword\">Your code is <b>xylophonic42</b>.</p>" +
		"<p>Caf&eacute; <i>ordered</i></p></body></html>\n"
	if err := sendSMTP(t, td.SMTPAddrs()[0], "shop@remote.test", []string{"alice@example.test"}, msg); err != nil {
		t.Fatal(err)
	}
	find := func(q string) int {
		t.Helper()
		var l protocol.MessageList
		if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice", Query: q}, &l); err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		return len(l.Messages)
	}
	for q, want := range map[string]int{
		"xylophonic42":          1, // text inside markup
		`"your code is"`:        1, // a phrase across an element boundary
		"café":                  1, // an entity, decoded
		"zqclassword":           0, // an attribute
		"zqstyleword":           0, // a style sheet
		"zqscriptword":          0, // a script
		"xylophonic42 -ordered": 0,
	} {
		if got := find(q); got != want {
			t.Errorf("query %q found %d message(s), want %d", q, got, want)
		}
	}
}
