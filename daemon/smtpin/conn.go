package smtpin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener enforces the connection caps before go-smtp sees a
// connection, and wraps accepted ones in trackedConn.
type limitListener struct {
	net.Listener
	s     *Server
	proto string
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		key, front := l.s.peerKey(c, ip), false
		if l.proto == "lmtp" && ip != nil {
			if !l.s.mayConnectLMTP(ip) {
				if ok, n := l.s.summarize("lmtp refused " + ip.String()); ok {
					l.s.log.Warn("LMTP connection refused: address not in lmtp.allow_from", "proto", l.proto, "remote", ip.String(),
						"local", c.LocalAddr().String(), "repeats", n)
				}
				// Permanent, so that a misrouted MTA bounces or stops rather
				// than retrying, and the reason is in its log.
				l.s.refuse(c, "554 5.7.1", "LMTP here is open only to the front MTAs in lmtp.allow_from")
				continue
			}
			key, front = "", true // a front MTA carries every sender's mail: only the total applies
		}
		if reason := l.s.acquire(key); reason != "" {
			if ok, n := l.s.summarize("smtp refused " + ipString(ip) + ": " + reason); ok {
				l.s.log.Info("connection refused", "proto", l.proto, "remote", ipString(ip), "reason", reason, "repeats", n)
			}
			l.s.refuse(c, "421 4.7.0", "Too many connections, try again later")
			continue
		}
		return l.s.track(c, ip, key, l.proto, front), nil
	}
}

func remoteIP(c net.Conn) net.IP {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

func ipString(ip net.IP) string {
	if ip == nil {
		return "local"
	}
	return ip.String()
}

// peerKey is what a connection counts against in the per-IP cap: its
// address (capKey) over TCP; on a Unix socket (LMTP) its user, so that a
// local user who is not the front MTA cannot take every slot, the port's
// included, as one address could not. The users that may forward (the front
// MTA's, and root) carry everyone's mail and count against the total only
// (""), as a front MTA over TCP does.
func (s *Server) peerKey(c net.Conn, ip net.IP) string {
	if ip != nil {
		return capKey(ip)
	}
	uid, ok := peerUID(c)
	switch {
	case !ok:
		return "uid unknown"
	case s.mayForward(uid):
		return ""
	}
	return fmt.Sprintf("uid %d", uid)
}

// acquire reserves a connection slot counted against key (peerKey; "" for
// the total only); it returns why not when over a cap.
func (s *Server) acquire(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.lim.MaxConnections {
		return "too many connections"
	}
	if key != "" {
		if s.perIP[key] >= s.lim.MaxConnectionsPerIP {
			if strings.HasPrefix(key, "uid ") {
				return "too many connections from this user"
			}
			return "too many connections from this IP"
		}
		s.perIP[key]++
	}
	s.total++
	return ""
}

func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if key != "" {
		if s.perIP[key]--; s.perIP[key] <= 0 {
			delete(s.perIP, key)
		}
	}
}

// capKey is what the per-IP cap counts a client by: its IPv4 address, or
// the /64 network of its IPv6 address. A single host or site is given a
// whole /64 and can connect from any address in it (privacy addresses
// change by themselves); counted address by address, one client could
// take every connection slot. Postfix aggregates IPv6 clients by network
// in the same way (smtpd_client_ipv6_prefix_length).
func capKey(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// refuse greets a connection with the reply code and text and closes it.
// The write goes to the empty send buffer of a fresh socket, so it does not
// block the accept loop; the deadline is a guard for the impossible case.
func (s *Server) refuse(c net.Conn, code, text string) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.WriteString(c, code+" "+s.cfg.Hostname+" "+text+"\r\n")
	c.Close()
}

