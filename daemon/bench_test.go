package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// BenchmarkMessageList measures message.list (what the MCP email_list tool
// calls) through the control socket on mailboxes of 1k and 100k messages,
// after the index is warm. Run: go test ./daemon -run '^$' -bench MessageList
func BenchmarkMessageList(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			if n > 1000 && testing.Short() {
				b.Skip("100k fixture skipped in -short")
			}
			td := startDaemon(b, "")
			if err := td.EnsureMailbox("big", uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
				b.Fatal(err)
			}
			inbox := filepath.Join(td.store.Path("big"), "inbox")
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := 0; i < n; i++ {
				at := base.Add(time.Duration(i) * time.Second)
				id := store.NewID(at, fmt.Sprintf("message %d", i))
				m := &store.Message{ID: id, MessageID: fmt.Sprintf("m%d@example.test", i), From: "sender@example.net",
					To: []string{"big@example.test"}, Subject: fmt.Sprintf("message %d", i), Date: at, ReceivedAt: at,
					Mailbox: "big", Trusted: "none", Read: i%3 == 0}
				// Fixture files are written directly (no fsync) to keep setup short.
				path := filepath.Join(inbox, id+".md")
				if err := os.WriteFile(path, store.Render(m, "A short body for the snippet."), 0o600); err != nil {
					b.Fatal(err)
				}
				os.Chtimes(path, at, at) // a settled mailbox, not one being written right now
			}
			old := base.Add(-time.Hour)
			os.Chtimes(inbox, old, old)
			ctx := context.Background()
			c, err := protocol.Dial(ctx, td.socket)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var l protocol.MessageList
			start := time.Now()
			if err := c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "big"}, &l); err != nil || l.Total != n {
				b.Fatalf("warm-up: %v total %d", err, l.Total)
			}
			build := time.Since(start)
			unread := true
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				args := protocol.MessageListArgs{Mailbox: "big", Limit: 50}
				if i%2 == 1 {
					args.Unread = &unread
				}
				if err := c.Call(ctx, protocol.VerbMessageList, args, &l); err != nil || len(l.Messages) != 50 {
					b.Fatalf("list: %v %d", err, len(l.Messages))
				}
			}
			b.ReportMetric(float64(build.Milliseconds()), "index-build-ms")
		})
	}
}
