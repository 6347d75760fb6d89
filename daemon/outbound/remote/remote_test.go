package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/fakemx"
	"github.com/mailctl/mailctl/internal/testcert"
)

const testMsg = "From: a@example.com\r\nTo: b@remote.test\r\nSubject: hi\r\n\r\nhello\r\n"

// mxWorld is a resolver, a dial map and a deliverer wired together.
type mxWorld struct {
	r  *resolver.Map
	dm *fakemx.DialMap
	d  *Client
}

func newWorld(t *testing.T) *mxWorld {
	w := &mxWorld{r: &resolver.Map{}, dm: &fakemx.DialMap{}}
	w.d = &Client{Resolver: w.r, Dial: w.dm.Dial, Hostname: "out.example.com", AllowPlaintext: true,
		ConnectTimeout: 2 * time.Second, TransactionTimeout: 10 * time.Second}
	t.Cleanup(w.d.Close)
	return w
}

// mx starts a fake MX reachable as ip:25 in the world.
func (w *mxWorld) mx(t *testing.T, ip string, tlsCfg *tls.Config) *fakemx.Server {
	f := fakemx.New(t, ip, tlsCfg)
	w.dm.Set(ip+":25", f.Addr)
	return f
}

func deliveryErr(t *testing.T, r delivery.Result) *delivery.Error {
	t.Helper()
	if r.Err == nil {
		t.Fatalf("%s: want an error, got delivered", r.Rcpt)
	}
	return r.Err
}

func TestDeliverNoMXFallsBackToAddress(t *testing.T) {
	w := newWorld(t)
	f := w.mx(t, "127.0.0.21", nil)
	w.r.SetIP("fallback.test", "127.0.0.21")
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@fallback.test"}, []byte(testMsg))
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("want delivered, got %+v", res)
	}
	if res[0].Host != "fallback.test" || res[0].TLS != delivery.TLSNone {
		t.Errorf("host %q tls %q, want fallback.test / none", res[0].Host, res[0].TLS)
	}
	msgs := f.Messages()
	if len(msgs) != 1 || msgs[0].Helo != "out.example.com" || msgs[0].From != "a@example.com" {
		t.Fatalf("fake MX got %+v", msgs)
	}
}

func TestDeliverNoMXNoAddressFails(t *testing.T) {
	w := newWorld(t)
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@nowhere.test"}, []byte(testMsg))
	if de := deliveryErr(t, res[0]); de.Temporary || de.Code != 550 {
		t.Fatalf("want permanent 550, got %+v", de)
	}
}

func TestDeliverNullMXFails(t *testing.T) {
	w := newWorld(t)
	w.r.SetMX("null.test", &net.MX{Host: ".", Pref: 0})
	w.r.SetIP("null.test", "127.0.0.22") // an address must not be used as fallback
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@null.test"}, []byte(testMsg))
	de := deliveryErr(t, res[0])
	if de.Temporary || de.Code != 556 || de.Enhanced != "5.1.10" {
		t.Fatalf("want permanent 556 5.1.10, got %+v", de)
	}
}

func TestDeliverFirstMXDownUsesSecond(t *testing.T) {
	w := newWorld(t)
	// Listed out of order: preference, not position, decides.
	w.r.SetMX("two.test", &net.MX{Host: "mx2.two.test.", Pref: 20}, &net.MX{Host: "mx1.two.test.", Pref: 10})
	w.r.SetIP("mx1.two.test", "127.0.0.31", "127.0.0.32") // both addresses down
	w.r.SetIP("mx2.two.test", "127.0.0.33")
	f := w.mx(t, "127.0.0.33", nil)
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@two.test"}, []byte(testMsg))
	if res[0].Err != nil || res[0].Host != "mx2.two.test" {
		t.Fatalf("want delivered via mx2, got %+v", res[0])
	}
	if n := len(f.Messages()); n != 1 {
		t.Fatalf("mx2 got %d messages", n)
	}
}

