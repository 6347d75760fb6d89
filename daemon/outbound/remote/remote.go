// Package remote is the SMTP client that delivers queued mail: to the
// recipients' MX hosts (STARTTLS, verified when it can be), to a relay
// (smarthost with authentication), or to the daemon's own mailboxes through
// a LocalDeliverer.
package remote

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/textproto"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"golang.org/x/net/idna"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/resolver"
)

// dnsTimeout bounds each lookup, whatever the resolver's own settings.
const dnsTimeout = 30 * time.Second

// LocalDeliverer takes mail for this host's own domains through the daemon's
// ingest path instead of the network, with a result per recipient.
type LocalDeliverer interface {
	DeliverLocal(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result
}

// Client delivers to the recipients' MX hosts, or to a relay when one is
// configured. Every network edge is a field so tests can replace it.
type Client struct {
	Resolver           resolver.Resolver
	Dial               func(ctx context.Context, network, addr string) (net.Conn, error) // nil: net.Dialer
	Port               int                                                               // remote SMTP port, 25 if zero
	Hostname           string                                                            // EHLO name
	RootCAs            *x509.CertPool                                                    // nil: the system roots
	AllowPlaintext     bool
	ConnectTimeout     time.Duration
	TransactionTimeout time.Duration
	Relay              *config.Relay // Host set: all non-local mail goes there
	RelayPassword      string
	// RelayRootCAs are the authorities the relay's certificate must chain
	// to (relay.ca_file); nil: RootCAs.
	RelayRootCAs *x509.CertPool
	Local        LocalDeliverer
	IsLocal      func(domain string) bool
	Logger       *slog.Logger
	// PerDestination bounds the transactions in flight to one address
	// (default 8); MaxIdle the sessions kept open between messages (default
	// 32), each for at most IdleTimeout (default 5s). Close drops them.
	PerDestination int
	MaxIdle        int
	IdleTimeout    time.Duration
	// STS finds recipient domains' MTA-STS policies (RFC 8461); nil: none
	// are honoured.
	STS PolicySource
	// DNSSEC asks a validating resolver for MX security and TLSA records
	// (DANE, RFC 7672); nil: no DANE.
	DNSSEC resolver.Exchanger
	// Reports counts TLS sessions per policy domain (RFC 8460); nil: none.
	Reports SessionRecorder
	// Clock is the time DANE-TA chains are checked at; nil: time.Now.
	Clock func() time.Time

	poolOnce sync.Once
	pool     *pool
}

func (d *Client) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Logger
}

// Deliver makes one attempt for rcpts, grouped by domain.
func (d *Client) Deliver(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
	var order []string
	groups := map[string][]string{}
	for _, r := range rcpts {
		dom := strings.ToLower(r[strings.LastIndexByte(r, '@')+1:])
		if _, ok := groups[dom]; !ok {
			order = append(order, dom)
		}
		groups[dom] = append(groups[dom], r)
	}
	var out []delivery.Result
	for _, dom := range order {
		group := groups[dom]
		switch {
		case d.Local != nil && d.IsLocal != nil && d.IsLocal(dom):
			out = append(out, d.elsewhere(ctx, from, d.deliverLocal(ctx, from, group, data), data)...)
		case d.Relay != nil && d.Relay.Host != "":
			out = append(out, d.deliverRelay(ctx, from, group, data)...)
		default:
			out = append(out, d.deliverMX(ctx, dom, from, group, data)...)
		}
	}
	return out
}

func (d *Client) deliverLocal(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
	out := d.Local.DeliverLocal(ctx, from, rcpts, data)
	for i := range out {
		out[i].TLS, out[i].Host = delivery.TLSNone, "local"
	}
	return out
}