// trackedConn carries the per-connection state that outlives go-smtp
// sessions (a session restarts after STARTTLS): the id, the error count,
// the session deadline, and the first-line check for non-SMTP clients.
type trackedConn struct {
	net.Conn
	s  *Server
	ip net.IP
	id string
	// slotKey is what the connection counts against in the per-IP cap
	// (peerKey), or "" for a front MTA.
	slotKey string
	log     *slog.Logger

	timerMu sync.Mutex // the timer's own goroutine may call Close
	timer   *time.Timer

	checked bool   // first line inspected (only go-smtp's goroutine reads)
	peek    []byte // bytes read during the check, not yet returned

	// dataDeadline, while message data is read, is how long the socket may
	// stay silent: each read from it moves the deadline on.
	dataDeadline atomic.Int64

	// xfwd speaks XFORWARD on an LMTP connection from a front MTA (a
	// forwarding uid on the socket, an lmtp.allow_from address over TCP);
	// nil everywhere else.
	xfwd *xforward

	// screenFirst is set on an SMTP connection whose greeting waits for
	// the pregreet check and the Screener; the first Write (the greeting)
	// runs them. screen is their verdict.
	screenFirst bool
	screen      Screening

	// greeted is set once the greeting is written; tlsStarting once a 220
	// follows it, go-smtp's go-ahead for STARTTLS, after which the socket
	// carries a TLS handshake (see Write). Only go-smtp's goroutine writes.
	greeted, tlsStarting bool

	// bdat holds MAIL back until earlier BDAT transfers have ended.
	bdat transfers

	errors     atomic.Int32
	closeAfter atomic.Bool // close once the current reply is written
	closeOnce  sync.Once
	msgs       atomic.Uint64
}

// track wraps an accepted connection whose slot counts against key. A
// front MTA (front) and a Unix-socket peer allowed to may send XFORWARD.
// Everything is set before the session timer starts: the timer closes the
// connection from another goroutine.
func (s *Server) track(c net.Conn, ip net.IP, key, proto string, front bool) *trackedConn {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	tc := &trackedConn{Conn: c, s: s, ip: ip, id: id, slotKey: key,
		screenFirst: proto == "smtp" && (s.cfg.PregreetWait > 0 || s.cfg.Screener != nil && ip != nil)}
	tc.log = s.log.With("session", id, "proto", proto, "remote", ipString(ip))
	if uid, ok := peerUID(c); front || ok && proto == "lmtp" && s.mayForward(uid) {
		tc.xfwd = &xforward{maxLine: s.lim.MaxLineLength}
	}
	tc.log.Debug("connection opened")
	// The deadline is a timer that closes the socket: go-smtp resets the
	// socket deadlines on every command, so NOOPs would otherwise extend it.
	tc.timerMu.Lock()
	tc.timer = time.AfterFunc(s.lim.SessionTimeout, func() {
		tc.log.Info("session time limit reached, closing")
		tc.Close()
	})
	tc.timerMu.Unlock()
	return tc
}

func (c *trackedConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		c.timerMu.Lock()
		c.timer.Stop()
		c.timerMu.Unlock()
		// The slot is free before the peer can see the close: a client
		// that read EOF may count on it (a new connection is not refused
		// because of one that is already gone).
		c.s.release(c.slotKey)
		err = c.Conn.Close()
		// A session that delivered mail without errors is told by its
		// messages' lines; the others (probes, refused or broken clients)
		// get this one.
		level := slog.LevelInfo
		if c.msgs.Load() > 0 && c.errors.Load() == 0 {
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "connection closed", "messages", c.msgs.Load(), "errors", c.errors.Load())
	})
	return err
}

// httpPrefixes are first lines that show an HTTP client (or a browser
// tricked into a cross-protocol request) talking to the SMTP port. A TLS
// ClientHello (0x16 0x03) means a client that wanted implicit TLS.
var httpPrefixes = [][]byte{
	[]byte("GET "), []byte("POST "), []byte("HEAD "), []byte("PUT "), []byte("DELETE "),
	[]byte("OPTIONS "), []byte("CONNECT "), []byte("PATCH "), []byte("TRACE "), {0x16, 0x03},
}

const peekLen = 8

