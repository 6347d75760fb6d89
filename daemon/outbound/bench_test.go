package outbound

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// BenchmarkSendToSink measures the whole send path: compose, sign with an
// Ed25519 and an RSA key, write the sent copy (in memory), queue durably and
// deliver over SMTP to an in-process sink. Run with
// `go test -run XXX -bench SendToSink ./daemon/outbound/`.
func BenchmarkSendToSink(b *testing.B) {
	w := newWorld(b)
	f := w.mx(b, "127.0.0.91")
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.91")
	keys := testKeys(b)
	svc := w.pipeline(b, &Recorder{Store: newMemStore()}, &Service{Keys: func() []*dkim.Key { return keys }, FirstAttemptWait: 30 * time.Second}, queue.Options{MaxConcurrent: 8})
	ctx := context.Background()
	req := SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "benchmark", Body: "# Hello\n\nA short **Markdown** message.\n"}}
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := svc.Send(ctx, req)
			if err != nil || res.Status != queue.StatusDelivered {
				b.Errorf("send: %+v %v", res, err)
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	if got := len(f.Messages()); got != b.N {
		b.Fatalf("sink got %d messages, want %d", got, b.N)
	}
}