// elsewhere sends the local recipients that have no mailbox on this host
// (550 5.1.1) to the relay when the local domains are split over several
// hosts (relay.split_domains): the tier in front routes them to their host.
// A recipient no host has comes back from the tier as a bounce.
func (d *Client) elsewhere(ctx context.Context, from string, local []delivery.Result, data []byte) []delivery.Result {
	if d.Relay == nil || d.Relay.Host == "" || !d.Relay.SplitDomains {
		return local
	}
	var idx []int
	var rcpts []string
	for i, r := range local {
		if r.Err != nil && !r.Err.Temporary && r.Err.Enhanced == "5.1.1" {
			idx = append(idx, i)
			rcpts = append(rcpts, r.Rcpt)
		}
	}
	if len(rcpts) == 0 {
		return local
	}
	byRcpt := map[string]delivery.Result{}
	for _, r := range d.deliverRelay(ctx, from, rcpts, data) {
		byRcpt[r.Rcpt] = r
	}
	for _, i := range idx {
		if r, ok := byRcpt[local[i].Rcpt]; ok {
			local[i] = r
		}
	}
	return local
}

// mxHosts returns the hosts to try in preference order. fallback is true
// when the domain has no MX and its own address is used (RFC 5321 §5.1).
func (d *Client) mxHosts(ctx context.Context, domain string) (hosts []string, fallback bool, derr *delivery.Error) {
	lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	mxs, err := d.Resolver.LookupMX(lctx, domain)
	if err != nil && !resolver.IsNotFound(err) {
		return nil, false, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.3", Message: fmt.Sprintf("DNS lookup of MX for %s failed: %v", domain, err)}
	}
	if len(mxs) == 0 {
		return []string{domain}, true, nil
	}
	if len(mxs) == 1 && strings.TrimSuffix(mxs[0].Host, ".") == "" {
		return nil, false, &delivery.Error{Code: 556, Enhanced: "5.1.10", Message: fmt.Sprintf("%s publishes a null MX: it accepts no mail", domain)}
	}
	sorted := append([]*net.MX(nil), mxs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Pref < sorted[j].Pref })
	for _, mx := range sorted {
		if h := strings.TrimSuffix(mx.Host, "."); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts, false, nil
}

// MaxMXTries bounds what one attempt tries of a domain's MX hosts: the
// addresses it dials, with a host that cannot be resolved or used counting
// as one (Postfix's smtp_mx_address_limit is 5 too). Each address may hold
// the attempt up to the connect and transaction timeouts; without the bound
// a domain publishing many MX hosts and addresses, tarpits or unroutable,
// would hold a delivery place for hours at every attempt. What is left is
// tried at the next attempt, from the first host again.
const MaxMXTries = 5

