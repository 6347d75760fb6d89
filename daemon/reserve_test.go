package daemon

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// Below storage.disk_reserve_bytes free, SMTP answers 452 4.3.1 at RCPT
// (the sender retries) and a send is refused with what to do, before the
// filesystem is full; once space is back, mail flows again. statfs is
// asked at most every 5 seconds.
func TestDiskReserve(t *testing.T) {
	clk := testclock.New()
	var free, asked atomic.Int64
	free.Store(50 << 20)
	statfs := func(string) (uint64, error) { asked.Add(1); return uint64(free.Load()), nil }
	td := startDaemonWith(t, "[storage]\ndisk_reserve_bytes = 10485760\n", Options{Resolver: &resolver.Map{}, Clock: clk.Now, Statfs: statfs})
	td.ensureMine(t, "alice")
	addr := td.SMTPAddrs()[0]
	n := 0
	msg := func() string {
		n++
		return fmt.Sprintf("From: a@remote.test\nTo: alice@example.test\nSubject: hi %d\n\nhello\n", n)
	}
	if err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, msg()); err != nil {
		t.Fatalf("with room: %v", err)
	}
	free.Store(5 << 20)
	// Within the cache's 5 seconds the old answer holds.
	if err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, msg()); err != nil {
		t.Fatalf("within the cache: %v", err)
	}
	clk.Advance(6 * time.Second)
	err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, msg())
	// net/smtp's error: the reply code, then its text with the enhanced code.
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 452 || !strings.HasPrefix(te.Msg, "4.3.1 ") {
		t.Fatalf("below the reserve: %v, want 452 4.3.1", err)
	}
	err = td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"x@remote.test"}, Subject: "s", Body: "b"}, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeUnavailable || !strings.Contains(pe.Message, "disk is nearly full") || !strings.Contains(pe.Message, "5.0 MiB free") {
		t.Fatalf("send below the reserve: %v", err)
	}
	// A dry run writes nothing and is still answered.
	if err := td.call(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "alice", To: []string{"x@remote.test"}, Subject: "s", Body: "b", DryRun: true}, nil); err != nil {
		t.Fatalf("dry run below the reserve: %v", err)
	}
	var l protocol.MessageList
	td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alice"}, &l)
	if len(l.Messages) != 2 {
		t.Fatalf("%d messages stored, want the 2 accepted above the reserve", len(l.Messages))
	}
	free.Store(50 << 20)
	clk.Advance(6 * time.Second)
	if err := sendSMTP(t, addr, "a@remote.test", []string{"alice@example.test"}, msg()); err != nil {
		t.Fatalf("space back: %v", err)
	}
	if n := asked.Load(); n > 6 {
		t.Errorf("statfs asked %d times for 4 messages over 3 cache periods", n)
	}
}
