package bounce

import (
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/ingest"
)

func TestFailedStatus(t *testing.T) {
	for _, c := range []struct {
		f    Failed
		want string
	}{
		{Failed{Code: 550, Detail: "550 5.1.1 no such user (from mx.example.com)"}, "5.1.1"},
		{Failed{Code: 554, Detail: "554 rejected"}, "5.0.0"},
		{Failed{Code: 451, Detail: "gave up after 120h0m0s of temporary failures; last: 451 try later", Expired: true}, "4.4.7"},
		{Failed{Code: 451, Detail: "gave up after 1h; last: 451 4.2.0 busy", Expired: true}, "4.2.0"},
		{Failed{Detail: "the queued message file is unreadable"}, "5.0.0"},
	} {
		if got := c.f.Status(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
}

// The sender's own text (subject, returned headers, remote replies) cannot
// add header lines to the report or end one of its parts.
func TestReportKeepsSenderTextInItsPlace(t *testing.T) {
	r := Report{ReportingMTA: "mx.example.com", From: "MAILER-DAEMON@example.com", To: "alice@example.com", Date: time.Unix(0, 0),
		Original:          []byte("Subject: hi\r\nX-Evil: 1\r\n\r\n--dsn-x--\r\nbody"),
		OriginalMessageID: "m1@example.com", OriginalSubject: "hi\r\nBcc: victim@example.net",
		Recipients: []Failed{{Address: "a@b.example", Code: 550, Detail: "550 5.1.1 no\r\nAction: delivered"}}}
	out := string(r.Bytes())
	if strings.Contains(out, "\r\nBcc:") || strings.Contains(out, "\r\nAction: delivered") || strings.Contains(out, "body") {
		t.Fatalf("sender text escaped its place:\n%s", out)
	}
	if r.MessageID() != (&Report{ReportingMTA: "mx.example.com", OriginalMessageID: "m1@example.com", Recipients: []Failed{{Address: "A@b.example"}}}).MessageID() {
		t.Error("the report's Message-ID depends on more than the message and its failed recipients")
	}
}

// Whatever the sender's headers, subject and the remote server's reply,
// the report parses as a DSN about the original message with one block per
// failed recipient.
func FuzzReportParses(f *testing.F) {
	f.Add([]byte("Subject: hi\r\nMessage-ID: <m1@example.com>\r\n\r\nbody"), "hi", "550 5.1.1 no such user")
	f.Add([]byte("--x\r\n\r\n"), "\x1b[31m", "\r\nAction: delivered\r\n")
	f.Fuzz(func(t *testing.T, original []byte, subject, detail string) {
		r := Report{ReportingMTA: "mx.example.com", From: "MAILER-DAEMON@example.com", To: "alice@example.com", Date: time.Unix(0, 0),
			Original: original, OriginalMessageID: "m1@example.com", OriginalSubject: subject,
			Recipients: []Failed{{Address: "a@b.example", Code: 550, Detail: detail}, {Address: "c@d.example", Code: 451, Detail: detail, Expired: true}}}
		p, err := ingest.Parse(r.Bytes(), ingest.Options{})
		if err != nil || p.DSN == nil {
			t.Fatalf("not a DSN: %v", err)
		}
		if p.DSN.OriginalMessageID != "m1@example.com" && !strings.Contains(string(original), "essage-") {
			t.Errorf("original message id %q", p.DSN.OriginalMessageID)
		}
		if len(p.DSN.Recipients) != 2 || p.DSN.Recipients[0].Action != "failed" || p.DSN.Recipients[1].Address != "c@d.example" {
			t.Fatalf("recipients %+v", p.DSN.Recipients)
		}
	})
}
