package testdaemon

import (
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// The daemon's own trust rule gives each kind of delivery its verdict.
func TestDeliverTrust(t *testing.T) {
	d := Start(t, Options{Open: true})
	d.Mailbox(t, "agent")
	for _, c := range []struct {
		rcpt, from string
		sign       bool
		want       string
	}{
		{"agent", "Boss <boss@" + TrustedDomain + ">", true, "true"},
		{"agent", "boss@" + TrustedDomain, false, "false"},
		{"agent", "x@evil.test", true, "false"},
		{OpenMailbox, "boss@" + TrustedDomain, true, "none"},
		{"agent", "me@" + Domain, true, "true"},
	} {
		id := d.Deliver(t, c.rcpt, Message{From: c.from, Subject: "s", Body: "b", Sign: c.sign,
			Attachments: []Attachment{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("hello")}}})
		var m protocol.Message
		d.Call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: c.rcpt, ID: id}, &m)
		if string(m.Trusted) != c.want || len(m.AttachmentList) != 1 {
			t.Errorf("%+v: trusted %q, %d attachments; want %q and 1", c, m.Trusted, len(m.AttachmentList), c.want)
		}
	}
}