func TestDeliverTriesEveryAddressOfAHost(t *testing.T) {
	w := newWorld(t)
	w.r.SetMX("multi.test", &net.MX{Host: "mx.multi.test", Pref: 10})
	w.r.SetIP("mx.multi.test", "127.0.0.34", "127.0.0.35")
	f := w.mx(t, "127.0.0.35", nil)
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@multi.test"}, []byte(testMsg))
	if res[0].Err != nil || len(f.Messages()) != 1 {
		t.Fatalf("want delivered to the second address, got %+v", res[0])
	}
}

// A domain can publish any number of MX hosts, each with any number of
// addresses, all of them tarpits or unroutable: an attempt tries at most
// MaxMXTries of them (a host that does not resolve counting as one), so
// that it holds its delivery place for a bounded time, and defers.
func TestDeliverTriesABoundedNumberOfMXAddresses(t *testing.T) {
	w := newWorld(t)
	var mxs []*net.MX
	for i := range 20 {
		host := fmt.Sprintf("mx%d.many.test", i)
		mxs = append(mxs, &net.MX{Host: host, Pref: uint16(i)})
		if i != 1 { // mx1 does not resolve
			w.r.SetIP(host, fmt.Sprintf("127.0.1.%d", 2*i), fmt.Sprintf("127.0.1.%d", 2*i+1))
		}
	}
	w.r.SetMX("many.test", mxs...)
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@many.test"}, []byte(testMsg))
	if de := deliveryErr(t, res[0]); !de.Temporary {
		t.Errorf("want deferred, got %+v", de)
	}
	// mx0's two addresses, mx1's lookup, mx2's two addresses.
	if n := w.dm.Dials(); n != MaxMXTries-1 {
		t.Errorf("%d addresses dialed, want %d", n, MaxMXTries-1)
	}
}

// A non-ASCII address (RFC 6531) or header (RFC 6532) goes out with
// SMTPUTF8 to a server that offers it; a server that does not gets nothing,
// and the recipients fail at once with 5.6.7 rather than being sent
// something it may misread or answering a syntax error later.
func TestDeliverSMTPUTF8(t *testing.T) {
	w := newWorld(t)
	w.r.SetMX("utf8.test", &net.MX{Host: "mx.utf8.test", Pref: 10})
	w.r.SetIP("mx.utf8.test", "127.0.0.51")
	utf := fakemx.NewSMTPUTF8(t, "127.0.0.51", nil)
	w.dm.Set("127.0.0.51:25", utf.Addr)
	w.r.SetMX("ascii.test", &net.MX{Host: "mx.ascii.test", Pref: 10})
	w.r.SetIP("mx.ascii.test", "127.0.0.52")
	ascii := w.mx(t, "127.0.0.52", nil)
	utf8Header := "From: Jörg <jörg@example.com>\r\n" + testMsg

	for _, tc := range []struct {
		name, from, rcpt, msg string
		utf8                  bool
	}{
		{"ascii", "a@example.com", "b@utf8.test", testMsg, false},
		{"recipient", "a@example.com", "jörg@utf8.test", testMsg, true},
		{"sender", "jörg@example.com", "b@utf8.test", testMsg, true},
		{"header", "a@example.com", "b@utf8.test", utf8Header, true},
	} {
		res := w.d.Deliver(context.Background(), tc.from, []string{tc.rcpt}, []byte(tc.msg))
		msgs := utf.Messages()
		if res[0].Err != nil || msgs[len(msgs)-1].UTF8 != tc.utf8 {
			t.Errorf("%s: %+v, SMTPUTF8 %v, want delivered with SMTPUTF8 %v", tc.name, res[0].Err, msgs[len(msgs)-1].UTF8, tc.utf8)
		}
	}

	for _, tc := range []struct{ name, from, rcpt, msg string }{
		{"recipient", "a@example.com", "jörg@ascii.test", testMsg},
		{"header", "a@example.com", "b@ascii.test", utf8Header},
	} {
		res := w.d.Deliver(context.Background(), tc.from, []string{tc.rcpt}, []byte(tc.msg))
		if de := deliveryErr(t, res[0]); de.Temporary || de.Enhanced != "5.6.7" {
			t.Errorf("%s to a server without SMTPUTF8: %+v, want permanent 5.6.7", tc.name, de)
		}
	}
	// An internationalized domain is looked up by its A-labels.
	w.r.SetMX("xn--bcher-kva.test", &net.MX{Host: "mx.utf8.test", Pref: 10})
	if res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@Bücher.test"}, []byte(testMsg)); res[0].Err != nil {
		t.Errorf("to an internationalized domain: %+v", res[0].Err)
	}
	if n := len(ascii.Messages()); n != 0 {
		t.Errorf("the server without SMTPUTF8 got %d messages", n)
	}
	// Nothing was sent: the session carries the next message.
	if res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@ascii.test"}, []byte(testMsg)); res[0].Err != nil || ascii.Conns() != 1 {
		t.Errorf("ASCII message after them: %+v, %d connections", res[0].Err, ascii.Conns())
	}
}

