package compose

import (
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

func TestCheckDraft(t *testing.T) {
	ok := []protocol.SendArgs{
		{},
		{Subject: "no recipients yet"},
		{To: []string{"Bob <bob@example.org>"}, Cc: []string{"c@example.org"}, InReplyTo: "<a@b.test>", References: []string{"<r@b.test>"}},
		{Attachments: []protocol.SendAttachment{{Filename: "a.txt", Data: []byte("x")}}},
	}
	for _, a := range ok {
		if _, err := CheckDraft(a); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
	bad := []protocol.SendArgs{
		{Subject: "a\r\nBcc: x@y.test"},
		{To: []string{"nobody"}},
		{Bcc: []string{"x@y.test>"}},
		{References: []string{"<r@b.test>"}},
		{InReplyTo: "not a message id"},
		{Attachments: []protocol.SendAttachment{{Filename: "../etc/passwd"}}},
	}
	for _, a := range bad {
		if _, err := CheckDraft(a); protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("%+v: %v, want invalid_input", a, err)
		}
	}
}

// FuzzCheckDraft: whatever a caller or a hand edit puts in a draft's
// headers, the check answers (never panics), and what it accepts builds.
func FuzzCheckDraft(f *testing.F) {
	f.Add("Plan", "bob@example.org", "", "", "a.txt")
	f.Add("Re: x\r\nBcc: y", "\"Bob, B\" <bob@example.org>", "<a@b>", "<r@b>", "../x")
	f.Add("", "", "", "<r@b>", "")
	f.Fuzz(func(t *testing.T, subject, to, inReplyTo, ref, filename string) {
		a := protocol.SendArgs{Subject: subject, To: strings.Split(to, ";"), InReplyTo: inReplyTo}
		if ref != "" {
			a.References = []string{ref}
		}
		if filename != "" {
			a.Attachments = []protocol.SendAttachment{{Filename: filename, Data: []byte("x")}}
		}
		if _, err := CheckDraft(a); err != nil {
			return
		}
		a.Body = "b"
		if _, err := Build(Input{FromAddress: "agent@example.test", Domain: "example.test", Args: a}); err != nil && protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Fatalf("accepted draft does not build: %v", err)
		}
	})
}
