package smtpin

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeScreener answers a fixed verdict, after release is closed when set,
// and records the clients it was asked about.
type fakeScreener struct {
	verdict Screening
	release chan struct{}
	mu      sync.Mutex
	asked   []string
}

func (f *fakeScreener) Screen(ctx context.Context, ip net.IP) Screening {
	f.mu.Lock()
	f.asked = append(f.asked, ip.String())
	f.mu.Unlock()
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
		}
	}
	return f.verdict
}

func (f *fakeScreener) clients() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func screenedBy(sc Screener, wait time.Duration) func(*Config) {
	return func(c *Config) { c.Screener, c.PregreetWait = sc, wait }
}

// TestListedClientRefusedAtConnect: a listed client gets 554 5.7.1 naming
// the lists instead of the greeting, and the connection ends.
func TestListedClientRefusedAtConnect(t *testing.T) {
	sc := &fakeScreener{verdict: Screening{Refuse: "Service unavailable; client [127.0.0.1] blocked using bl.test", Listed: []string{"bl.test=127.0.0.2 weight 1"}}}
	ts := startServer(t, Limits{}, nil, false, screenedBy(sc, 0))
	rc := dialRaw(t, "tcp", ts.addr)
	rc.expect("554 5.7.1 Service unavailable; client [127.0.0.1] blocked using bl.test")
	if r := rc.reply(); r != "EOF" {
		t.Errorf("after the refusal: %q, want the connection closed", r)
	}
	if asked := sc.clients(); len(asked) != 1 || asked[0] != "127.0.0.1" {
		t.Errorf("screener asked about %v", asked)
	}
}

// TestListedBelowThresholdMarksTheMail: a client the lists name below the
// threshold is greeted, and every message of its session carries the
// verdict to the backend (which puts it in junk).
func TestListedBelowThresholdMarksTheMail(t *testing.T) {
	sc := &fakeScreener{verdict: Screening{Listed: []string{"bl.test=127.0.0.2 weight 1"}, Junk: "listed by bl.test"}}
	ts := startServer(t, Limits{}, nil, false, screenedBy(sc, 0))
	rc := dialRaw(t, "tcp", ts.addr)
	rc.hello()
	rc.transaction("a@example.org", "agent@example.com", "Subject: one\r\n\r\nhi\r\n")
	rc.transaction("a@example.org", "agent@example.com", "Subject: two\r\n\r\nhi\r\n")
	got := ts.be.got()
	if len(got) != 2 {
		t.Fatalf("%d deliveries", len(got))
	}
	for _, d := range got {
		if d.env.Screen.Junk != "listed by bl.test" || len(d.env.Screen.Listed) != 1 {
			t.Errorf("envelope screen %+v", d.env.Screen)
		}
	}
}

// TestPregreetRefused: a client that talks before the greeting, while the
// server holds it back (the wait, or the screener's lookups), is refused
// and nothing it sent reaches the backend; one that waits is served.
func TestPregreetRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*Config)
		sc   *fakeScreener
	}{
		{"during the wait", screenedBy(nil, time.Hour), nil},
		{"during the lookups", nil, &fakeScreener{release: make(chan struct{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			if tc.sc != nil {
				opt = screenedBy(tc.sc, 0)
			}
			ts := startServer(t, Limits{}, nil, false, opt)
			rc := dialRaw(t, "tcp", ts.addr)
			rc.send("EHLO eager.example\r\nMAIL FROM:<a@example.org>\r\nRCPT TO:<agent@example.com>\r\nDATA\r\nSubject: x\r\n\r\nspam\r\n.\r\n")
			rc.expect("554 5.5.1")
			if r := rc.reply(); r != "EOF" {
				t.Errorf("after the refusal: %q", r)
			}
			if len(ts.be.got()) != 0 {
				t.Errorf("pregreet client's mail delivered")
			}
		})
	}
	// A patient client: the wait ends, the greeting comes, mail flows.
	ts := startServer(t, Limits{}, nil, false, screenedBy(nil, 50*time.Millisecond))
	rc := dialRaw(t, "tcp", ts.addr)
	rc.hello()
	rc.transaction("a@example.org", "agent@example.com", "Subject: patient\r\n\r\nhi\r\n")
	if len(ts.be.got()) != 1 {
		t.Errorf("patient client's mail not delivered")
	}
}

// TestScreenIsSMTPOnly: LMTP from a front MTA is neither held back nor
// screened (the front MTA screens its own clients).
func TestScreenIsSMTPOnly(t *testing.T) {
	sc := &fakeScreener{verdict: Screening{Refuse: "blocked"}}
	ts := startServer(t, Limits{}, nil, true, screenedBy(sc, time.Hour))
	rc := dialRaw(t, "unix", ts.lmtp)
	rc.expect("220 ")
	rc.cmd("LHLO front.example", "250")
	if asked := sc.clients(); len(asked) != 0 {
		t.Errorf("LMTP client screened: %v", asked)
	}
}