func TestDeliverPermanentAndMixedRecipients(t *testing.T) {
	w := newWorld(t)
	w.r.SetMX("mixed.test", &net.MX{Host: "mx.mixed.test", Pref: 10})
	w.r.SetIP("mx.mixed.test", "127.0.0.41")
	f := w.mx(t, "127.0.0.41", nil)
	f.SetRcptErr("gone@mixed.test", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user here"})
	f.SetRcptErr("busy@mixed.test", &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 2, 2}, Message: "mailbox full, try later"})
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"ok@mixed.test", "gone@mixed.test", "busy@mixed.test"}, []byte(testMsg))
	if res[0].Err != nil {
		t.Errorf("ok: %v", res[0].Err)
	}
	if de := deliveryErr(t, res[1]); de.Temporary || de.Code != 550 || de.Enhanced != "5.1.1" || !strings.Contains(de.Error(), "no such user here") {
		t.Errorf("gone: %+v", de)
	}
	if de := deliveryErr(t, res[2]); !de.Temporary || de.Code != 452 {
		t.Errorf("busy: %+v", de)
	}
	msgs := f.Messages()
	if len(msgs) != 1 || strings.Join(msgs[0].Rcpts, ",") != "ok@mixed.test" {
		t.Fatalf("MX received %+v", msgs)
	}
}

func TestDeliverDNSTemporaryFailureDefers(t *testing.T) {
	w := newWorld(t)
	w.r.Fail = map[string]bool{"flaky.test": true}
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@flaky.test"}, []byte(testMsg))
	if de := deliveryErr(t, res[0]); !de.Temporary {
		t.Fatalf("want temporary, got %+v", de)
	}
}

func TestDeliverTLSRecording(t *testing.T) {
	cert, pool := testcert.New(t, "mx.tls.test")
	other, _ := testcert.New(t, "someone-else.test")
	broken := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return nil, errors.New("no certificate for you")
	}}
	tests := []struct {
		name      string
		serverTLS *tls.Config
		roots     bool
		plaintext bool
		wantTLS   string
		wantErr   bool
		fallbacks int
	}{
		// Without a policy, any certificate gets the message over TLS.
		{"verified", &tls.Config{Certificates: []tls.Certificate{cert}}, true, true, delivery.TLSOpportunistic, false, 0},
		{"self-signed is opportunistic", &tls.Config{Certificates: []tls.Certificate{cert}}, false, true, delivery.TLSOpportunistic, false, 0},
		{"wrong name is opportunistic", &tls.Config{Certificates: []tls.Certificate{other}}, true, true, delivery.TLSOpportunistic, false, 0},
		{"handshake failure falls back to plaintext", broken, true, true, delivery.TLSNone, false, 1},
		{"handshake failure without plaintext defers", broken, true, false, "", true, 0},
		{"no STARTTLS is plaintext", nil, true, true, delivery.TLSNone, false, 0},
		{"no STARTTLS without plaintext defers", nil, true, false, "", true, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ip := "127.0.1." + string(rune('1'+i))
			w.r.SetMX("tls.test", &net.MX{Host: "mx.tls.test", Pref: 10})
			w.r.SetIP("mx.tls.test", ip)
			f := w.mx(t, ip, tt.serverTLS)
			if tt.roots {
				w.d.RootCAs = pool
			}
			w.d.AllowPlaintext = tt.plaintext
			res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@tls.test"}, []byte(testMsg))
			if tt.wantErr {
				if de := deliveryErr(t, res[0]); !de.Temporary {
					t.Fatalf("want temporary failure, got %+v", de)
				}
				if n := len(f.Messages()); n != 0 {
					t.Fatalf("message went through in plaintext")
				}
				return
			}
			if res[0].Err != nil {
				t.Fatalf("delivery failed: %v", res[0].Err)
			}
			if res[0].TLS != tt.wantTLS {
				t.Fatalf("TLS recorded %q, want %q", res[0].TLS, tt.wantTLS)
			}
			msgs := f.Messages()
			if len(msgs) != 1 || msgs[0].TLS != (tt.wantTLS != delivery.TLSNone) {
				t.Fatalf("server saw %+v", msgs)
			}
			// One handshake per delivery, whatever the certificate: only a
			// handshake that fails costs a second (plaintext) connection.
			if want := 1 + tt.fallbacks; f.Conns() != want {
				t.Fatalf("%d connections, want %d", f.Conns(), want)
			}
		})
	}
}

