package daemon

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/internal/testmsg"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
	"golang.org/x/sys/unix"
)

// BenchmarkMessageList measures message.list (what the MCP email_list tool
// calls) through the control socket on mailboxes of 1k and 100k messages:
// the first call after the first start (no index: every message is read
// into it; a call answered unavailable while the daemon's start-up indexing
// reads the folder is made again, the time counting from the first), the
// first call after a restart (the index the first start wrote, checked
// against the folder), and then calls on the warm index.
// The fixture is left to settle first, as a mailbox at rest has (files and
// folders changed within the last second are checked again on every call).
// Run: go test ./daemon -run '^$' -bench MessageList
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
				if err := os.WriteFile(filepath.Join(inbox, id+".md"), store.Render(m, "A short body for the snippet."), 0o600); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(1100 * time.Millisecond)
			first := firstList(b, td.socket, n)
			// The same state under a new daemon: the index is there.
			td.stop()
			td = runTestDaemon(b, td.cfg, td.dir, Options{})
			restart := firstList(b, td.socket, n)
			ctx := context.Background()
			c, err := protocol.Dial(ctx, td.socket)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var l protocol.MessageList
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
			b.StopTimer()
			b.ReportMetric(float64(first.Microseconds())/1000, "first-start-ms")
			b.ReportMetric(float64(restart.Microseconds())/1000, "restart-ms")
		})
	}
}

// firstList times the first message.list of a daemon's life, on a new
// connection (50 rows, as email_list asks by default).
func firstList(b *testing.B, socket string, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	c, err := protocol.Dial(ctx, socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var l protocol.MessageList
	start := time.Now()
	for {
		err := c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "big", Limit: 50}, &l)
		if protocol.CodeOf(err) == protocol.CodeUnavailable {
			continue // the daemon waited a while already
		}
		if err != nil || l.Total != n {
			b.Fatalf("first list: %v, total %d", err, l.Total)
		}
		return time.Since(start)
	}
}

// BenchmarkInboundDeliver measures one inbound message from its bytes to a
// durable copy in the mailbox (trust checks with no DNS answers, parsing,
// Markdown and raw copies written), for plain-text bodies of 4 KiB, 100 KiB
// and 1 MiB, and for multipart messages (a short text and a base64
// attachment) of 100 KiB and 1 MiB. The message is handed over as the SMTP
// server hands it: with room before it for the Authentication-Results
// header. Besides the time to each answer it reports the process's CPU
// time per message (cpu-us/op). Run: go test ./daemon -run '^$' -bench InboundDeliver -benchmem
func BenchmarkInboundDeliver(b *testing.B) {
	cases := []struct {
		name string
		raw  []byte
	}{
		{"4KiB", testmsg.Plain(4 << 10)},
		{"100KiB", testmsg.Plain(100 << 10)},
		{"1024KiB", testmsg.Plain(1 << 20)},
		{"multipart-100KiB", benchMultipart(100 << 10)},
		{"multipart-1024KiB", benchMultipart(1 << 20)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			td := startDaemon(b, "")
			if err := td.EnsureMailbox("big", uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
				b.Fatal(err)
			}
			raw := c.raw
			env := smtpin.Envelope{RemoteIP: net.ParseIP("127.0.0.1"), Helo: "client.example.net", MailFrom: "sender@example.net", Rcpts: []string{"big@" + td.cfg.PrimaryDomain()}}
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				// A new Message-ID each time: the same bytes twice are one delivery.
				id := fmt.Sprintf("Message-ID: <%d.%d@example.net>\r\n", i, time.Now().UnixNano())
				all := make([]byte, smtpin.Headroom+len(id)+len(raw))
				copy(all[smtpin.Headroom+copy(all[smtpin.Headroom:], id):], raw)
				msg := smtpin.NewMessage(all[smtpin.Headroom:], 0)
				msg.Headroom = all[:smtpin.Headroom]
				if errs := td.inbound.Deliver(context.Background(), env, msg); errs[0] != nil {
					b.Fatal(errs[0])
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// processCPU is the CPU time (user and system) the process has used: the
// index writer's, which runs behind the deliveries, as well.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchMultipart is a message of about size bytes with a short text part
// and a base64 attachment, as a mail client sends a file.
func benchMultipart(size int) []byte {
	data := make([]byte, size*3/4)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	enc := base64.StdEncoding.EncodeToString(data)
	var b strings.Builder
	b.WriteString("From: Sender <sender@example.net>\r\nTo: big@example.test\r\nSubject: a file\r\nDate: Mon, 02 Mar 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n")
	b.WriteString("--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nThe file is attached.\r\n")
	b.WriteString("--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=data.bin\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n--b--\r\n")
	return []byte(b.String())
}
