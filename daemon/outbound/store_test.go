package outbound

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// TestServiceWithRealStore runs a send against the real mailbox store: the
// sent copy's frontmatter must carry the delivery state through its TOML
// round trip, and a later bounce must find it by Message-ID.
func TestServiceWithRealStore(t *testing.T) {
	st := botStore(t)
	w := newWorld(t)
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.72")
	f := w.mx(t, "127.0.0.72")
	svc := w.pipeline(t, &Recorder{Store: st}, &Service{Keys: func() []*dkim.Key { return testKeys(t) }, FirstAttemptWait: 5 * time.Second}, queue.Options{})
	res, err := svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", FromName: "Bot", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test", "carol@remote.test"}, Bcc: []string{"dan@remote.test"}, Subject: "Status +++ report", Body: "# Done\n\nAll good.\n",
			Attachments: []protocol.SendAttachment{{Filename: "r.txt", Data: []byte("report")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != queue.StatusDelivered || len(f.Messages()) != 1 {
		t.Fatalf("send: %+v", res)
	}
	m, body, err := st.Get("bot", protocol.FolderSent, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Outbound || m.DeliveryStatus != queue.StatusDelivered || m.DeliveredAt == nil || len(m.DeliveryDetails) != 3 || m.MessageID != res.MessageID {
		t.Fatalf("sent copy: %+v", m)
	}
	if m.DeliveryDetails[0].TLS != delivery.TLSNone || m.DeliveryDetails[0].Attempts != 1 || len(m.Bcc) != 1 || len(m.Attachments) != 1 {
		t.Fatalf("sent copy details: %+v", m)
	}
	if !strings.Contains(body, "All good.") {
		t.Fatalf("body %q", body)
	}
	raw, err := st.Raw("bot", protocol.FolderSent, res.ID, 1<<20)
	if err != nil || !strings.HasPrefix(string(raw), "DKIM-Signature:") {
		t.Fatalf("raw sent copy is not the signed message: %v %.40q", err, raw)
	}
	svc.ApplyDSN("bot", Report{OriginalMessageID: res.MessageID, Recipients: []DSNRecipient{{Address: "carol@remote.test", Action: "failed", Status: "5.1.1", Diagnostic: "smtp; 550 no such user"}}}, func(string) bool { return true })
	m, _, _ = st.Get("bot", protocol.FolderSent, res.ID)
	if m.DeliveryStatus != "partial" {
		t.Fatalf("after the bounce: %q %+v", m.DeliveryStatus, m.DeliveryDetails)
	}
	got, err := svc.Status("bot", res.ID)
	if err != nil || got.Status != "partial" {
		t.Fatalf("status: %+v %v", got, err)
	}
}