func TestDeliverRelayWithAuth(t *testing.T) {
	cert, pool := testcert.New(t, "smtp.relay.test")
	w := newWorld(t)
	w.r.SetIP("smtp.relay.test", "127.0.0.51")
	f := fakemx.New(t, "127.0.0.51", &tls.Config{Certificates: []tls.Certificate{cert}})
	f.RequireAuth("s3cret")
	w.dm.Set("127.0.0.51:587", f.Addr)
	w.d.RootCAs = pool
	w.d.Relay = &config.Relay{Host: "smtp.relay.test", Port: 587, Username: "relayuser"}
	w.d.RelayPassword = "s3cret"
	// No MX for remote.test at all: the relay replaces MX delivery.
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test", "c@other.test"}, []byte(testMsg))
	for _, r := range res {
		if r.Err != nil || r.TLS != delivery.TLSVerified {
			t.Fatalf("relay delivery: %+v", r)
		}
	}
	msgs := f.Messages()
	if len(msgs) != 2 || msgs[0].User != "relayuser" || !msgs[0].TLS {
		t.Fatalf("relay saw %+v", msgs)
	}

	// A wrong password keeps the mail (temporary) instead of losing it.
	w.d.RelayPassword = "wrong"
	res = w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg))
	if de := deliveryErr(t, res[0]); !de.Temporary || !strings.Contains(de.Message, "authentication") {
		t.Fatalf("want temporary auth failure, got %+v", de)
	}
	// The failure says what TLS the password went over.
	if res[0].TLS != delivery.TLSVerified {
		t.Fatalf("TLS after an authentication failure: %q, want verified", res[0].TLS)
	}

	// A relay whose certificate does not verify never gets the password.
	w.d.RootCAs = nil
	w.d.RelayPassword = "s3cret"
	before := len(f.Messages())
	res = w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg))
	if de := deliveryErr(t, res[0]); !de.Temporary {
		t.Fatalf("want temporary TLS failure, got %+v", de)
	}
	if len(f.Messages()) != before {
		t.Fatal("delivered through an unverified relay")
	}
}

func TestDeliverRelayImplicitTLS(t *testing.T) {
	cert, pool := testcert.New(t, "smtps.relay.test")
	w := newWorld(t)
	w.r.SetIP("smtps.relay.test", "127.0.0.52")
	ln, err := tls.Listen("tcp", "127.0.0.52:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	f := fakemx.Serve(t, ln, nil)
	w.dm.Set("127.0.0.52:465", f.Addr)
	w.d.RootCAs = pool
	w.d.Relay = &config.Relay{Host: "smtps.relay.test", Port: 465}
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg))
	if res[0].Err != nil || res[0].TLS != delivery.TLSVerified || len(f.Messages()) != 1 {
		t.Fatalf("implicit TLS relay: %+v", res[0])
	}
}

