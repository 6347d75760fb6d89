package outbound

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// BenchmarkSendToSink measures the whole send path: compose, sign with an
// Ed25519 and an RSA key, write the sent copy (in memory), queue durably and
// deliver over SMTP to an in-process sink. Run with
// `go test -run XXX -bench SendToSink ./daemon/outbound/`.
func BenchmarkSendToSink(b *testing.B) {
	w := &mxWorld{r: newResolver(), dm: &dialMap{}}
	w.d = &MXDeliverer{Resolver: w.r, Dial: w.dm.dial, Hostname: "out.example.com", AllowPlaintext: true,
		ConnectTimeout: 5 * time.Second, TransactionTimeout: 30 * time.Second}
	f := newFakeMX(b, "127.0.0.91", nil)
	w.dm.set("127.0.0.91:25", f.Addr)
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.91")
	keys := testKeys(b)
	svc := &Service{Domain: func() string { return "example.com" }, Keys: func() []*Key { return keys }, Store: newMemStore(), FirstAttemptWait: 30 * time.Second}
	q, err := OpenQueue(b.TempDir(), w.d, svc, QueueOptions{MaxConcurrent: 8})
	if err != nil {
		b.Fatal(err)
	}
	svc.Queue = q
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	req := SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "benchmark", Body: "# Hello\n\nA short **Markdown** message.\n"}}
	b.SetParallelism(4)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := svc.Send(ctx, req)
			if err != nil || res.Status != StatusDelivered {
				b.Errorf("send: %+v %v", res, err)
				return
			}
		}
	})
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	if got := len(f.messages()); got != b.N {
		b.Fatalf("sink got %d messages, want %d", got, b.N)
	}
}
