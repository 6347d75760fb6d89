package smtpin

import (
	"strings"
	"testing"
	"time"
)

// TestSlowSteadySender sends a message at 100 bytes per second, one byte
// every 10 ms, under a command timeout far shorter than the whole
// transfer: the deadline moves on with each byte, so the message is
// accepted. A sender that stops for longer than the timeout is cut off.
func TestSlowSteadySender(t *testing.T) {
	ts := startServer(t, Limits{CommandTimeout: 300 * time.Millisecond}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	msg := "Subject: slow\r\n\r\none byte at a time, 100 a second\r\n.\r\n" // 0.6 s at 100 B/s
	for i := range len(msg) {
		c.send(msg[i : i+1])
		time.Sleep(10 * time.Millisecond)
	}
	c.expect("250 ")
	if got := ts.be.got(); len(got) != 1 || body(t, got[0].raw) != "Subject: slow\r\n\r\none byte at a time, 100 a second\r\n" {
		t.Fatalf("deliveries: %d", len(got))
	}
	// Silence longer than the command timeout mid-DATA ends the session.
	c.pipelineEnvelope()
	c.send("Subject: stalled\r\n")
	if r := c.reply(); r != "EOF" && !strings.HasPrefix(r, "4") {
		t.Errorf("a stalled sender got %q", r)
	}
}