// TestRelayTLSBySettingAndItsOwnCA: relay.tls = "implicit" on a port that
// is not 465, with AUTH, verified against the relay's own CA
// (RelayRootCAs, from relay.ca_file). That CA is the relay's alone: an MX
// whose certificate it signed is still unverified.
func TestRelayTLSBySettingAndItsOwnCA(t *testing.T) {
	ca := testcert.NewCA(t)
	w := newWorld(t)
	w.r.SetIP("smtps.corp.test", "127.0.0.54")
	f := fakemx.NewImplicit(t, "127.0.0.54", &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "smtps.corp.test")}})
	f.RequireAuth("s3cret")
	w.dm.Set("127.0.0.54:4650", f.Addr)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM())
	w.d.RelayRootCAs = pool
	w.d.Relay = &config.Relay{Host: "smtps.corp.test", Port: 4650, TLS: config.RelayImplicitTLS, Username: "relayuser"}
	w.d.RelayPassword = "s3cret"
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg))
	if res[0].Err != nil || res[0].TLS != delivery.TLSVerified {
		t.Fatalf("implicit TLS relay on 4650: %+v %v", res[0], res[0].Err)
	}
	if msgs := f.Messages(); len(msgs) != 1 || msgs[0].User != "relayuser" || !msgs[0].TLS {
		t.Fatalf("relay saw %+v", msgs)
	}

	mxw := newWorld(t)
	mxw.d.RelayRootCAs = pool
	mx := mxw.mx(t, "127.0.0.55", &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "mx.remote.test")}})
	mxw.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	mxw.r.SetIP("mx.remote.test", "127.0.0.55")
	res = mxw.d.Deliver(context.Background(), "a@example.com", []string{"b@remote.test"}, []byte(testMsg))
	if res[0].Err != nil || res[0].TLS != delivery.TLSOpportunistic || len(mx.Messages()) != 1 {
		t.Fatalf("MX signed by the relay's CA: %+v, want delivered opportunistically", res[0])
	}
	// The status names the policy, not whether the certificate verified:
	// the roots an MX route is verified against are not the relay's.
	if mxw.d.roots(route{host: "mx.remote.test"}) == pool {
		t.Fatal("an MX route is verified against the relay's CA")
	}
}

type fakeLocal struct{ got []string }

func (l *fakeLocal) DeliverLocal(_ context.Context, _ string, rcpts []string, _ []byte) []delivery.Result {
	l.got = append(l.got, rcpts...)
	out := make([]delivery.Result, len(rcpts))
	for i, r := range rcpts {
		out[i].Rcpt = r
		if strings.HasPrefix(r, "nobody@") {
			out[i].Err = &delivery.Error{Code: 550, Enhanced: "5.1.1", Message: "no such mailbox"}
		}
	}
	return out
}

func TestDeliverLocalDomainsSkipTheNetwork(t *testing.T) {
	w := newWorld(t)
	l := &fakeLocal{}
	w.d.Local = l
	w.d.IsLocal = func(d string) bool { return d == "example.com" }
	res := w.d.Deliver(context.Background(), "a@example.com", []string{"bob@example.com", "nobody@EXAMPLE.com"}, []byte(testMsg))
	if res[0].Err != nil || res[0].Host != "local" {
		t.Fatalf("bob: %+v", res[0])
	}
	if de := deliveryErr(t, res[1]); de.Temporary {
		t.Fatalf("nobody: %+v", de)
	}
	if len(l.got) != 2 {
		t.Fatalf("local got %v", l.got)
	}
}

// scriptedOK is a whole successful session as the server side writes it:
// greeting, our EHLO, go-smtp's EHLO, MAIL, two RCPT, DATA, end of data, QUIT.
const scriptedOK = "220 mx ESMTP\r\n250-mx\r\n250 8BITMIME\r\n250 mx\r\n250 ok\r\n250 ok\r\n250 ok\r\n354 go\r\n250 queued\r\n221 bye\r\n"

var (
	scriptLnOnce sync.Once
	scriptLn     net.Listener
)

