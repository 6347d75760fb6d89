// Package remote is the SMTP client that delivers queued mail: to the
// recipients' MX hosts (STARTTLS, verified when it can be), to a relay
// (smarthost with authentication), or to the daemon's own mailboxes through
// a LocalDeliverer.
package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/textproto"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

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
	Local              LocalDeliverer
	IsLocal            func(domain string) bool
	Logger             *slog.Logger
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
			out = append(out, d.deliverLocal(ctx, from, group, data)...)
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

func (d *Client) deliverMX(ctx context.Context, domain, from string, rcpts []string, data []byte) []delivery.Result {
	log := d.logger().With("domain", domain)
	hosts, fallback, derr := d.mxHosts(ctx, domain)
	if derr != nil {
		log.Info("no delivery route", "err", derr)
		return delivery.AllFailed(rcpts, derr, "")
	}
	port := d.Port
	if port == 0 {
		port = 25
	}
	var last *delivery.Error
	for _, host := range hosts {
		lctx, cancel := context.WithTimeout(ctx, dnsTimeout)
		ips, err := d.Resolver.LookupIPAddr(lctx, host)
		cancel()
		if err != nil || len(ips) == 0 {
			if fallback && resolver.IsNotFound(err) {
				return delivery.AllFailed(rcpts, &delivery.Error{Code: 550, Enhanced: "5.1.2", Message: fmt.Sprintf("%s has no MX and no address: no such mail domain", domain)}, "")
			}
			last = &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.4", Message: fmt.Sprintf("cannot resolve MX host %s: %v", host, err), Host: host}
			log.Info("MX host does not resolve", "host", host, "err", err)
			continue
		}
		for _, ip := range ips {
			addr := net.JoinHostPort(ip.IP.String(), strconv.Itoa(port))
			res, herr := d.deliverHost(ctx, host, addr, from, rcpts, data)
			if herr == nil {
				return res
			}
			log.Info("host attempt failed", "host", host, "addr", addr, "err", herr)
			last = herr
			if !herr.Temporary {
				return delivery.AllFailed(rcpts, herr, "")
			}
		}
	}
	if last == nil {
		last = &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.1", Message: "no MX host could be reached"}
	}
	return delivery.AllFailed(rcpts, last, "")
}

type tlsMode int

const (
	tlsModeVerify tlsMode = iota
	tlsModeNoVerify
	tlsModePlain
)

// deliverHost runs the transaction with one address of one MX host. STARTTLS
// is always attempted and verified against the MX name; a certificate that
// does not verify is retried without verification (recorded "unverified":
// opportunistic TLS still beats plaintext), and a failed handshake falls back
// to plaintext only when AllowPlaintext says so (recorded "none").
func (d *Client) deliverHost(ctx context.Context, host, addr, from string, rcpts []string, data []byte) ([]delivery.Result, *delivery.Error) {
	mode := tlsModeVerify
	for {
		res, herr, tlsErr := d.transaction(ctx, host, addr, mode, false, from, rcpts, data, nil)
		if tlsErr == nil {
			return res, herr
		}
		d.logger().Info("STARTTLS failed", "host", host, "addr", addr, "verify", mode == tlsModeVerify, "err", tlsErr)
		switch {
		case mode == tlsModeVerify && isCertError(tlsErr):
			mode = tlsModeNoVerify
		case d.AllowPlaintext && mode != tlsModePlain:
			mode = tlsModePlain
		default:
			return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: host,
				Message: fmt.Sprintf("TLS with %s failed (%v) and plaintext delivery is off (delivery.allow_plaintext)", host, tlsErr)}
		}
	}
}

func isCertError(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
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
	if d.Dial != nil {
		return d.Dial(dctx, "tcp", addr)
	}
	var nd net.Dialer
	return nd.DialContext(dctx, "tcp", addr)
}

func (d *Client) hostname() string {
	if d.Hostname == "" {
		return "localhost"
	}
	return d.Hostname
}

