package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/store"
)

// loadMessage is the n-th message of sender s in the kill test.
func loadMessage(s, n int) (id string, raw []byte) {
	id = fmt.Sprintf("load-%d-%d@sender.test", s, n)
	body := strings.Repeat(fmt.Sprintf("sender %d message %d filler line\n", s, n), 40)
	return id, crlf("From: load@sender.test\nTo: " + rcpt + "\nSubject: load " + id +
		"\nMessage-ID: <" + id + ">\nDate: Sun, 22 Nov 2026 01:20:00 +0000\n\n" + body)
}

// TestKill9UnderLoad kills the daemon with SIGKILL while several clients
// send, restarts it, and checks that every message that got 250 is stored
// exactly once and that no half-written message is visible.
func TestKill9UnderLoad(t *testing.T) {
	d := startDaemon(t, options{MaxConnsPerIP: 100})
	const senders, maxPerSender = 8, 60
	var (
		mu      sync.Mutex
		acked   = map[string][]byte{}
		tried   atomic.Int64
		stop    atomic.Bool
		started = make(chan struct{}, senders)
		enough  = make(chan struct{}) // closed at the 60th 250
		wg      sync.WaitGroup
	)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *smtp.Client
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for n := 0; n < maxPerSender && !stop.Load(); n++ {
				if c == nil {
					var err error
					if c, err = smtp.Dial(d.SMTPAddr); err != nil {
						return // the daemon is gone
					}
					if c.Hello("load.sender.test") != nil {
						return
					}
				}
				id, raw := loadMessage(s, n)
				tried.Add(1)
				if n == 1 {
					started <- struct{}{}
				}
				err := func() error {
					if err := c.Mail("load@sender.test"); err != nil {
						return err
					}
					if err := c.Rcpt(rcpt); err != nil {
						return err
					}
					w, err := c.Data()
					if err != nil {
						return err
					}
					if _, err := w.Write(raw); err != nil {
						return err
					}
					return w.Close() // the reply to the end of DATA
				}()
				if err != nil {
					return // killed mid-transaction: this one is not owed
				}
				mu.Lock()
				acked[id] = raw
				if len(acked) == 60 {
					close(enough)
				}
				mu.Unlock()
			}
		}()
	}
	for range senders {
		testwait.Recv(t, "each sender to have a message accepted", started)
	}
	// Kill at a random moment once a good number of messages got through,
	// while every sender is busy (or, should the senders all have stopped
	// before that, now: the checks below say why).
	sendersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(sendersDone)
	}()
	select {
	case <-enough:
	case <-sendersDone:
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	d.kill9()
	killedAt := tried.Load()
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	nAcked := len(acked)
	mu.Unlock()
	if nAcked == 0 {
		t.Fatalf("no message got 250 before the kill")
	}

	d.start()
	msgs := d.inbox(t)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Meta.MessageID]++
		if m.Meta.SizeBytes != int64(len(m.Raw)) {
			t.Errorf("%s: size_bytes %d but the raw copy has %d bytes", m.ID, m.Meta.SizeBytes, len(m.Raw))
		}
	}
	for id := range acked {
		switch seen[id] {
		case 1:
		case 0:
			t.Errorf("message %s got 250 but is not stored after kill -9", id)
			continue
		default:
			t.Errorf("message %s stored %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("message %s stored %d times", id, n)
		}
	}
	for _, m := range msgs {
		if raw, ok := acked[m.Meta.MessageID]; ok {
			if _, rest := headerFields(m.Raw, 2); !bytes.Equal(rest, raw) {
				t.Errorf("%s: raw copy differs from what got 250", m.ID)
			}
		}
	}
	// Nothing half-written may look like a message: every name in the inbox
	// is a complete message's .md, its .eml or attachment folder, or a
	// hidden temporary file the store skips.
	ents, _ := os.ReadDir(filepath.Join(d.mailboxDir(), "inbox"))
	mds := map[string]bool{}
	for _, m := range msgs {
		mds[m.ID] = true
	}
	var temps, orphans int
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, store.TempPrefix):
			temps++
		case strings.HasSuffix(name, ".md"):
		case strings.HasSuffix(name, ".eml"):
			if !mds[strings.TrimSuffix(name, ".eml")] {
				orphans++ // written before the kill, its .md never was: not a message
			}
		default:
			t.Errorf("unexpected entry in the inbox after kill -9: %q", name)
		}
	}
	// The restarted daemon's own view (its index, over the control socket)
	// counts exactly the complete messages on disk.
	var show struct {
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(d.ctl(t, "mailboxes", "show", mailbox, "--json")), &show); err != nil {
		t.Fatalf("mailboxes show --json: %v", err)
	}
	if show.Total != len(msgs) {
		t.Errorf("daemon reports %d messages after restart, %d complete ones are on disk", show.Total, len(msgs))
	}
	// And it still takes mail.
	id, raw := loadMessage(99, 0)
	sendRaw(t, d.SMTPAddr, "load@sender.test", rcpt, raw)
	d.byMessageID(t, id, 10*time.Second)
	t.Logf("kill -9 after %d attempts: %d got 250, all stored exactly once (%d messages on disk, %d hidden temp files, %d orphan .eml without .md); restart takes mail",
		killedAt, nAcked, len(msgs), temps, orphans)
}

// TestManyConnections opens more connections than max_connections at once:
// each gets a greeting (220) or a clean refusal (421), none hangs, and the
// daemon takes mail again once they are gone.
func TestManyConnections(t *testing.T) {
	const limit, total = 300, 500
	d := startDaemon(t, options{MaxConns: limit, MaxConnsPerIP: 1000})
	var (
		wg                       sync.WaitGroup
		mu                       sync.Mutex
		greeted, refused, others int
		other                    []string
		held                     []net.Conn
	)
	for range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", d.SMTPAddr, 10*time.Second)
			if err != nil {
				mu.Lock()
				others++
				other = append(other, "dial: "+err.Error())
				mu.Unlock()
				return
			}
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.HasPrefix(line, "220 "):
				greeted++
				held = append(held, c)
				return
			case strings.HasPrefix(line, "421 "):
				refused++
			default:
				others++
				other = append(other, fmt.Sprintf("%q %v", line, err))
			}
			c.Close()
		}()
	}
	wg.Wait()
	if greeted != limit || refused != total-limit || others != 0 {
		t.Errorf("of %d connections: %d greeted (want %d), %d refused with 421 (want %d), %d other: %v",
			total, greeted, limit, refused, total-limit, others, other[:min(len(other), 5)])
	}
	// A held session is a working one.
	if len(held) > 0 {
		c := held[0]
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "EHLO probe.sender.test\r\n")
		r := bufio.NewReader(c)
		line, _ := r.ReadString('\n')
		if !strings.HasPrefix(line, "250") {
			t.Errorf("held session answers EHLO with %q", line)
		}
	}
	for _, c := range held {
		c.Close()
	}
	// Slots come back: a new message gets through within a few seconds.
	_, raw := loadMessage(7, 7)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := trySend(d.SMTPAddr, "load@sender.test", rcpt, raw)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon does not take mail after the flood: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d concurrent connections with max_connections=%d: %d got 220, %d got 421, %d other; mail flows afterwards",
		total, limit, greeted, refused, others)
}