func (d *Client) deliverMX(ctx context.Context, domain, from string, rcpts []string, data []byte) []delivery.Result {
	log := d.logger().With("domain", domain)
	if !isASCII(domain) {
		// DNS and MTA-STS know an internationalized domain by its A-labels
		// (RFC 5890); looked up as UTF-8 it would not exist.
		a, err := idna.Lookup.ToASCII(domain)
		if err != nil {
			return delivery.AllFailed(rcpts, &delivery.Error{Code: 550, Enhanced: "5.1.2", Message: fmt.Sprintf("%s is not a valid internationalized domain name: %v", domain, err)})
		}
		domain = a
	}
	hosts, fallback, derr := d.mxHosts(ctx, domain)
	if derr != nil {
		log.Info("no delivery route", "err", derr)
		return delivery.AllFailed(rcpts, derr)
	}
	port := d.Port
	if port == 0 {
		port = 25
	}
	dp := d.domainPolicy(ctx, domain, fallback)
	var last *delivery.Error
	tries := 0
	for _, host := range hosts {
		if tries >= MaxMXTries {
			log.Info("MX tries used up for this attempt", "tries", tries, "hosts", len(hosts))
			break
		}
		tries++ // the host's lookups, or its first address
		pol, perr := d.hostPolicy(ctx, dp, host, port)
		if perr != nil {
			log.Info("MX host not usable under the domain's TLS policy", "host", host, "err", perr)
			last = perr
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
		ips, err := d.Resolver.LookupIPAddr(lctx, host)
		cancel()
		if err != nil || len(ips) == 0 {
			if fallback && resolver.IsNotFound(err) {
				return delivery.AllFailed(rcpts, &delivery.Error{Code: 550, Enhanced: "5.1.2", Message: fmt.Sprintf("%s has no MX and no address: no such mail domain", domain)})
			}
			last = &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.4", Message: fmt.Sprintf("cannot resolve MX host %s: %v", host, err), Host: host}
			log.Info("MX host does not resolve", "host", host, "err", err)
			continue
		}
		for i, ip := range ips {
			if i > 0 {
				if tries >= MaxMXTries {
					break
				}
				tries++
			}
			addr := net.JoinHostPort(ip.IP.String(), strconv.Itoa(port))
			// STARTTLS is always attempted, and an MX whose certificate
			// does not verify still gets TLS: opportunistic TLS beats
			// plaintext (see open and verify).
			res, herr := d.deliverRoute(ctx, route{host: host, addr: addr, pol: pol}, from, rcpts, data)
			if herr == nil {
				return res
			}
			log.Info("host attempt failed", "host", host, "addr", addr, "err", herr)
			last = herr
			if !herr.Temporary {
				return delivery.AllFailed(rcpts, herr)
			}
		}
	}
	if last == nil {
		last = &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.1", Message: "no MX host could be reached"}
	}
	return delivery.AllFailed(rcpts, last)
}

// route is where a transaction goes: a host name (for TLS and the logs), one
// of its addresses, and what the route demands.
type route struct {
	host, addr string
	relay      bool        // TLS required and verified; AUTH when auth is set
	implicit   bool        // TLS from the first byte (relay.tls = "implicit")
	auth       sasl.Client // nil: no AUTH
	authID     string      // who auth logs in as, for the session cache key
	pol        tlsPolicy   // the MX route's TLS policy (zero for the relay)
}

// key names the sessions that may carry this route's mail.
func (r route) key(d *Client) string {
	return fmt.Sprintf("%s|%s|%t|%t|%s|%p|%s", r.host, r.addr, r.relay, r.implicit, r.authID, d.roots(r), r.pol.key())
}

// deliverRoute holds one of the destination's concurrency slots for the
// whole transaction, tries cached sessions (a session the server has closed
// meanwhile is dropped and the next one tried), then opens a new one.
func (d *Client) deliverRoute(ctx context.Context, rt route, from string, rcpts []string, data []byte) ([]delivery.Result, *delivery.Error) {
	p := d.sessions()
	release, err := p.acquire(ctx, rt.addr, d.perDestination())
	if err != nil {
		return nil, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.5", Host: rt.host,
			Message: fmt.Sprintf("no free connection slot for %s before the attempt ended: %v", rt.host, err)}
	}
	defer release()
	key := rt.key(d)
	for s := p.take(key); s != nil; s = p.take(key) {
		res, herr, alive := d.send(ctx, s, from, rcpts, data)
		if alive {
			return res, herr
		}
		d.logger().Debug("cached session closed by the server; trying another", "host", rt.host, "addr", rt.addr)
	}
	s, herr := d.open(ctx, rt)
	if herr != nil {
		return nil, herr
	}
	res, herr, _ := d.send(ctx, s, from, rcpts, data)
	return res, herr
}

// greetedConn replays a greeting before the real stream: after STARTTLS (or
// our own EHLO) the server sends none, but go-smtp's client expects one.
type greetedConn struct {
	net.Conn
	r io.Reader
}

