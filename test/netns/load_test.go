package netns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// TestLoad: 1000 SMTP connections held open at once against one daemon are
// each greeted or refused with a reply, none hangs; 200 control-socket
// clients at once all get their mailbox list. Memory, goroutines, threads
// and descriptors are printed before, during and after; nothing about
// timing is asserted (the machine is shared).
func TestLoad(t *testing.T) {
	const conns = 1000
	const sockClients = 200
	raiseNoFile(t, 3*conns)
	l := newLab(t)
	client := l.addHost("c")
	h := l.newMailHost("s", "s.test", hostOptions{
		SMTP:    fmt.Sprintf("max_connections = %d\nmax_connections_per_ip = %d", conns, conns),
		Control: "max_connections = 512",
		// Loopback of the daemon's namespace, reached with inNS.
		Extra: "[metrics]\nlisten = \"127.0.0.1:9325\"",
	})
	before := h.sample()

	// Open every connection first (dials must happen on the namespaced
	// thread), then read the greetings concurrently.
	start := time.Now()
	var open []net.Conn
	var dialErrs int
	inNS(client.NS, func() error {
		for range conns {
			c, err := net.DialTimeout("tcp", h.Addr(), 10*time.Second)
			if err != nil {
				dialErrs++
				continue
			}
			open = append(open, c)
		}
		return nil
	})
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	type outcome struct{ greeted, refused, hung, other int }
	var mu sync.Mutex
	var out outcome
	var otherSample string
	var wg sync.WaitGroup
	readers := make([]*bufio.Reader, len(open))
	for i, c := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			r := bufio.NewReader(c)
			readers[i] = r
			line, err := r.ReadString('\n')
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.HasPrefix(line, "220 "):
				out.greeted++
			case strings.HasPrefix(line, "421 "):
				out.refused++
			case isTimeout(err):
				out.hung++
			default:
				out.other++
				otherSample = fmt.Sprintf("%q %v", line, err)
			}
		}()
	}
	wg.Wait()
	greetTook := time.Since(start).Round(time.Millisecond)
	during := h.sample()

	// Past max_connections, while all the others are held open, a new
	// session is refused with a reply rather than left waiting.
	const extra = 50
	var extraRefused, extraOther int
	var extraSample string
	inNS(client.NS, func() error {
		for range extra {
			c, err := net.DialTimeout("tcp", h.Addr(), 10*time.Second)
			if err != nil {
				extraOther++
				continue
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "421 ") {
				extraRefused++
			} else {
				extraOther++
				extraSample = fmt.Sprintf("%q %v", line, err)
			}
		}
		return nil
	})
	if out.greeted == conns && extraRefused != extra {
		t.Errorf("of %d sessions past max_connections, %d were refused with 421; others e.g. %s", extra, extraRefused, extraSample)
	}

	// Every greeted session still answers a command while all are open.
	var quitOK, quitBad int
	for i, c := range open {
		if readers[i] == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "QUIT\r\n")
			line, _ := readers[i].ReadString('\n')
			mu.Lock()
			defer mu.Unlock()
			if strings.HasPrefix(line, "221") || strings.HasPrefix(line, "421") {
				quitOK++
			} else {
				quitBad++
			}
		}()
	}
	wg.Wait()
	for _, c := range open {
		c.Close()
	}
	if dialErrs > 0 || out.hung > 0 || out.other > 0 {
		t.Errorf("of %d connections: %d failed to connect, %d hung without a greeting, %d got something else (e.g. %s)",
			conns, dialErrs, out.hung, out.other, otherSample)
	}
	if out.greeted+out.refused != conns {
		t.Errorf("greeted %d + refused %d != %d", out.greeted, out.refused, conns)
	}
	if quitBad > 0 {
		t.Errorf("%d sessions did not answer QUIT", quitBad)
	}

	// 200 control-socket clients at once.
	sockStart := time.Now()
	var ok, failed int
	var firstErr error
	for range sockClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var list protocol.MailboxList
			err := h.call(protocol.VerbMailboxList, nil, &list)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && len(list.Mailboxes) == 1 {
				ok++
				return
			}
			failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("err=%v mailboxes=%d", err, len(list.Mailboxes))
			}
		}()
	}
	wg.Wait()
	sockTook := time.Since(sockStart).Round(time.Millisecond)
	if failed > 0 {
		t.Errorf("%d of %d control clients failed; first: %v", failed, sockClients, firstErr)
	}
	// Let closed sessions wind down before the last sample.
	waitFor(10*time.Second, func() bool { return h.sample().fds <= before.fds+20 })
	after := h.sample()
	t.Logf("daemon before: %s", before)
	t.Logf("daemon during 1000 sessions: %s", during)
	t.Logf("daemon after: %s", after)
	summary(t, "L1-load", "%d SMTP connections: greeted=%d refused=%d hung=%d quit_ok=%d in %v; %d more past the limit: 421=%d; %d socket clients ok=%d in %v; before{%s} during{%s} after{%s}",
		conns, out.greeted, out.refused, out.hung, quitOK, greetTook, extra, extraRefused, sockClients, ok, sockTook, before, during, after)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// raiseNoFile lifts this process's descriptor limit to at least n.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= n {
		return
	}
	if rl.Max < n {
		rl.Max = n
	}
	rl.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatalf("raising RLIMIT_NOFILE to %d: %v", n, err)
	}
}