// scriptedDeliverer delivers to a "server" that writes script whatever it is
// told, then half-closes, over loopback TCP.
func scriptedDeliverer(script []byte) *Client {
	scriptLnOnce.Do(func() {
		var err error
		if scriptLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			panic(err)
		}
	})
	r := &resolver.Map{}
	r.SetMX("hostile.test", &net.MX{Host: "mx.hostile.test", Pref: 10})
	r.SetIP("mx.hostile.test", "127.0.0.99")
	return &Client{Resolver: r, Hostname: "out.example.com", AllowPlaintext: true, ConnectTimeout: time.Second, TransactionTimeout: time.Second,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var nd net.Dialer
			c, err := nd.DialContext(ctx, "tcp", scriptLn.Addr().String())
			if err != nil {
				return nil, err
			}
			srv, err := scriptLn.Accept()
			if err != nil {
				c.Close()
				return nil, err
			}
			go func() {
				defer srv.Close()
				go func() {
					srv.Write(script)
					srv.(*net.TCPConn).CloseWrite()
				}()
				io.Copy(io.Discard, srv)
			}()
			return c, nil
		}}
}

func TestScriptedSessionDelivers(t *testing.T) {
	d := scriptedDeliverer([]byte(scriptedOK))
	defer d.Close()
	res := d.Deliver(context.Background(), "from@example.com", []string{"a@hostile.test", "b@hostile.test"}, []byte(testMsg))
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Rcpt, r.Err)
		}
	}
}

// FuzzDeliverHostileServer feeds arbitrary server replies to the SMTP client
// side of delivery: whatever a remote MX says, Deliver must not panic, must
// answer for every recipient, and must only report success after the server
// accepted the data.
func FuzzDeliverHostileServer(f *testing.F) {
	f.Add([]byte(scriptedOK))
	f.Add([]byte("220 mx\r\n250-mx\r\n250 STARTTLS\r\n220 go ahead\r\n\x16\x03\x01garbage"))
	f.Add([]byte("220 mx\r\n250 mx\r\n250 ok\r\n550 5.1.1 no\r\n451 4.2.0 later\r\n354 go\r\n250 ok\r\n"))
	f.Add([]byte("220-mx\r\n220 mx\r\n500 what\r\n250 helo ok\r\n250 ok\r\n250 ok\r\n250 ok\r\n354 go\r\n554 5.7.1 spam\r\n"))
	f.Add([]byte("999 \r\n"))
	f.Add([]byte("220 " + strings.Repeat("x", 5000) + "\r\n"))
	f.Fuzz(func(t *testing.T, script []byte) {
		d := scriptedDeliverer(script)
		defer d.Close()
		rcpts := []string{"a@hostile.test", "b@hostile.test"}
		res := d.Deliver(context.Background(), "from@example.com", rcpts, []byte(testMsg))
		if len(res) != len(rcpts) {
			t.Fatalf("%d results for %d recipients", len(res), len(rcpts))
		}
		for _, x := range res {
			if x.Err == nil && !bytes.Contains(script, []byte("354")) {
				t.Fatalf("delivered without the server ever accepting data: %q", script)
			}
		}
	})
}

// A server (or a man in the middle) that sends commands' replies right
// after "220 go ahead", before the TLS handshake, must not have them read as
// if they came over TLS (CVE-2011-0411 style STARTTLS injection).
func TestStartTLSInjectionRefused(t *testing.T) {
	d := scriptedDeliverer([]byte("220 mx\r\n250-mx\r\n250 STARTTLS\r\n220 go ahead\r\n250-injected\r\n250 ok\r\n"))
	defer d.Close()
	d.AllowPlaintext = false
	res := d.Deliver(context.Background(), "from@example.com", []string{"a@hostile.test"}, []byte(testMsg))
	de := deliveryErr(t, res[0])
	if !de.Temporary || !strings.Contains(de.Message, "after its STARTTLS reply") {
		t.Fatalf("got %+v", de)
	}
}

func relayCfg(host string, port int, user string) *config.Relay {
	return &config.Relay{Host: host, Port: port, Username: user}
}

// A server that accepts the first recipient and then drops the connection
// has not taken the message for anyone: every recipient stays to retry.
func TestConnectionLostAfterRcptFailsAccepted(t *testing.T) {
	d := scriptedDeliverer([]byte("220 mx\r\n250 mx\r\n250 mx\r\n250 ok\r\n250 ok\r\n"))
	defer d.Close()
	res := d.Deliver(context.Background(), "from@example.com", []string{"a@hostile.test", "b@hostile.test"}, []byte(testMsg))
	for _, r := range res {
		de := deliveryErr(t, r)
		if !de.Temporary {
			t.Fatalf("%s: want a temporary failure, got %+v", r.Rcpt, de)
		}
	}
}