func (c *greetedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// newGreeted wraps c; r is where the stream continues (c itself, or the
// reader that already buffered from it).
func newGreeted(c net.Conn, r io.Reader) net.Conn {
	return &greetedConn{Conn: c, r: io.MultiReader(strings.NewReader("220 continuing\r\n"), r)}
}

func (d *Client) dial(ctx context.Context, addr string) (net.Conn, error) {
	ct := d.ConnectTimeout
	if ct <= 0 {
		ct = 30 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, ct)
	defer cancel()
	dial := d.Dial
	if dial == nil {
		dial = new(net.Dialer).DialContext
	}
	c, err := dial(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &replyLimit{Conn: c}, nil
}

// MaxReplyBytes bounds what a remote server may send between two of our
// writes: one reply (a greeting, an EHLO list, a multi-line error) or a TLS
// handshake. A server streaming more is cut off, whatever the command
// timeout would allow.
const MaxReplyBytes = 256 << 10

// ErrReplyTooLong is the error of a read past MaxReplyBytes.
var ErrReplyTooLong = fmt.Errorf("the server sent more than %d KiB without waiting for a command", MaxReplyBytes>>10)

// replyLimit counts the bytes read since the last write.
type replyLimit struct {
	net.Conn
	read atomic.Int64
}

func (c *replyLimit) Read(b []byte) (int, error) {
	left := MaxReplyBytes - c.read.Load()
	if left <= 0 {
		return 0, ErrReplyTooLong
	}
	n, err := c.Conn.Read(b[:min(int64(len(b)), left)])
	c.read.Add(int64(n))
	return n, err
}

func (c *replyLimit) Write(b []byte) (int, error) {
	c.read.Store(0)
	return c.Conn.Write(b)
}

// maxDetail bounds the remote's reply text kept per recipient (in the queue
// and the sent copy's delivery status).
const maxDetail = 1024

// clip cuts a remote's text to maxDetail bytes of valid UTF-8.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxDetail {
		return s
	}
	s = s[:maxDetail]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + " …"
}

func (d *Client) hostname() string {
	if d.Hostname == "" {
		return "localhost"
	}
	return d.Hostname
}

func (d *Client) transactionTimeout() time.Duration {
	if d.TransactionTimeout <= 0 {
		return 10 * time.Minute
	}
	return d.TransactionTimeout
}

// open connects a new session for rt. A STARTTLS handshake that fails is
// retried in plaintext when that is allowed (never for a relay, never when
// the route's policy requires TLS). Every TLS negotiation with an MX is
// counted for the TLS reports.
func (d *Client) open(ctx context.Context, rt route) (*session, *delivery.Error) {
	plain := false
	for {
		s, herr, tlsErr := d.connect(ctx, rt, plain)
		if tlsErr == nil {
			if herr == nil && !plain {
				d.reportSession(rt, s.tls == delivery.TLSNone, nil)
			}
			return s, herr
		}
		d.reportSession(rt, false, tlsErr)
		d.logger().Info("TLS failed", "host", rt.host, "addr", rt.addr, "err", tlsErr)
		switch {
		case rt.relay:
			return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: rt.host, Message: fmt.Sprintf("TLS with relay %s failed: %v", rt.host, tlsErr)}
		case rt.pol.required():
			// Never a downgrade: the message waits for a host that passes.
			return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: rt.host,
				Message: fmt.Sprintf("%v; delivery waits (the %s policy of %s forbids anything less)", tlsErr, rt.pol.name(), rt.pol.domain)}
		case d.AllowPlaintext && !plain:
			plain = true
		default:
			return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: rt.host,
				Message: fmt.Sprintf("TLS with %s failed (%v) and plaintext delivery is off (delivery.allow_plaintext)", rt.host, tlsErr)}
		}
	}
}

