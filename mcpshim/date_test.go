package mcpshim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// Regression: a message without a Date header listed as
// "0001-01-01T00:00:00Z". The daemon shows it with the time it was received
// and says so (date_source "received") in message.list, message.read and the
// new_mail event, and the tools and resources pass that on; a message with a
// Date header keeps it, with no date_source.
func TestMessageWithoutDateShowsReceivedTime(t *testing.T) {
	e := newEnv(t)
	before := time.Now().Add(-time.Second)
	dated := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	withDate := e.deliver("agent", trusted(testdaemon.Message{Subject: "dated", Body: "b", Date: dated}))

	// The new_mail event of the undated message, as a watcher sees it.
	c, err := protocol.Dial(e.ctx, e.d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	events, err := c.Watch(wctx, protocol.WatchArgs{Mailboxes: []string{"agent"}}) // live once it returns
	if err != nil {
		t.Fatal(err)
	}
	id := e.deliver("agent", trusted(testdaemon.Message{Subject: "no date", Body: "b", NoDate: true}))
	seen := false
	for ev := range events {
		if ev.ID != id {
			continue
		}
		seen = true
		if ev.Message == nil || ev.Message.DateSource != protocol.DateReceived || ev.Message.Date.Before(before) {
			t.Errorf("new_mail event: %+v", ev.Message)
		}
		break
	}
	if !seen {
		t.Fatal("the watch ended without the new_mail event")
	}

	var list protocol.MessageList
	e.d.Call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent"}, &list)
	var m protocol.Message
	e.d.Call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: id}, &m)
	if m.DateSource != protocol.DateReceived || !m.Date.Equal(m.ReceivedAt) || m.Date.Before(before) {
		t.Errorf("message.read: date %v (%q), received %v", m.Date, m.DateSource, m.ReceivedAt)
	}
	for _, s := range list.Messages {
		switch s.ID {
		case id:
			if s.DateSource != protocol.DateReceived || !s.Date.Equal(m.ReceivedAt) {
				t.Errorf("message.list row: date %v (%q), want %v (received)", s.Date, s.DateSource, m.ReceivedAt)
			}
		case withDate:
			if s.DateSource != "" || !s.Date.Equal(dated) {
				t.Errorf("dated row: date %v (%q), want %v", s.Date, s.DateSource, dated)
			}
		}
	}

	var data EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent"}, &data)
	found := false
	for _, r := range data.Messages {
		if r.ID == id {
			found = true
			if r.DateSource != protocol.DateReceived || r.Date != m.ReceivedAt.UTC().Format(time.RFC3339) {
				t.Errorf("email_list row: %q (%q)", r.Date, r.DateSource)
			}
		} else if r.DateSource != "" || strings.HasPrefix(r.Date, "0001") {
			t.Errorf("email_list row %s: %q (%q)", r.ID, r.Date, r.DateSource)
		}
	}
	if !found {
		t.Fatalf("email_list lacks %s", id)
	}
	var read EmailReadData
	e.ok("email_read", map[string]any{"mailbox": "agent", "id": id}, &read)
	if read.DateSource != protocol.DateReceived || read.Date.Year() < 2000 {
		t.Errorf("email_read: %v (%q)", read.Date, read.DateSource)
	}
	rr, err := e.cs.ReadResource(e.ctx, &mcp.ReadResourceParams{URI: MessageURI("agent", "inbox", id)})
	if err != nil || !strings.Contains(rr.Contents[0].Text, "(received; the message has no Date header)") {
		t.Errorf("message resource: %v %v", err, rr)
	}
}