// TestSplitDomainsRelayWhatIsNotHere: with relay.split_domains, a local
// recipient this host has no mailbox for (550 5.1.1) goes to the relay, the
// MTA tier that routes it to the host that has it; the others stay local.
// Without it, the 550 stands.
func TestSplitDomainsRelayWhatIsNotHere(t *testing.T) {
	cert, pool := testcert.New(t, "tier.relay.test")
	w := newWorld(t)
	w.r.SetIP("tier.relay.test", "127.0.0.53")
	f := fakemx.New(t, "127.0.0.53", &tls.Config{Certificates: []tls.Certificate{cert}})
	w.dm.Set("127.0.0.53:587", f.Addr)
	w.d.RootCAs = pool
	l := &fakeLocal{}
	w.d.Local = l
	w.d.IsLocal = func(d string) bool { return d == "example.com" }
	w.d.Relay = &config.Relay{Host: "tier.relay.test", Port: 587}

	res := w.d.Deliver(context.Background(), "a@example.com", []string{"bob@example.com", "nobody@example.com"}, []byte(testMsg))
	if de := deliveryErr(t, res[1]); de.Temporary || de.Code != 550 || len(f.Messages()) != 0 {
		t.Fatalf("without split_domains: nobody %+v, relay saw %d", de, len(f.Messages()))
	}

	w.d.Relay.SplitDomains = true
	res = w.d.Deliver(context.Background(), "a@example.com", []string{"bob@example.com", "nobody@example.com"}, []byte(testMsg))
	if res[0].Err != nil || res[0].Host != "local" {
		t.Errorf("bob (here): %+v", res[0])
	}
	if r := res[1]; r.Rcpt != "nobody@example.com" || r.Err != nil || r.Host == "local" {
		t.Errorf("nobody (elsewhere): %+v, want delivered through the relay", r)
	}
	if msgs := f.Messages(); len(msgs) != 1 || len(msgs[0].Rcpts) != 1 || msgs[0].Rcpts[0] != "nobody@example.com" {
		t.Errorf("relay saw %+v, want one message for nobody@example.com", msgs)
	}
}

// A hostile MX that streams an endless reply is cut off after MaxReplyBytes,
// whatever the command timeout allows, and what it said is kept short in
// the delivery error.
func TestHostileMXEndlessReplyIsCutOff(t *testing.T) {
	long := "550-" + strings.Repeat("x", 900) + "\r\n"
	script := "220 mx\r\n250 mx\r\n250 mx\r\n250 ok\r\n" + strings.Repeat(long, 4*MaxReplyBytes/len(long))
	d := scriptedDeliverer([]byte(script))
	defer d.Close()
	d.TransactionTimeout = time.Minute
	res := d.Deliver(context.Background(), "from@example.com", []string{"a@hostile.test"}, []byte(testMsg))
	de := deliveryErr(t, res[0])
	if !de.Temporary || !strings.Contains(de.Message, "KiB without waiting") {
		t.Fatalf("got %+v, want the endless reply cut off", de)
	}

	// A long but finite refusal is kept to maxDetail bytes.
	d2 := scriptedDeliverer([]byte("220 mx\r\n250 mx\r\n250 mx\r\n250 ok\r\n" +
		strings.Repeat("550-5.1.1 "+strings.Repeat("é", 400)+"\r\n", 20) + "550 5.1.1 end\r\n"))
	defer d2.Close()
	res = d2.Deliver(context.Background(), "from@example.com", []string{"a@hostile.test"}, []byte(testMsg))
	de = deliveryErr(t, res[0])
	if de.Temporary || len(de.Message) > maxDetail+8 || !utf8.ValidString(de.Message) {
		t.Fatalf("a long refusal: temporary %v, %d bytes, valid UTF-8 %v: %q", de.Temporary, len(de.Message), utf8.ValidString(de.Message), de.Message)
	}
}