// transaction dials addr and runs one SMTP transaction. herr is a failure of
// the whole host (try the next); tlsErr means STARTTLS failed and the caller
// may try again in another mode. requireTLS refuses peers without STARTTLS.
func (d *Client) transaction(ctx context.Context, host, addr string, mode tlsMode, requireTLS bool, from string, rcpts []string, data []byte, auth sasl.Client) (res []delivery.Result, herr *delivery.Error, tlsErr error) {
	tt := d.TransactionTimeout
	if tt <= 0 {
		tt = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, tt)
	defer cancel()
	conn, err := d.dial(ctx, addr)
	if err != nil {
		return nil, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.1", Host: host, Message: fmt.Sprintf("cannot connect to %s (%s): %v", host, addr, err)}, nil
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	hostErr := func(err error) *delivery.Error {
		de := classify(err, host)
		// Whatever the code, a failure before MAIL is about this host:
		// another MX may do better, so keep it temporary.
		de.Temporary = true
		return de
	}
	tp := textproto.NewConn(conn)
	if _, _, err := tp.ReadResponse(220); err != nil {
		return nil, hostErr(err), nil
	}
	ext, err := ehlo(tp, d.hostname())
	if err != nil {
		return nil, hostErr(err), nil
	}
	_, hasTLS := ext["STARTTLS"]
	state := delivery.TLSNone
	var sc net.Conn = conn
	var rest io.Reader = tp.R // plaintext continues from what is already buffered
	switch {
	case mode != tlsModePlain && hasTLS:
		id, err := tp.Cmd("STARTTLS")
		if err != nil {
			return nil, hostErr(err), nil
		}
		tp.StartResponse(id)
		_, _, err = tp.ReadResponse(220)
		tp.EndResponse(id)
		if err != nil {
			return nil, nil, fmt.Errorf("STARTTLS refused: %w", err)
		}
		if tp.R.Buffered() > 0 {
			// Plaintext sent after the STARTTLS reply would be read as if it
			// came through TLS (the STARTTLS injection attack): refuse it.
			return nil, nil, errors.New("the server sent data after its STARTTLS reply")
		}
		tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: d.RootCAs, InsecureSkipVerify: mode == tlsModeNoVerify, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, err
		}
		sc, rest = tc, tc
		state = delivery.TLSVerified
		if mode == tlsModeNoVerify {
			state = delivery.TLSUnverified
		}
	case requireTLS:
		return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: host, Message: host + " does not offer STARTTLS, which this route requires"}, nil
	case !d.AllowPlaintext:
		return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: host, Message: host + " does not offer STARTTLS and plaintext delivery is off (delivery.allow_plaintext)"}, nil
	}
	c := smtp.NewClient(newGreeted(sc, rest))
	c.CommandTimeout, c.SubmissionTimeout = tt, tt
	if err := c.Hello(d.hostname()); err != nil {
		return nil, hostErr(err), nil
	}
	res, herr = d.mailTransaction(c, host, state, from, rcpts, data, auth)
	return res, herr, nil
}

// ehlo sends EHLO (HELO if refused) and returns the extensions offered.
func ehlo(tp *textproto.Conn, name string) (map[string]string, error) {
	id, err := tp.Cmd("EHLO %s", name)
	if err != nil {
		return nil, err
	}
	tp.StartResponse(id)
	_, msg, err := tp.ReadResponse(250)
	tp.EndResponse(id)
	if err != nil {
		var te *textproto.Error
		if errors.As(err, &te) && te.Code >= 500 {
			id, err := tp.Cmd("HELO %s", name)
			if err != nil {
				return nil, err
			}
			tp.StartResponse(id)
			_, _, err = tp.ReadResponse(250)
			tp.EndResponse(id)
			return map[string]string{}, err
		}
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

// mailTransaction runs MAIL, RCPT and DATA on a greeted client. Recipient
// refusals are per recipient; a refused MAIL fails the host.
func (d *Client) mailTransaction(c *smtp.Client, host, state, from string, rcpts []string, data []byte, auth sasl.Client) ([]delivery.Result, *delivery.Error) {
	defer c.Close()
	if auth != nil {
		if err := c.Auth(auth); err != nil {
			de := classify(err, host)
			de.Temporary = true // a credentials problem is the operator's to fix; keep the mail
			de.Message = "relay authentication failed: " + de.Message
			return nil, de
		}
	}
	if err := c.Mail(from, nil); err != nil {
		return nil, classify(err, host)
	}
	out := make([]delivery.Result, len(rcpts))
	var accepted []int
	for i, r := range rcpts {
		out[i] = delivery.Result{Rcpt: r, TLS: state, Host: host}
		if err := c.Rcpt(r, nil); err != nil {
			out[i].Err = classify(err, host)
			continue
		}
		accepted = append(accepted, i)
	}
	if len(accepted) == 0 {
		c.Quit()
		return out, nil
	}
	failAccepted := func(err error) {
		de := classify(err, host)
		for _, i := range accepted {
			out[i].Err = de
		}
	}
	w, err := c.Data()
	if err != nil {
		failAccepted(err)
		return out, nil
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		failAccepted(err)
		return out, nil
	}
	if err := w.Close(); err != nil {
		failAccepted(err)
		return out, nil
	}
	c.Quit()
	return out, nil
}

// classify turns an SMTP reply or I/O error into a DeliveryError: 5xx is
// permanent, everything else temporary.
func classify(err error, host string) *delivery.Error {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		de := &delivery.Error{Temporary: se.Code < 500 || se.Code > 599, Code: se.Code, Message: se.Message, Host: host}
		if se.EnhancedCode != smtp.NoEnhancedCode && se.EnhancedCode != (smtp.EnhancedCode{}) {
			de.Enhanced = fmt.Sprintf("%d.%d.%d", se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2])
		}
		return de
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		return &delivery.Error{Temporary: te.Code < 500 || te.Code > 599, Code: te.Code, Message: te.Msg, Host: host}
	}
	var de *delivery.Error
	if errors.As(err, &de) {
		return de
	}
	return &delivery.Error{Temporary: true, Message: err.Error(), Host: host}
}