// connect dials rt.addr and brings a session up to the point where MAIL can
// be sent: greeting, EHLO, TLS, EHLO again, AUTH. herr is a failure of the
// whole host (try the next); tlsErr means TLS failed and the caller may try
// again without it.
func (d *Client) connect(ctx context.Context, rt route, plain bool) (s *session, herr *delivery.Error, tlsErr error) {
	tt := d.transactionTimeout()
	ctx, cancel := context.WithTimeout(ctx, tt)
	defer cancel()
	conn, err := d.dial(ctx, rt.addr)
	if err != nil {
		return nil, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.1", Host: rt.host, Message: fmt.Sprintf("cannot connect to %s (%s): %v", rt.host, rt.addr, err)}, nil
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	var sc net.Conn
	var state string
	if rt.implicit {
		sc, state, tlsErr = d.handshake(ctx, conn, rt)
	} else {
		sc, state, herr, tlsErr = d.startTLS(ctx, conn, rt, plain)
	}
	if herr != nil || tlsErr != nil {
		return nil, herr, tlsErr
	}
	c := smtp.NewClient(sc)
	c.CommandTimeout, c.SubmissionTimeout = tt, tt
	if err := c.Hello(d.hostname()); err != nil {
		de := hostErr(err, rt.host)
		de.TLS = state
		return nil, de, nil
	}
	if rt.auth != nil {
		if err := c.Auth(rt.auth); err != nil {
			// A credentials problem is the operator's to fix; keep the
			// mail. The status says what TLS the password went over.
			de := hostErr(err, rt.host)
			de.Message = "relay authentication failed: " + de.Message
			de.TLS = state
			return nil, de, nil
		}
	}
	conn.SetDeadline(time.Time{}) // go-smtp sets one per command from here
	ok = true
	if !rt.relay && state != delivery.TLSNone {
		state = rt.pol.kind // the policy the session met
	}
	return &session{c: c, conn: conn, host: rt.host, tls: state, key: rt.key(d), born: time.Now()}, nil, nil
}

// hostErr is a failure before MAIL: whatever the code, it is about this
// host, and another MX may do better, so it stays temporary.
func hostErr(err error, host string) *delivery.Error {
	de := classify(err, host)
	de.Temporary = true
	return de
}

// startTLS reads the greeting, sends EHLO and, when the server offers it and
// plain is false, STARTTLS with one handshake whose certificate is checked
// afterwards. It returns the connection to go on with, greeted again for
// go-smtp.
func (d *Client) startTLS(ctx context.Context, conn net.Conn, rt route, plain bool) (net.Conn, string, *delivery.Error, error) {
	tp := textproto.NewConn(conn)
	if _, _, err := tp.ReadResponse(220); err != nil {
		return nil, "", hostErr(err, rt.host), nil
	}
	ext, err := ehlo(tp, d.hostname())
	if err != nil {
		return nil, "", hostErr(err, rt.host), nil
	}
	_, hasTLS := ext["STARTTLS"]
	switch {
	case !plain && hasTLS:
	case rt.pol.required():
		return nil, "", nil, errNoSTARTTLS(rt)
	case rt.relay:
		return nil, "", &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: rt.host, Message: rt.host + " does not offer STARTTLS, which this route requires"}, nil
	case !d.AllowPlaintext:
		return nil, "", &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: rt.host, Message: rt.host + " does not offer STARTTLS and plaintext delivery is off (delivery.allow_plaintext)"}, nil
	default:
		return newGreeted(conn, tp.R), delivery.TLSNone, nil, nil // plaintext continues from what is already buffered
	}
	id, err := tp.Cmd("STARTTLS")
	if err != nil {
		return nil, "", hostErr(err, rt.host), nil
	}
	tp.StartResponse(id)
	_, _, err = tp.ReadResponse(220)
	tp.EndResponse(id)
	if err != nil {
		return nil, "", nil, fmt.Errorf("STARTTLS refused: %w", err)
	}
	if tp.R.Buffered() > 0 {
		// Plaintext sent after the STARTTLS reply would be read as if it
		// came through TLS (the STARTTLS injection attack): refuse it.
		return nil, "", nil, errors.New("the server sent data after its STARTTLS reply")
	}
	tc, state, err := d.handshake(ctx, conn, rt)
	if err != nil {
		return nil, "", nil, err
	}
	return newGreeted(tc, tc), state, nil, nil
}

// handshake runs TLS over conn and says what its certificate is worth. A
// relay's must verify, on implicit TLS as with STARTTLS: the password must
// never go to a server we cannot name.
func (d *Client) handshake(ctx context.Context, conn net.Conn, rt route) (*tls.Conn, string, error) {
	tc := tls.Client(conn, d.tlsConfig(rt.host))
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, "", err
	}
	state, verr := d.verify(tc, rt.host, d.roots(rt))
	if (rt.relay || rt.implicit) && state != delivery.TLSVerified {
		return nil, "", fmt.Errorf("the certificate of %s does not verify", rt.host)
	}
	if err := d.checkPolicy(tc, rt, verr); err != nil {
		return nil, "", err
	}
	return tc, state, nil
}

