package outbound

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/protocol"
)

// TestFiftyMessagesShareFewConnections sends 50 messages at once to one
// domain whose MX has a self-signed certificate, and counts the connections
// the MX saw: the queue's concurrent attempts share cached sessions (at most
// one per concurrency slot), and each session costs one TLS handshake, not a
// refused verified one and a second connection.
func TestFiftyMessagesShareFewConnections(t *testing.T) {
	cert, _ := testcert.New(t, "mx.remote.test")
	w := newWorld(t)
	w.d.AllowPlaintext = false
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.73")
	f := w.mx(t, "127.0.0.73", &tls.Config{Certificates: []tls.Certificate{cert}})
	svc := w.pipeline(t, &Recorder{Store: newMemStore()}, &Service{FirstAttemptWait: 30 * time.Second}, queue.Options{MaxConcurrent: 8})
	const n = 50
	var wg sync.WaitGroup
	results := make([]protocol.SendResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(),
				Args: protocol.SendArgs{To: []string{fmt.Sprintf("r%d@remote.test", i)}, Subject: "newsletter", Body: "hello"}})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i].Status != queue.StatusDelivered || results[i].Recipients[0].TLS != delivery.TLSOpportunistic {
			t.Fatalf("message %d: %+v %v", i, results[i], errs[i])
		}
	}
	if got := len(f.Messages()); got != n {
		t.Fatalf("MX got %d messages, want %d", got, n)
	}
	conns := f.Conns()
	t.Logf("%d messages over %d connections", n, conns)
	if conns > 8 {
		t.Fatalf("%d connections for %d messages to one domain: want at most 8 (one per concurrent attempt)", conns, n)
	}
}
