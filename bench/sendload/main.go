// Command sendload submits N sends to a running mailctl daemon over its
// control socket from several goroutines, for bench/outbound.sh. When done it
// prints, one per line: start= the Unix time of the first send (so that the
// caller can time delivery from it), queued= the Unix time the last send was
// answered, size= the size in bytes of a composed message.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

func main() {
	socket := flag.String("socket", "", "control socket of the daemon")
	mailbox := flag.String("mailbox", "bench", "sending mailbox")
	to := flag.String("to", "", "recipient address")
	n := flag.Int("n", 1000, "number of sends")
	workers := flag.Int("c", 8, "concurrent senders, one control connection each")
	size := flag.Int("body", 2048, "body size in bytes")
	flag.Parse()
	if *socket == "" || *to == "" {
		fmt.Fprintln(os.Stderr, "usage: sendload -socket PATH -to ADDR [-n N] [-c C] [-mailbox NAME] [-body BYTES]")
		os.Exit(2)
	}
	if err := run(context.Background(), *socket, *mailbox, *to, *n, *workers, *size); err != nil {
		slog.Error("sendload", "err", err)
		os.Exit(1)
	}
}

// run sends n messages from mailbox to to over workers connections. The
// mailbox must exist (bench/outbound.sh declares it in the config).
func run(ctx context.Context, socket, mailbox, to string, n, workers, size int) error {
	// Connections are opened before the clock starts: the benchmark is
	// about queueing, signing and delivering, not about dialing.
	clients := make([]*protocol.Client, workers)
	for i := range clients {
		c, err := protocol.Dial(ctx, socket)
		if err != nil {
			return err
		}
		defer c.Close()
		clients[i] = c
	}
	body := make([]byte, 0, size)
	for len(body) < size {
		body = append(body, "The quick brown fox jumps over the lazy dog, line after line.\n"...)
	}
	body = body[:size]
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	var msgSize atomic.Int64
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func(c *protocol.Client) {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				var res protocol.SendResult
				err := c.Call(ctx, protocol.VerbSend, protocol.SendArgs{FromMailbox: mailbox, To: []string{to},
					Subject: fmt.Sprintf("bench %d", i), Body: string(body), WaitMS: 1}, &res)
				if err == nil {
					msgSize.Store(int64(res.SizeBytes))
				} else {
					failed.Add(1)
					once.Do(func() { firstErr = err })
				}
			}
		}(c)
	}
	wg.Wait()
	end := time.Now()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d sends failed, first: %w", f, n, firstErr)
	}
	fmt.Printf("start=%.6f\nqueued=%.6f\nsize=%d\n", unix(start), unix(end), msgSize.Load())
	return nil
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