// tlsConfig completes the handshake whatever the certificate; verify then
// decides what the connection is worth, so a self-signed MX costs one
// handshake, not a refused verified one and a second connection.
func (d *Client) tlsConfig(host string) *tls.Config {
	return &tls.Config{ServerName: host, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
}

// roots are the authorities rt's certificate must chain to: the relay's
// own (relay.ca_file) for the relay, else RootCAs (nil: the system's).
func (d *Client) roots(rt route) *x509.CertPool {
	if rt.relay && d.RelayRootCAs != nil {
		return d.RelayRootCAs
	}
	return d.RootCAs
}

// verify checks the peer's chain against roots (the system roots when nil)
// and the host name; the error says why it did not verify.
func (d *Client) verify(tc *tls.Conn, host string, roots *x509.CertPool) (string, error) {
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return delivery.TLSUnverified, errors.New("no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: inter}); err != nil {
		d.logger().Info("certificate does not verify", "host", host, "err", err)
		return delivery.TLSUnverified, err
	}
	return delivery.TLSVerified, nil
}

// command sends one command and reads its reply, which must have code want.
func command(tp *textproto.Conn, want int, format string, args ...any) (string, error) {
	id, err := tp.Cmd(format, args...)
	if err != nil {
		return "", err
	}
	tp.StartResponse(id)
	defer tp.EndResponse(id)
	_, msg, err := tp.ReadResponse(want)
	return msg, err
}

// ehlo sends EHLO (HELO if refused) and returns the extensions offered.
func ehlo(tp *textproto.Conn, name string) (map[string]string, error) {
	msg, err := command(tp, 250, "EHLO %s", name)
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 {
		_, err := command(tp, 250, "HELO %s", name)
		return map[string]string{}, err
	}
	if err != nil {
		return nil, err
	}
	ext := map[string]string{}
	lines := strings.Split(msg, "\n")
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, " ")
		ext[strings.ToUpper(k)] = v
	}
	return ext, nil
}

// send runs MAIL, RCPT and DATA on a ready session and then caches it or
// closes it. Recipient refusals are per recipient; a refused MAIL fails the
// host. alive is false only for a cached session found dead at MAIL: nothing
// was sent and the caller may use another.
func (d *Client) send(ctx context.Context, s *session, from string, rcpts []string, data []byte) (res []delivery.Result, herr *delivery.Error, alive bool) {
	ctx, cancel := context.WithTimeout(ctx, d.transactionTimeout())
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	reusable := false
	defer func() {
		if stop() && reusable {
			d.sessions().put(s, d)
		} else {
			s.close()
		}
	}()
	c, host := s.c, s.host
	reused := s.uses > 0
	s.uses++
	var opts *smtp.MailOptions
	if needsSMTPUTF8(from, rcpts, data) {
		if ok, _ := c.Extension("SMTPUTF8"); !ok {
			// RFC 6531 §3.4: such a message must not go to a server that
			// does not offer SMTPUTF8; nothing was sent.
			reusable = true
			return nil, &delivery.Error{Code: 553, Enhanced: "5.6.7", Host: host,
				Message: host + " does not offer SMTPUTF8, which this message needs (a non-ASCII address)"}, true
		}
		opts = &smtp.MailOptions{UTF8: true}
	}
	if err := c.Mail(from, opts); err != nil {
		var se *smtp.SMTPError
		if reused && (!errors.As(err, &se) || se.Code == 421) {
			return nil, nil, false
		}
		reusable = errors.As(err, &se) && reset(c)
		return nil, classify(err, host), true
	}
	out, accepted, lost := rcptAll(c, s, rcpts)
	if lost || len(accepted) == 0 {
		reusable = !lost && reset(c)
		return out, nil, true
	}
	reusable = sendData(c, host, data, out, accepted)
	return out, nil, true
}