func (c *trackedConn) Read(b []byte) (int, error) {
	if !c.checked {
		c.checked = true
		buf := make([]byte, 0, peekLen)
		var err error
		for len(buf) < peekLen && bytes.IndexByte(buf, '\n') < 0 {
			var n int
			n, err = c.readConn(buf[len(buf):peekLen])
			buf = buf[:len(buf)+n]
			if err != nil {
				break
			}
		}
		if slices.ContainsFunc(httpPrefixes, func(p []byte) bool { return bytes.HasPrefix(buf, p) }) {
			c.log.Warn("not an SMTP client, closing")
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c.Conn, "554 5.7.0 This is an SMTP server\r\n")
			c.Close()
			return 0, io.EOF
		}
		c.peek = buf
		if len(buf) == 0 && err != nil {
			return 0, err
		}
	}
	if len(c.peek) > 0 {
		n := copy(b, c.peek)
		c.peek = c.peek[n:]
		// A first line longer than the peek must reach go-smtp's line reader
		// in one piece with what follows: handed over alone, the peeked bytes
		// would be taken for a complete command when the rest overflows the
		// line limit.
		if len(c.peek) == 0 && n < len(b) && bytes.IndexByte(b[:n], '\n') < 0 {
			m, err := c.readConn(b[n:])
			return n + m, err
		}
		return n, nil
	}
	return c.readConn(b)
}

// readConn reads from the socket, moving the deadline on during message
// data, through XFORWARD handling where it applies.
func (c *trackedConn) readConn(b []byte) (int, error) {
	if d := time.Duration(c.dataDeadline.Load()); d > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(d))
	}
	if c.xfwd != nil {
		return c.xfwd.read(c.Conn, b)
	}
	return c.Conn.Read(b)
}

func (c *trackedConn) Write(b []byte) (int, error) {
	if c.screenFirst {
		// The first write is go-smtp's greeting.
		c.screenFirst = false
		if !c.screenBeforeGreeting() {
			return 0, net.ErrClosed
		}
	}
	out := b
	if c.xfwd != nil {
		out = c.xfwd.rewrite(out)
	}
	out = c.watchSTARTTLS(out)
	rewritten := !bytes.Equal(out, b)
	n, err := c.Conn.Write(out)
	if rewritten {
		// The caller wrote b: it is told all or nothing of it.
		if err != nil {
			return 0, err
		}
		n = len(b)
	}
	if c.closeAfter.Load() {
		c.Close()
	}
	return n, err
}

// errHandshake replaces go-smtp's reply to a failed STARTTLS handshake
// (550 5.0.0 Handshake error), which is permanent and would keep the
// session open.
const errHandshake = "421 4.7.0 TLS handshake failed, closing connection\r\n"

// watchSTARTTLS ends the connection after a failed STARTTLS handshake. On
// failure go-smtp answers in plaintext and goes on reading commands from
// the raw socket, with the transaction begun before STARTTLS still open,
// though the handshake consumed an unknown part of what the client sent
// (so its framing can no longer be trusted, as with any broken stream) and
// RFC 3207 has the server forget what came before TLS. And a client could
// start handshake after handshake on one connection, each costing the
// server its key exchange and signature, none of them counted as an error.
// While the handshake runs, everything written to the socket is a TLS
// record (its first byte a content type, 20 to 24); a line starting with a
// digit is go-smtp's answer to a handshake that failed.
func (c *trackedConn) watchSTARTTLS(b []byte) []byte {
	switch {
	case len(b) == 0:
	case !c.greeted:
		c.greeted = true
	case c.tlsStarting && b[0] >= '0' && b[0] <= '9':
		c.tlsStarting = false
		c.errors.Add(1)
		c.log.Info("STARTTLS handshake failed, closing")
		c.closeAfter.Store(true)
		return []byte(errHandshake)
	case bytes.HasPrefix(b, []byte("220 ")):
		c.tlsStarting = true
	}
	return b
}

// countError records a refused command; past the limit the reply becomes
// errTooManyErrs and the connection closes once it is written.
func (c *trackedConn) countError(err error) error {
	if int(c.errors.Add(1)) >= c.s.lim.MaxErrors {
		c.log.Warn("too many errors, closing")
		c.closeAfter.Store(true)
		return errTooManyErrs
	}
	return err
}
