package netns

import (
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// TestFaultKill9Queue: 50 queued messages are released at once towards a
// counting MX; the sending daemon is killed with SIGKILL in the middle of
// delivering them and restarted. Every message must reach the MX, and the
// number of SMTP transactions per Message-ID shows the duplicates: only a
// message whose 250 arrived in the instant before the kill, too late to be
// recorded, may be sent twice, so at most the attempts in flight. The fake
// MX holds each 250 for 150ms (a slow disk), which widens that window on
// purpose; duplicates after a 250 the daemon provably read (it sent another
// command) are reported separately.
func TestFaultKill9Queue(t *testing.T) {
	if stuck := kill9Queue(t); len(stuck) > 0 {
		t.Fatalf("%d sent copies stay pending although the MX took them:\n%s", len(stuck), strings.Join(stuck, "\n"))
	}
}

// TestFaultKill9QueueSentCopies repeats the kill until it lands between
// the queue settling an item and the sent copy recording it.
func TestFaultKill9QueueSentCopies(t *testing.T) {
	for i := range 5 {
		var stuck []string
		t.Run(fmt.Sprint(i), func(t *testing.T) { stuck = kill9Queue(t) })
		if len(stuck) > 0 {
			t.Fatalf("sent copies still pending after the MX took them:\n%s", strings.Join(stuck, "\n"))
		}
	}
}

// kill9Queue runs the scenario of TestFaultKill9Queue and returns the sent
// copies that do not say delivered once the queue is empty.
func kill9Queue(t *testing.T) (stuck []string) {
	const total = 50
	const maxConcurrent = 8
	l := newLab(t)
	m := l.addHost("m")
	l.publishDomain("m.test", m.IP, nil)
	fake := startFakeMX(t, m, false, 150*time.Millisecond)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}, Hold: true,
		Delivery: fmt.Sprintf("max_concurrent = %d", maxConcurrent)})

	mids := map[string]bool{}
	for i := range total {
		res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@m.test"}, Subject: fmt.Sprintf("batch %d", i), Body: "x"})
		if res.Status != "held" {
			t.Fatalf("send %d: status %q, want held", i, res.Status)
		}
		mids[strings.Trim(res.MessageID, "<>")] = true
	}
	items := a.queueIDs()
	if len(items) != total {
		t.Fatalf("queue holds %d items, want %d", len(items), total)
	}
	for _, it := range items {
		if err := a.call(protocol.VerbQueueApprove, protocol.QueueIDArgs{ID: it.ID}, nil); err != nil {
			t.Fatalf("queue.approve %s: %v", it.ID, err)
		}
	}
	// Kill once a fair part, but not all, went out.
	if !waitFor(30*time.Second, func() bool { _, n, _ := fake.counts(); return n >= total/3 }) {
		t.Fatalf("delivery did not start")
	}
	a.kill9()
	_, atKill, _ := fake.counts()
	time.Sleep(300 * time.Millisecond) // let the MX finish what the kill cut
	a.start()

	// Items cut mid-attempt wait for their recorded next attempt (a minute
	// away); an operator's queue retry sends them now.
	retry := func() {
		for _, it := range a.queueIDs() {
			a.call(protocol.VerbQueueRetry, protocol.QueueIDArgs{ID: it.ID}, nil)
		}
	}
	retry()
	lastRetry := time.Now()
	done := waitFor(60*time.Second, func() bool {
		if len(a.queueIDs()) == 0 {
			return true
		}
		if time.Since(lastRetry) > 3*time.Second {
			retry()
			lastRetry = time.Now()
		}
		return false
	})
	if !done {
		t.Errorf("queue still holds %d items a minute after the restart", len(a.queueIDs()))
	}
	byMID, txns, _ := fake.counts()
	dupsAfterAck := fake.resends()
	missing, dups := 0, 0
	for mid := range mids {
		switch n := byMID[mid]; {
		case n == 0:
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	for mid := range byMID {
		if !mids[mid] {
			t.Errorf("the MX received an unknown Message-ID %q", mid)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d messages never reached the MX", missing, total)
	}
	if dups > maxConcurrent {
		t.Errorf("%d duplicate deliveries, more than the %d attempts that can be in flight at the kill", dups, maxConcurrent)
	}
	// The sent copies agree once the queue has settled.
	delivered := 0
	waitFor(3*time.Second, func() bool {
		delivered = 0
		for _, m := range a.folder("boss", "sent") {
			if m.Meta.DeliveryStatus == "delivered" {
				delivered++
			}
		}
		return delivered == total
	})
	if delivered != total {
		for _, m := range a.folder("boss", "sent") {
			if m.Meta.DeliveryStatus != "delivered" {
				stuck = append(stuck, fmt.Sprintf("%s status=%s details=%+v", m.ID, m.Meta.DeliveryStatus, m.Meta.DeliveryDetails))
			}
		}
	}
	summary(t, "F2-kill9-queue", "%d messages, SIGKILL after %d transactions, restart: delivered=%d missing=%d duplicates=%d (after a 250 the daemon read: %d) smtp_transactions=%d sent_copies_not_delivered=%d",
		total, atKill, len(byMID), missing, dups, dupsAfterAck, txns, len(stuck))
	return stuck
}

// TestFaultKill9Inbound: eight clients send to a daemon as fast as it takes
// mail; it is killed with SIGKILL at a random point mid-stream and
// restarted, three times. Every message that got a 250 must be stored
// exactly once, and every stored file must parse.
func TestFaultKill9Inbound(t *testing.T) {
	const senders = 8
	l := newLab(t)
	client := l.addHost("c")
	r := l.newMailHost("r", "r.test", hostOptions{Mailboxes: []string{"agent"},
		SMTP: "max_connections_per_ip = 100"})

	var mu sync.Mutex
	acked := map[string]bool{} // got 250
	tried := map[string]bool{} // DATA was attempted
	var stop atomic.Bool
	send := func(w, n int) {
		mid := fmt.Sprintf("in-%d-%d-%s@c.test", w, n, randHex(3))
		msg := crlf(fmt.Sprintf("From: load@c.test\nTo: agent@r.test\nSubject: inbound %d/%d\nMessage-ID: <%s>\n\n%s\n", w, n, mid, strings.Repeat("body line\n", 50)))
		mu.Lock()
		tried[mid] = true
		mu.Unlock()
		if smtpDeliver(client.NS, r.Addr(), "c.test", "load@c.test", "agent@r.test", msg, false) == nil {
			mu.Lock()
			acked[mid] = true
			mu.Unlock()
		}
	}
	run := func() *sync.WaitGroup {
		var wg sync.WaitGroup
		for w := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; !stop.Load(); n++ {
					send(w, n)
				}
			}()
		}
		return &wg
	}
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	var killedAt []string
	for range 3 {
		from := ackedCount()
		at := from + 20 + mrand.IntN(60)
		wg := run()
		if !waitFor(60*time.Second, func() bool { return ackedCount() >= at }) {
			t.Fatalf("only %d messages accepted, waiting for %d", ackedCount(), at)
		}
		r.kill9()
		stop.Store(true)
		wg.Wait()
		stop.Store(false)
		killedAt = append(killedAt, fmt.Sprint(at))
		r.start()
	}
	wg := run()
	last := ackedCount()
	waitFor(30*time.Second, func() bool { return ackedCount() >= last+40 })
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var stored []stored
	waitFor(15*time.Second, func() bool {
		stored = r.folder("agent", "inbox")
		return len(stored) >= len(acked)
	})
	perMID := map[string]int{}
	for _, m := range stored {
		perMID[strings.Trim(m.Meta.MessageID, "<>")]++
	}
	lost, dup, unacked := 0, 0, 0
	for mid := range acked {
		switch perMID[mid] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	for mid, n := range perMID {
		if !tried[mid] {
			t.Errorf("stored a Message-ID nobody sent: %q", mid)
		}
		if !acked[mid] {
			unacked++
			if n > 1 {
				dup++
			}
		}
	}
	if lost > 0 || dup > 0 {
		t.Errorf("of %d acknowledged messages, %d were lost and %d stored more than once", len(acked), lost, dup)
	}
	// Files a write in progress left behind: readers ignore them; they are
	// reported, not failed.
	var temps []string
	filepath.Walk(r.State, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(info.Name(), ".tmp-") {
			rel, _ := filepath.Rel(r.State, p)
			temps = append(temps, fmt.Sprintf("%s(%dB)", rel, info.Size()))
		}
		return nil
	})
	if len(temps) > 0 {
		t.Logf("temporary files left by the kill: %s", strings.Join(temps, " "))
	}
	summary(t, "F2-kill9-inbound", "%d senders, SIGKILL+restart after %s acknowledged: acknowledged=%d stored=%d lost=%d duplicates=%d stored_without_250=%d temp_files_left=%d",
		senders, strings.Join(killedAt, ","), len(acked), len(stored), lost, dup, unacked, len(temps))
}