// rcptAll offers every recipient. Refusals are per recipient; a lost
// connection fails the rest and the ones already accepted (they never got
// the data), and lost is true.
func rcptAll(c *smtp.Client, s *session, rcpts []string) (out []delivery.Result, accepted []int, lost bool) {
	out = make([]delivery.Result, len(rcpts))
	for i, r := range rcpts {
		out[i] = delivery.Result{Rcpt: r, TLS: s.tls, Host: s.host}
		err := c.Rcpt(r, nil)
		if err == nil {
			accepted = append(accepted, i)
			continue
		}
		out[i].Err = classify(err, s.host)
		var se *smtp.SMTPError
		if errors.As(err, &se) && se.Code != 421 {
			continue
		}
		gone := &delivery.Error{Temporary: true, Message: "connection lost: " + err.Error(), Host: s.host}
		for _, j := range accepted {
			out[j].Err = gone
		}
		for j := i + 1; j < len(rcpts); j++ {
			out[j] = delivery.Result{Rcpt: rcpts[j], TLS: s.tls, Host: s.host, Err: gone}
		}
		return out, nil, true
	}
	return out, accepted, false
}

// sendData sends the message to the accepted recipients and reports
// whether the session can carry another transaction.
func sendData(c *smtp.Client, host string, data []byte, out []delivery.Result, accepted []int) (reusable bool) {
	failAccepted := func(err error) {
		de := classify(err, host)
		for _, i := range accepted {
			out[i].Err = de
		}
	}
	var se *smtp.SMTPError
	w, err := c.Data()
	if err != nil {
		failAccepted(err)
		return errors.As(err, &se) && reset(c)
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		failAccepted(err)
		return false
	}
	if err := w.Close(); err != nil {
		failAccepted(err)
		return errors.As(err, &se) && se.Code != 421
	}
	// The transaction is complete: the next MAIL may follow without RSET.
	return true
}

// reset aborts a transaction that did not reach the end of DATA, so the
// session can carry another.
func reset(c *smtp.Client) bool { return c.Reset() == nil }

// classify turns an SMTP reply or I/O error into a DeliveryError: 5xx is
// permanent, everything else temporary.
func classify(err error, host string) *delivery.Error {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		de := &delivery.Error{Temporary: se.Code < 500 || se.Code > 599, Code: se.Code, Message: clip(se.Message), Host: host}
		if se.EnhancedCode != smtp.NoEnhancedCode && se.EnhancedCode != (smtp.EnhancedCode{}) {
			de.Enhanced = fmt.Sprintf("%d.%d.%d", se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2])
		}
		return de
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		return &delivery.Error{Temporary: te.Code < 500 || te.Code > 599, Code: te.Code, Message: clip(te.Msg), Host: host}
	}
	var de *delivery.Error
	if errors.As(err, &de) {
		return de
	}
	return &delivery.Error{Temporary: true, Message: clip(err.Error()), Host: host}
}

// deliverRelay hands everything to the configured smarthost: implicit TLS or
// STARTTLS (required) as relay.tls says (by default implicit on port 465),
// certificate always verified (against relay.ca_file when set), AUTH PLAIN
// when a username is set.
func (d *Client) deliverRelay(ctx context.Context, from string, rcpts []string, data []byte) []delivery.Result {
	r := d.Relay
	port := r.Port
	if port == 0 {
		port = 587
	}
	lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	ips, err := d.Resolver.LookupIPAddr(lctx, r.Host)
	cancel()
	if err != nil || len(ips) == 0 {
		return delivery.AllFailed(rcpts, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.4", Host: r.Host, Message: fmt.Sprintf("cannot resolve relay %s: %v", r.Host, err)})
	}
	implicit := r.TLS == config.RelayImplicitTLS || r.TLS == "" && port == 465
	rt := route{host: r.Host, relay: true, implicit: implicit}
	if r.Username != "" {
		rt.auth = sasl.NewPlainClient("", r.Username, d.RelayPassword)
		sum := sha256.Sum256([]byte(r.Username + "\x00" + d.RelayPassword))
		rt.authID = hex.EncodeToString(sum[:8])
	}
	var last *delivery.Error
	for _, ip := range ips {
		rt.addr = net.JoinHostPort(ip.IP.String(), strconv.Itoa(port))
		res, herr := d.deliverRoute(ctx, rt, from, rcpts, data)
		if herr == nil {
			return res
		}
		last = herr
		if !herr.Temporary {
			break
		}
	}
	return delivery.AllFailed(rcpts, last)
}
