package fakedaemon

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

func start(t *testing.T) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "fakedaemon")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// The fake speaks the wire protocol: a greeting line, then strict JSON lines.
func TestWire(t *testing.T) {
	d := start(t)
	c, err := net.Dial("unix", d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	line, _ := r.ReadString('\n')
	var g protocol.Greeting
	if err := json.Unmarshal([]byte(line), &g); err != nil || g.Protocol != "mailctl" || g.Version != protocol.Version {
		t.Fatalf("greeting %q: %v", line, err)
	}
	for _, tc := range []struct{ req, wantCode string }{
		{`{"id":1,"verb":"mailbox.list"}`, ""},
		{`{"id":2,"verb":"mailbox.list","args":{"surprise":1}}`, protocol.CodeInvalidInput},
		{`{"id":3,"verb":"mailbox.create","args":{"name":"Bad"}}`, protocol.CodeInvalidInput},
		{`{"id":4,"verb":"message.read","args":{"mailbox":"none","id":"x"}}`, protocol.CodeNotFound},
		{`{"id":5,"verb":"nope"}`, protocol.CodeInvalidInput},
		{`{"id":6,"verb":"mailbox.list","extra":true}`, protocol.CodeInvalidInput},
	} {
		c.Write([]byte(tc.req + "\n"))
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		var resp protocol.Response
		if err := protocol.DecodeStrict([]byte(line), &resp); err != nil {
			t.Fatalf("%s: reply %q: %v", tc.req, line, err)
		}
		code := ""
		if resp.Error != nil {
			code = resp.Error.Code
		}
		if code != tc.wantCode {
			t.Errorf("%s: code %q, want %q (%s)", tc.req, code, tc.wantCode, line)
		}
	}
}

func TestClientWatchAndSend(t *testing.T) {
	d := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mb protocol.MailboxCreated
	if err := c.Call(ctx, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "a"}, &mb); err != nil || !mb.Created {
		t.Fatalf("create: %v %+v", err, mb)
	}
	w, err := protocol.Dial(ctx, d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	events, err := w.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	var res protocol.SendResult
	if err := c.Call(ctx, protocol.VerbSend, protocol.SendArgs{FromMailbox: "a", To: []string{"a@" + d.Domain}, Subject: "hi", Body: "b"}, &res); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Type != protocol.EventNewMail || ev.Mailbox != "a" || ev.Message == nil || ev.Message.Subject != "hi" {
			t.Fatalf("event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no new_mail event")
	}
	var list protocol.MessageList
	if err := c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "a", Folder: "sent"}, &list); err != nil || len(list.Messages) != 1 {
		t.Fatalf("sent copy: %v %+v", err, list)
	}
	if _, err := w.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"ghost"}}); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("watch of unknown mailbox: %v", err)
	}
	if !strings.Contains(strings.Join(d.Requests(), " "), "watch") {
		t.Fatalf("requests: %v", d.Requests())
	}
}
