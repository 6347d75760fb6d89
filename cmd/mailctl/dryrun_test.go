package main

import (
	"bytes"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

// TestDryRunSaysTheTagIsPending: a dry run prints the return path it was
// given, and says what its <tag> stands for.
func TestDryRunSaysTheTagIsPending(t *testing.T) {
	var buf bytes.Buffer
	saved := stdout
	stdout = &buf
	defer func() { stdout = saved }()
	res := protocol.SendResult{MessageID: "m1@mailctl.test", Status: "dry_run", SizeBytes: 812,
		Envelope: protocol.Envelope{MailFrom: "agent+bounce-" + protocol.PendingTag + "@mailctl.test", RcptTo: []string{"bob@example.org"}}}
	if code := printSendResult(res); code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := "dry run: 812 bytes, MAIL FROM:<agent+bounce-<tag>@mailctl.test>, RCPT TO: bob@example.org\n" +
		"Message-ID: <m1@mailctl.test>\n" +
		"<tag>: the return path's tag, made when the message is sent\n"
	if got := buf.String(); got != want {
		t.Errorf("dry run printed:\n%s\nwant:\n%s", got, want)
	}
}
