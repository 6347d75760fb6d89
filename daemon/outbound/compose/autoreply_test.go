package compose

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// An automatic reply goes to one address, the parent's envelope sender
// (RFC 3834 section 4): a message whose Reply-To names a hundred strangers
// must not make an agent's responder write to each of them.
func TestAutoReplyGoesToTheReturnPathOnly(t *testing.T) {
	var strangers []string
	for i := range 100 {
		strangers = append(strangers, fmt.Sprintf("stranger%d@victims.test", i))
	}
	parent := func(returnPath string) *store.Message {
		return &store.Message{MessageID: "p@remote.test", From: "Bob <bob@remote.test>", ReplyTo: strangers,
			To: []string{"agent@example.com"}, Cc: strangers[:3], Subject: "hi", ReturnPath: returnPath}
	}
	tests := []struct {
		name   string
		parent *store.Message
		want   []string
	}{
		{"recorded return path", parent("<bounces+x@lists.remote.test>"), []string{"bounces+x@lists.remote.test"}},
		// Before return_path was recorded: one address, the first usable.
		{"no return path, a Reply-To", parent(""), []string{"stranger0@victims.test"}},
		{"no return path, a Reply-To starting with an unusable address",
			&store.Message{MessageID: "p@remote.test", From: "bob@remote.test", ReplyTo: append([]string{`"a,b"@remote.test`}, strangers...)},
			[]string{"stranger0@victims.test"}},
		{"no return path, no Reply-To", &store.Message{MessageID: "p@remote.test", From: "Bob <bob@remote.test>"}, []string{"bob@remote.test"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := compose(t, protocol.SendArgs{Body: "I am away", AutoReply: true}, tt.parent)
			if !slices.Equal(c.Envelope.RcptTo, tt.want) || len(c.To) != 1 || len(c.Cc)+len(c.Bcc) != 0 {
				t.Errorf("auto-reply to %v (To %v, Cc %v); want %v only", c.Envelope.RcptTo, c.To, c.Cc, tt.want)
			}
			if h := headerBlock(c.Raw); !strings.Contains(h, "Auto-Submitted: auto-replied\r\n") || strings.Contains(h, "victims.test") && tt.want[0] != "stranger0@victims.test" {
				t.Errorf("header:\n%s", h)
			}
		})
	}
	// A reply a person asks for still goes where the parent asked answers
	// to go, as a mail client's does.
	c := compose(t, protocol.SendArgs{Body: "ok"}, parent("<bounces+x@lists.remote.test>"))
	if !slices.Equal(c.Envelope.RcptTo, strangers) {
		t.Errorf("a reply (not automatic) went to %d addresses, want the parent's Reply-To (%d)", len(c.Envelope.RcptTo), len(strangers))
	}
}

// RFC 3834 section 2: nothing automatic answers a bounce (null return
// path) or a message that is itself automatic; an automatic reply is to
// one address, so reply_all or recipients of the caller's are refused.
func TestAutoReplyRefusals(t *testing.T) {
	ok := store.Message{MessageID: "p@remote.test", From: "bob@remote.test", Subject: "hi", ReturnPath: "<bob@remote.test>"}
	tests := []struct {
		name   string
		mutate func(a *protocol.SendArgs, p *store.Message)
		want   string
	}{
		{"a null return path", func(_ *protocol.SendArgs, p *store.Message) { p.ReturnPath = "<>" }, "null sender"},
		{"a delivery report stored before return paths", func(_ *protocol.SendArgs, p *store.Message) { p.ReturnPath, p.IsDSN = "", true }, "null sender"},
		{"Auto-Submitted: auto-replied", func(_ *protocol.SendArgs, p *store.Message) { p.AutoSubmitted = "auto-replied" }, "itself automatic"},
		{"Auto-Submitted with a parameter and odd case", func(_ *protocol.SendArgs, p *store.Message) { p.AutoSubmitted = " Auto-Generated ; owner=x" }, "itself automatic"},
		{"reply_all", func(a *protocol.SendArgs, _ *store.Message) { a.ReplyAll = true }, "reply_all"},
		{"recipients of the caller's", func(a *protocol.SendArgs, _ *store.Message) { a.Cc = []string{"carol@remote.test"} }, "no to, cc or bcc"},
		{"a message the mailbox sent", func(_ *protocol.SendArgs, p *store.Message) { p.Outbound, p.ReturnPath = true, "" }, "this mailbox sent"},
		{"a return path cut at its bound", func(_ *protocol.SendArgs, p *store.Message) {
			p.ReturnPath = store.ReturnPathOf("bob@" + strings.Repeat("a", 60) + "." + strings.Repeat("b", 300) + ".test")
		}, "parent return path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, p := protocol.SendArgs{Body: "I am away", AutoReply: true}, ok
			tt.mutate(&a, &p)
			_, err := Build(Input{FromAddress: "agent@example.com", Domain: "example.com", Args: a, Parent: &p})
			if protocol.CodeOf(err) != protocol.CodeInvalidInput || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want invalid_input saying %q", err, tt.want)
			}
		})
	}
	// "no" is a person's message: answered.
	p := ok
	p.AutoSubmitted = "No"
	if c := compose(t, protocol.SendArgs{Body: "x", AutoReply: true}, &p); !slices.Equal(c.Envelope.RcptTo, []string{"bob@remote.test"}) {
		t.Errorf("Auto-Submitted: No answered to %v", c.Envelope.RcptTo)
	}
}