// procSample is one look at the daemon's resources.
type procSample struct {
	rssKiB, threads, fds int
	goroutines           string // from the metrics endpoint; "n/a" when it does not answer
}

func (s procSample) String() string {
	return fmt.Sprintf("rss=%dKiB threads=%d fds=%d goroutines=%s", s.rssKiB, s.threads, s.fds, s.goroutines)
}

func (h *mailHost) sample() procSample {
	s := procSample{rssKiB: h.vmRSS(), goroutines: "n/a"}
	s.threads, s.fds = h.threadsAndFDs()
	if v, ok := h.metric("go_goroutines"); ok {
		s.goroutines = v
	}
	return s
}

// metric reads one unlabelled value from the daemon's metrics endpoint on
// its namespace's loopback.
func (h *mailHost) metric(name string) (string, bool) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialIn(h.NS, addr, 2*time.Second)
	}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://127.0.0.1:9325/metrics")
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// TestSoak sends mail from a.test to b.test at a steady rate for a bounded
// time and samples both daemons: once the traffic stops, goroutines and
// descriptors must come back to where they were (no leak per message);
// memory is printed.
func TestSoak(t *testing.T) {
	const (
		duration = 20 * time.Second
		every    = 100 * time.Millisecond
	)
	l := newLab(t)
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"},
		Extra: "[metrics]\nlisten = \"127.0.0.1:9325\""})
	b := l.newMailHost("b", "b.test", hostOptions{Mailboxes: []string{"agent"},
		Extra: "[metrics]\nlisten = \"127.0.0.1:9325\""})
	// Warm up: the first delivery creates directories, caches and pools.
	warm := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@b.test"}, Subject: "warm-up", Body: "x", WaitMS: 1})
	b.byMessageID("agent", "inbox", warm.MessageID, 20*time.Second)
	a0, b0 := a.sample(), b.sample()

	var samples []string
	sent := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	end := time.Now().Add(duration)
	nextSample := time.Now()
	for time.Now().Before(end) {
		<-tick.C
		// wait_ms 1: do not wait for the delivery, keep the rate steady.
		res := a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{"agent@b.test"}, Subject: fmt.Sprintf("soak %d", sent), Body: "steady", WaitMS: 1})
		if res.Status == "failed" {
			t.Fatalf("soak send %d failed: %+v", sent, res.Recipients)
		}
		sent++
		if time.Now().After(nextSample) {
			samples = append(samples, fmt.Sprintf("t=%ds sent=%d a{%s} b{%s}", int((duration-time.Until(end)).Seconds()), sent, a.sample(), b.sample()))
			nextSample = time.Now().Add(5 * time.Second)
		}
	}
	if !waitFor(60*time.Second, func() bool { return len(b.folder("agent", "inbox")) >= sent+1 }) {
		t.Fatalf("b holds %d of %d soak messages", len(b.folder("agent", "inbox"))-1, sent)
	}
	// Idle SMTP sessions and hook processes wind down; allow a small slack.
	var a1, b1 procSample
	settled := waitFor(20*time.Second, func() bool {
		a1, b1 = a.sample(), b.sample()
		return a1.fds <= a0.fds+5 && b1.fds <= b0.fds+5 && goroutinesWithin(a0, a1, 10) && goroutinesWithin(b0, b1, 10)
	})
	for _, s := range samples {
		t.Log(s)
	}
	if !settled {
		t.Errorf("resources did not come back after the soak: a before{%s} after{%s}; b before{%s} after{%s}", a0, a1, b0, b1)
	}
	summary(t, "L1-soak", "%d messages a→b in %v (%v apart), all stored; a before{%s} after{%s}; b before{%s} after{%s}",
		sent, duration, every, a0, a1, b0, b1)
}

// goroutinesWithin reports whether the goroutine count grew by at most n
// (true when the metrics endpoint does not answer).
func goroutinesWithin(before, after procSample, n int) bool {
	x, err1 := strconv.Atoi(before.goroutines)
	y, err2 := strconv.Atoi(after.goroutines)
	if err1 != nil || err2 != nil {
		return true
	}
	return y <= x+n
}
