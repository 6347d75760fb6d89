package smtpin

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
)

// session is one go-smtp session: from EHLO (or LHLO) to QUIT, or to
// STARTTLS, after which go-smtp starts a new one on the same connection.
type session struct {
	s      *Server
	c      *smtp.Conn
	tc     *trackedConn
	log    *slog.Logger
	lmtp   bool
	ctx    context.Context
	cancel context.CancelFunc

	// txMu guards the transaction below: go-smtp runs a BDAT transfer's
	// Data in a goroutine of its own, and resets the transaction from its
	// connection's when the transfer is aborted, while Data may be reading.
	txMu    sync.Mutex
	from    string
	hasFrom bool
	utf8    bool
	rcpts   []string
	fwd     *Forwarded // from XFORWARD, for this transaction
	// sizeHint is the size MAIL FROM declared (SIZE=), 0 when none.
	sizeHint int64
}

var _ smtp.LMTPSession = (*session)(nil)

func (s *Server) newSession(c *smtp.Conn, lmtp bool) (smtp.Session, error) {
	tc := tracked(c.Conn())
	if tc == nil {
		// Not from our listener: cannot happen, refuse rather than run unlimited.
		return nil, errTempFailure
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &session{s: s, c: c, tc: tc, log: tc.log, lmtp: lmtp, ctx: ctx, cancel: cancel}, nil
}

// tracked finds our wrapper below a possible TLS layer.
func tracked(c net.Conn) *trackedConn {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	tc, _ := c.(*trackedConn)
	return tc
}

func (ss *session) Reset() {
	ss.txMu.Lock()
	ss.from, ss.hasFrom, ss.utf8, ss.rcpts, ss.fwd, ss.sizeHint = "", false, false, nil, nil, 0
	ss.txMu.Unlock()
	if ss.tc.xfwd != nil {
		ss.tc.xfwd.end()
	}
}

func (ss *session) Logout() error {
	ss.cancel()
	return nil
}

func (ss *session) Mail(from string, opts *smtp.MailOptions) error {
	if !ss.tc.bdat.settle(ss.s.lim.CommandTimeout) {
		ss.log.Warn("MAIL refused: an earlier BDAT transfer has not ended")
		return errTempFailure
	}
	if opts != nil && opts.Size > ss.s.lim.MaxMessageBytes {
		ss.log.Info("MAIL refused: declared size too big", "size", opts.Size)
		return ss.tc.countError(errTooBig)
	}
	if !cleanAddress(from) {
		return ss.tc.countError(errBadSender)
	}
	if (opts == nil || !opts.UTF8) && !isASCII(from) {
		return ss.tc.countError(errNeedsSMTPUTF8)
	}
	ss.Reset()
	ss.txMu.Lock()
	defer ss.txMu.Unlock()
	ss.from, ss.hasFrom = from, true
	if opts != nil {
		ss.utf8, ss.sizeHint = opts.UTF8, opts.Size
	}
	if ss.tc.xfwd != nil {
		ss.fwd = ss.tc.xfwd.begin()
	}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if len(ss.rcpts) >= ss.s.lim.MaxRecipients {
		return ss.tc.countError(errTooManyRcpts)
	}
	if !cleanAddress(to) {
		return ss.tc.countError(errBadRcpt)
	}
	if !ss.utf8 && !isASCII(to) {
		return ss.tc.countError(errNeedsSMTPUTF8)
	}
	ctx, cancel := context.WithTimeout(ss.ctx, ss.s.lim.CommandTimeout)
	defer cancel()
	if err := ss.s.b.CheckRecipient(ctx, to); err != nil {
		ss.log.Info("RCPT refused", "rcpt", to, "err", err)
		return ss.tc.countError(asReply(err))
	}
	ss.txMu.Lock()
	ss.rcpts = append(ss.rcpts, to)
	ss.txMu.Unlock()
	ss.tc.bdat.rcpt()
	return nil
}

// cleanAddress reports whether an envelope address, as go-smtp parsed it
// out of its angle brackets (a quoted local part unquoted), holds no
// control character (C0, DEL, C1), no line or paragraph separator and no
// space at either end. RFC 5321 allows none of them (a quoted local part
// takes printable characters and spaces); the address is routed, stored as
// delivered_to and shown to the mailbox's reader, where such characters
// would be a terminal's or a model's input. Nor may it start with '-' (as
// Postfix refuses by default, allow_min_user): a hook's script or any
// program that takes addresses on its command line reads one as an option.
func cleanAddress(a string) bool {
	if strings.TrimSpace(a) != a || strings.HasPrefix(a, "-") {
		return false
	}
	for _, r := range a {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// isASCII reports whether an envelope address holds only ASCII, which is
// all RFC 6531 3.4 lets a transaction opened without SMTPUTF8 carry.
func isASCII(a string) bool {
	for i := 0; i < len(a); i++ {
		if a[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// asReply keeps SMTP replies from the backend and turns any other error
// into a generic temporary failure; the detail stays in the log.
func asReply(err error) error {
	var se *smtp.SMTPError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return se
	}
	return errTempFailure
}

// Data answers for the whole transaction: 250 only if every recipient's
// copy is durable, else the first failure (the client retries them all; the
// backend recognises the copies already stored by the bytes below our
// Received header).
func (ss *session) Data(r io.Reader) error {
	defer ss.dataBegun(r)()
	m, release, err := ss.readMessage(r)
	defer release()
	if err == errAborted {
		return err // the client's own abort, not a refused command
	}
	if err != nil {
		return ss.tc.countError(err)
	}
	return asReply(cmp.Or(ss.deliver(m, ss.envelope())...))
}

// LMTPData answers each recipient separately (RFC 2033).
func (ss *session) LMTPData(r io.Reader, status smtp.StatusCollector) error {
	defer ss.dataBegun(r)()
	m, release, err := ss.readMessage(r)
	defer release()
	if err != nil {
		if err != errAborted {
			ss.tc.countError(err)
		}
		return err
	}
	env := ss.envelope()
	errs := ss.deliver(m, env)
	// Each status is written to the client as it is set: the message's
	// budget and spool go first, so that a front MTA that sends its next
	// message on reading the replies finds them free, as after DATA's one
	// reply.
	release()
	for i, rcpt := range env.Rcpts {
		status.SetStatus(rcpt, asReply(errs[i]))
	}
	return nil
}

// dataBegun records a BDAT transfer's Data as running (see transfers); the
// function it returns, deferred first, runs as Data returns. go-smtp hands
// BDAT data through an io.Pipe, DATA through its own reader.
func (ss *session) dataBegun(r io.Reader) (end func()) {
	pr, _ := r.(*io.PipeReader)
	return ss.tc.bdat.begin(pr)
}

// envelope is the transaction as it stands, for its message.
func (ss *session) envelope() Envelope {
	ss.txMu.Lock()
	defer ss.txMu.Unlock()
	return Envelope{RemoteIP: ss.tc.ip, Helo: ss.c.Hostname(), MailFrom: ss.from, Rcpts: append([]string(nil), ss.rcpts...), Session: ss.tc.id,
		Screen: ss.tc.screen, Forwarded: ss.fwd}
}

// deliver calls the backend with the message and the envelope (envelope)
// and always returns one entry per recipient.
func (ss *session) deliver(m *Message, env Envelope) []error {
	if f := env.Forwarded; f != nil {
		if f.Addr != nil {
			env.RemoteIP = f.Addr
		}
		env.Helo = cmp.Or(f.Helo, env.Helo)
	}
	if st, ok := ss.c.TLSConnectionState(); ok {
		env.TLS, env.TLSVersion = true, tlsVersion(st.Version)
	}
	// Delivery gets its own deadline but not the session's cancellation: a
	// client hanging up mid-write must not leave a half-stored message.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ss.ctx), ss.s.lim.CommandTimeout)
	defer cancel()
	start := time.Now()
	errs := ss.s.b.Deliver(ctx, env, m)
	out := make([]error, len(env.Rcpts))
	copy(out, errs)
	failed := 0
	for i := range out {
		if i >= len(errs) {
			out[i] = fmt.Errorf("smtpin: backend returned no result for recipient %d", i)
		}
		if out[i] != nil {
			failed++
			ss.log.Warn("delivery failed", "rcpt", env.Rcpts[i], "err", out[i])
		}
	}
	ss.tc.msgs.Add(1)
	// A message the backend took is logged there, once per mailbox; this
	// line is for debugging unless a recipient failed.
	level := slog.LevelDebug
	if failed > 0 {
		level = slog.LevelInfo
	}
	ss.log.Log(context.Background(), level, "message received", "from", env.MailFrom, "rcpts", len(env.Rcpts), "failed", failed,
		"size", m.Size(), "tls", env.TLSVersion, "took", time.Since(start).Round(time.Microsecond))
	return out
}

// received builds our trace header (RFC 5321 section 4.4). Everything the
// client chose is reduced to safe characters first.
func (ss *session) received() string {
	ss.txMu.Lock()
	utf8, fwd := ss.utf8, ss.fwd
	ss.txMu.Unlock()
	proto := "ESMTP"
	if ss.lmtp {
		proto = "LMTP"
	} else if utf8 {
		proto = "UTF8SMTP"
	}
	tlsInfo := ""
	if st, ok := ss.c.TLSConnectionState(); ok {
		proto += "S"
		tlsInfo = " (" + tlsVersion(st.Version) + " " + tls.CipherSuiteName(st.CipherSuite) + ")"
	}
	from := safeHelo(ss.c.Hostname())
	if ss.tc.ip != nil {
		from += " ([" + ss.tc.ip.String() + "])"
	}
	if f := fwd; f != nil && (f.Addr != nil || f.Helo != "") {
		// The front MTA's client, as it told us with XFORWARD.
		from = safeHelo(f.Helo)
		if f.Addr != nil {
			from += " (" + safeHelo(f.Name) + " [" + f.Addr.String() + "])"
		}
		from += " via " + safeHelo(ss.c.Hostname())
	}
	id := fmt.Sprintf("%s.%d", ss.tc.id, ss.tc.msgs.Load()+1)
	return fmt.Sprintf("Received: from %s\r\n\tby %s (mailctl) with %s id %s%s;\r\n\t%s\r\n",
		from, safeHelo(ss.s.cfg.Hostname), proto, id, tlsInfo, time.Now().Format(time.RFC1123Z))
}

// safeHelo keeps the characters a domain or address literal may have and
// bounds the length, so a HELO cannot inject header syntax.
func safeHelo(h string) string {
	var b strings.Builder
	for _, r := range h {
		if b.Len() >= 255 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]", r) {
			b.WriteRune(r)
		}
	}
	return cmp.Or(b.String(), "unknown")
}

// tlsVersion names a TLS version without the space ("TLS1.3").
func tlsVersion(v uint16) string {
	if v >= tls.VersionTLS10 && v <= tls.VersionTLS13 {
		return strings.ReplaceAll(tls.VersionName(v), " ", "")
	}
	return fmt.Sprintf("TLS-0x%04x", v)
}
