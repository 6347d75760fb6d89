package mcpshim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testwait"
)

// untilEnd collects the answers (by id) the server writes until it closes its
// output, and returns them with what Run returned.
func (r *rawSession) untilEnd(t testing.TB) (map[string]map[string]any, error) {
	t.Helper()
	answers := map[string]map[string]any{}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-r.lines:
			if !ok {
				return answers, testwait.Recv(t, "Run to return once its output closed", r.done)
			}
			if _, isReq := m["method"]; !isReq {
				answers[fmt.Sprint(m["id"])] = m
			}
		case <-timeout:
			t.Fatalf("the server did not end after stdin closed; answers so far: %v", answers)
		}
	}
}

// Regression: a client that wrote its requests and closed stdin lost the
// answers not yet written (all of them, when initialize was still running):
// the SDK cancels what is in flight as soon as its reader ends.
func TestStdinEOFAnswersEveryRequest(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := serveRaw(t, New(Options{SocketPath: d.Socket}), &LineTransport{})
	r.send(initializeLine + "\n" + initializedLine + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"mailbox_list","arguments":{}}}`)
	r.in.Close()
	answers, err := r.untilEnd(t)
	if err != nil {
		t.Fatalf("Run after stdin closed: %v", err)
	}
	if answers["init"]["result"] == nil {
		t.Fatalf("initialize: no answer after stdin closed: %v", answers)
	}
	res, _ := answers["2"]["result"].(map[string]any)
	if res == nil || res["isError"] == true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "agent") {
		t.Fatalf("mailbox_list: want its result after stdin closed, got %v", answers["2"])
	}
}

// A wait already read when stdin closes runs to its end and is answered (the
// client may still be reading stdout); the server ends after it.
func TestStdinEOFFinishesAWait(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := serveRaw(t, New(Options{SocketPath: d.Socket}), &LineTransport{})
	r.send(initializeLine + "\n" + initializedLine + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","subject":"after eof","timeout_secs":60}}}`)
	r.in.Close()
	testwait.For(t, "the wait's watch", func() bool { return d.Watchers() > 0 })
	d.Deliver(t, "agent", testdaemon.Message{From: "noreply@service.test", Subject: "Sent after EOF", Body: "Your code is 739204."})
	answers, err := r.untilEnd(t)
	if err != nil {
		t.Fatalf("Run after stdin closed: %v", err)
	}
	res, _ := answers["3"]["result"].(map[string]any)
	if res == nil || res["isError"] == true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "739204") {
		t.Fatalf("email_wait: want the message after stdin closed, got %v", answers["3"])
	}
}

// What still runs after Drain is cancelled: the server ends, with an error
// counting the requests left unanswered, and the wait's watch is closed.
func TestStdinEOFDrainIsBounded(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := serveRaw(t, New(Options{SocketPath: d.Socket}), &LineTransport{Drain: 50 * time.Millisecond})
	r.send(initializeLine + "\n" + initializedLine + "\n" +
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}`)
	r.in.Close()
	answers, err := r.untilEnd(t)
	if err == nil || !strings.Contains(err.Error(), "request(s) unanswered") {
		t.Fatalf("Run: want an error counting the unanswered wait, got %v", err)
	}
	if m, ok := answers["4"]; ok {
		t.Fatalf("email_wait answered within 50ms with no mail: %v", m)
	}
	testwait.For(t, "the wait's watch to end", func() bool { return d.Watchers() == 0 })
}

// A client that wants a call stopped rather than finished cancels it before
// closing stdin; the server then ends at once.
func TestStdinEOFAfterCancel(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := serveRaw(t, New(Options{SocketPath: d.Socket}), &LineTransport{})
	r.send(initializeLine + "\n" + initializedLine + "\n" +
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	r.in.Close()
	if _, err := r.untilEnd(t); err != nil {
		t.Fatalf("Run after a cancel and stdin closed: %v", err)
	}
	testwait.For(t, "the wait's watch to end", func() bool { return d.Watchers() == 0 })
}

// Regression: cancelling Run's context (SIGTERM or SIGINT for `mailctl mcp`)
// left the calls running: the SDK's session close waits for them without
// cancelling them, so an email_wait held the server until its own timeout.
// Unlike the end of stdin, a stop cancels them (and closes their watches)
// and Run returns at once, whether stdin is still open or already closed
// (its drain is cut short).
func TestRunCancelStopsAWait(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	for _, closeStdin := range []bool{false, true} {
		t.Run(fmt.Sprintf("stdin closed %v", closeStdin), func(t *testing.T) {
			r := serveRaw(t, New(Options{SocketPath: d.Socket}), &LineTransport{})
			r.send(initializeLine + "\n" + initializedLine + "\n" +
				`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}`)
			if closeStdin {
				r.in.Close()
			}
			testwait.For(t, "the wait's watch", func() bool { return d.Watchers() > 0 })
			r.stop()
			select {
			case err := <-r.done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run after a stop: want context.Canceled, got %v", err)
				}
			case <-time.After(testwait.Timeout):
				d.Stop() // ends the wait, so that the test's cleanup does not hang
				t.Fatalf("Run still running %v after its context was cancelled, held by the wait", testwait.Timeout)
			}
			testwait.For(t, "the wait's watch to end", func() bool { return d.Watchers() == 0 })
		})
	}
}

// A wait its client cancels ends at once and its watch is closed; the answer
// written for it says it was cancelled, never that the wait timed out (nor
// a since that reaches back its whole timeout).
func TestCancelledWaitIsNoTimeout(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := startRaw(t, New(Options{SocketPath: d.Socket}), 0)
	r.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}`)
	testwait.For(t, "the wait's watch", func() bool { return d.Watchers() > 0 })
	r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	testwait.For(t, "the wait's watch to end", func() bool { return d.Watchers() == 0 })
	// The SDK writes the cancelled call's answer (which clients discard);
	// it must not say the wait timed out.
	waitAnswer := r.reply(t, "7")
	res, _ := waitAnswer["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	next, _ := sc["next_action"].(map[string]any)
	if sc["code"] != "unavailable" || !strings.Contains(fmt.Sprint(sc["message"]), "cancelled") || next["tool"] != "email_wait" {
		t.Fatalf("cancelled wait: want unavailable, saying it was cancelled, with a next email_wait; got %v", waitAnswer)
	}
}

// TestEmailWaitsAreBounded: each email_wait holds a daemon connection of
// its own, and the daemon allows a user only so many: one server runs at
// most MaxWaits at once, and refuses the next one at once, rate_limited,
// rather than let it take a connection every other call of the user needs.
func TestEmailWaitsAreBounded(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	r := startRaw(t, New(Options{SocketPath: d.Socket}), 0)
	const wait = `{"jsonrpc":"2.0","id":"%s","method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}`
	for i := range MaxWaits {
		r.send(fmt.Sprintf(wait, fmt.Sprint("w", i)))
	}
	testwait.For(t, "every wait's watch", func() bool { return d.Watchers() == MaxWaits })
	r.send(fmt.Sprintf(wait, "over"))
	m := r.reply(t, "over")
	res, _ := m["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["code"] != "rate_limited" || !strings.Contains(fmt.Sprint(sc["message"]), "email_wait") {
		t.Fatalf("a wait past %d at once: %v, want rate_limited naming email_wait", MaxWaits, m)
	}
	if n := d.Watchers(); n != MaxWaits {
		t.Errorf("%d watches open after the refused wait, want %d", n, MaxWaits)
	}
}
