package remote

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testwait"
)

// oneMX is a world with one fake MX for reuse.test at ip.
func oneMX(t *testing.T, ip string, tlsCfg *tls.Config) (*mxWorld, *fakemx.Server) {
	w := newWorld(t)
	w.r.SetMX("reuse.test", &net.MX{Host: "mx.reuse.test", Pref: 10})
	w.r.SetIP("mx.reuse.test", ip)
	return w, w.mx(t, ip, tlsCfg)
}

func TestSessionCarriesSeveralMessages(t *testing.T) {
	cert, _ := testcert.New(t, "mx.reuse.test")
	w, f := oneMX(t, "127.0.2.1", &tls.Config{Certificates: []tls.Certificate{cert}})
	w.d.AllowPlaintext = false
	f.SetRcptErr("gone@reuse.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	for i := range 5 {
		rcpts := []string{fmt.Sprintf("r%d@reuse.test", i)}
		if i == 2 {
			// Every recipient refused: the transaction is reset and the
			// session still carries the next message.
			rcpts = []string{"gone@reuse.test"}
		}
		res := w.d.Deliver(context.Background(), "a@example.com", rcpts, []byte(testMsg))
		if i == 2 {
			if res[0].Err == nil || res[0].Err.Temporary {
				t.Fatalf("refused recipient: %+v", res[0])
			}
			continue
		}
		if res[0].Err != nil || res[0].TLS != delivery.TLSOpportunistic {
			t.Fatalf("message %d: %+v", i, res[0])
		}
	}
	if got := f.Conns(); got != 1 {
		t.Fatalf("%d connections for 5 transactions, want 1", got)
	}
	if n := len(f.Messages()); n != 4 {
		t.Fatalf("MX got %d messages, want 4", n)
	}
}

func TestSessionClosedByServerIsReplaced(t *testing.T) {
	// The scripted server answers one transaction and hangs up: the cached
	// session is found dead at MAIL and a new one carries the message.
	d := scriptedDeliverer([]byte("220 mx ESMTP\r\n250-mx\r\n250 8BITMIME\r\n250 mx\r\n250 ok\r\n250 ok\r\n354 go\r\n250 queued\r\n"))
	defer d.Close()
	dials := 0
	dial := d.Dial
	d.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		return dial(ctx, network, addr)
	}
	for i := range 2 {
		res := d.Deliver(context.Background(), "from@example.com", []string{"a@hostile.test"}, []byte(testMsg))
		if res[0].Err != nil {
			t.Fatalf("message %d: %v", i, res[0].Err)
		}
	}
	if dials != 2 {
		t.Fatalf("%d dials, want 2 (one per session)", dials)
	}
}

func TestPerDestinationLimit(t *testing.T) {
	w, f := oneMX(t, "127.0.2.2", nil)
	w.d.PerDestination = 2
	gate := f.Gate()
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := w.d.Deliver(context.Background(), "a@example.com", []string{fmt.Sprintf("r%d@reuse.test", i)}, []byte(testMsg))
			errs <- func() error {
				if res[0].Err != nil {
					return res[0].Err
				}
				return nil
			}()
		}()
	}
	testwait.For(t, "two transactions held in DATA", func() bool { return f.Waiting() == 2 })
	for range n {
		gate <- struct{}{}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, most := f.Open(); most > 2 {
		t.Fatalf("%d connections open at once, the limit is 2", most)
	}
	if got := f.Conns(); got > 2 {
		t.Fatalf("%d connections for %d messages with 2 slots", got, n)
	}
}

func TestIdleSessionsCloseAndStayBounded(t *testing.T) {
	w, f := oneMX(t, "127.0.2.3", nil)
	w.r.SetMX("other.test", &net.MX{Host: "mx.other.test", Pref: 10})
	w.r.SetIP("mx.other.test", "127.0.2.4")
	g := w.mx(t, "127.0.2.4", nil)
	w.d.MaxIdle = 1
	w.d.IdleTimeout = 100 * time.Millisecond
	for _, r := range []string{"a@reuse.test", "b@other.test"} {
		if res := w.d.Deliver(context.Background(), "a@example.com", []string{r}, []byte(testMsg)); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	// The cache holds one session: the second was closed, not kept.
	if got := w.d.Idle(); got != 1 {
		t.Fatalf("%d idle sessions, the bound is 1", got)
	}
	testwait.For(t, "the second server's connection closed", func() bool { now, _ := g.Open(); return now == 0 })
	// The idle one goes after IdleTimeout, with a QUIT the server sees.
	testwait.For(t, "the idle session closed", func() bool { now, _ := f.Open(); return now == 0 && w.d.Idle() == 0 })
}

func TestRelaySessionNotSharedAcrossCredentials(t *testing.T) {
	cert, pool := testcert.New(t, "smtp.relay.test")
	w := newWorld(t)
	w.r.SetIP("smtp.relay.test", "127.0.2.5")
	f := fakemx.New(t, "127.0.2.5", &tls.Config{Certificates: []tls.Certificate{cert}})
	f.RequireAuth("s3cret")
	w.dm.Set("127.0.2.5:587", f.Addr)
	w.d.RootCAs = pool
	w.d.Relay = relayCfg("smtp.relay.test", 587, "relayuser")
	w.d.RelayPassword = "s3cret"
	if res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg)); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	// A session logged in with one password never carries mail for another.
	w.d.RelayPassword = "wrong"
	if res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg)); res[0].Err == nil {
		t.Fatal("delivered on a session authenticated with other credentials")
	}
}

// Idle is the number of cached sessions.
func (d *Client) Idle() int {
	p := d.sessions()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nidle
}
