package daemon

import (
	"errors"
	"net/smtp"
	"net/textproto"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/mailctl/mailctl/daemon/ingest"
)

// Regression: a message refused at the end of DATA because its own header is
// past the parse's bounds (552 5.3.4) was counted by no metric, so an
// operator saw neither it nor a sender that kept trying. It counts once per
// message under mailctl_messages_received_total{result="header_too_large"};
// a message that is stored does not move it.
func TestHeaderTooLargeIsCounted(t *testing.T) {
	td, addr, _ := startInbound(t, "")
	td.ensureMine(t, "agent")
	td.ensureMine(t, "other")
	count := func() float64 {
		var v dto.Metric
		if err := td.metrics.received.WithLabelValues("header_too_large").Write(&v); err != nil {
			t.Fatal(err)
		}
		return v.GetCounter().GetValue()
	}
	if err := sendSMTP(t, addr, "a@sender.example", []string{"agent@example.test"},
		"From: a@sender.example\nTo: agent@example.test\nSubject: fine\n\nkept\n"); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("after a message stored: %v, want 0", n)
	}
	raw := "From: a@sender.example\r\nTo: agent@example.test\r\n" + strings.Repeat("X-A: b\r\n", ingest.MaxHeaderFields) + "\r\nthe text\r\n"
	err := smtp.SendMail(addr, nil, "a@sender.example", []string{"agent@example.test", "other@example.test"}, []byte(raw))
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 552 || !strings.HasPrefix(te.Msg, "5.3.4 ") {
		t.Fatalf("sending a header of %d fields: %v, want 552 5.3.4", ingest.MaxHeaderFields+2, err)
	}
	// Once for the message, whatever its recipients; the counter moves
	// before the answer is written.
	if n := count(); n != 1 {
		t.Errorf("after one message refused for its header: %v, want 1", n)
	}
}