// deliverRelay hands everything to the configured smarthost: implicit TLS on
// port 465, STARTTLS (required) otherwise, certificate always verified, AUTH
// PLAIN when a username is set.
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
		return delivery.AllFailed(rcpts, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.4", Host: r.Host, Message: fmt.Sprintf("cannot resolve relay %s: %v", r.Host, err)}, "")
	}
	var auth sasl.Client
	if r.Username != "" {
		auth = sasl.NewPlainClient("", r.Username, d.RelayPassword)
	}
	var last *delivery.Error
	for _, ip := range ips {
		addr := net.JoinHostPort(ip.IP.String(), strconv.Itoa(port))
		var res []delivery.Result
		var herr *delivery.Error
		if port == 465 {
			res, herr = d.relayImplicit(ctx, addr, from, rcpts, data, auth)
		} else {
			res, herr = d.relayStartTLS(ctx, addr, from, rcpts, data, auth)
		}
		if herr == nil {
			return res
		}
		last = herr
		if !herr.Temporary {
			break
		}
	}
	return delivery.AllFailed(rcpts, last, "")
}

func (d *Client) relayImplicit(ctx context.Context, addr, from string, rcpts []string, data []byte, auth sasl.Client) ([]delivery.Result, *delivery.Error) {
	host := d.Relay.Host
	tt := d.TransactionTimeout
	if tt <= 0 {
		tt = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, tt)
	defer cancel()
	conn, err := d.dial(ctx, addr)
	if err != nil {
		return nil, &delivery.Error{Temporary: true, Code: 451, Enhanced: "4.4.1", Host: host, Message: fmt.Sprintf("cannot connect to relay %s (%s): %v", host, addr, err)}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: d.RootCAs, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: host, Message: fmt.Sprintf("TLS with relay %s failed: %v", host, err)}
	}
	c := smtp.NewClient(tc)
	c.CommandTimeout, c.SubmissionTimeout = tt, tt
	if err := c.Hello(d.hostname()); err != nil {
		de := classify(err, host)
		de.Temporary = true
		return nil, de
	}
	return d.mailTransaction(c, host, delivery.TLSVerified, from, rcpts, data, auth)
}

func (d *Client) relayStartTLS(ctx context.Context, addr, from string, rcpts []string, data []byte, auth sasl.Client) ([]delivery.Result, *delivery.Error) {
	host := d.Relay.Host
	// Same path as MX delivery, but STARTTLS and verification are required:
	// the password must never cross the network in the clear.
	res, herr, tlsErr := d.transaction(ctx, host, addr, tlsModeVerify, true, from, rcpts, data, auth)
	if tlsErr != nil {
		return nil, &delivery.Error{Temporary: true, Code: 454, Enhanced: "4.7.5", Host: host, Message: fmt.Sprintf("TLS with relay %s failed: %v", host, tlsErr)}
	}
	return res, herr
}
