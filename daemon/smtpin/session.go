package smtpin

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

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
	ss.from, ss.hasFrom, ss.utf8, ss.rcpts, ss.fwd, ss.sizeHint = "", false, false, nil, nil, 0
	if ss.tc.xfwd != nil {
		ss.tc.xfwd.end()
	}
}

func (ss *session) Logout() error {
	ss.cancel()
	return nil
}

func (ss *session) Mail(from string, opts *smtp.MailOptions) error {
	if opts != nil && opts.Size > ss.s.lim.MaxMessageBytes {
		ss.log.Info("MAIL refused: declared size too big", "size", opts.Size)
		return ss.tc.countError(errTooBig)
	}
	ss.Reset()
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
	ctx, cancel := context.WithTimeout(ss.ctx, ss.s.lim.CommandTimeout)
	defer cancel()
	if err := ss.s.b.CheckRecipient(ctx, to); err != nil {
		ss.log.Info("RCPT refused", "rcpt", to, "err", err)
		return ss.tc.countError(asReply(err))
	}
	ss.rcpts = append(ss.rcpts, to)
	return nil
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
	m, release, err := ss.readMessage(r)
	defer release()
	if err != nil {
		return ss.tc.countError(err)
	}
	return asReply(cmp.Or(ss.deliver(m)...))
}

// LMTPData answers each recipient separately (RFC 2033).
func (ss *session) LMTPData(r io.Reader, status smtp.StatusCollector) error {
	m, release, err := ss.readMessage(r)
	defer release()
	if err != nil {
		ss.tc.countError(err)
		return err
	}
	errs := ss.deliver(m)
	for i, rcpt := range ss.rcpts {
		status.SetStatus(rcpt, asReply(errs[i]))
	}
	return nil
}

// deliver calls the backend and always returns one entry per recipient.
func (ss *session) deliver(m message) []error {
	raw := m.raw
	env := Envelope{RemoteIP: ss.tc.ip, Helo: ss.c.Hostname(), MailFrom: ss.from, Rcpts: append([]string(nil), ss.rcpts...), TraceLen: m.trace, Session: ss.tc.id, Headroom: m.headroom}
	if f := ss.fwd; f != nil {
		env.Forwarded = f
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
	errs := ss.s.b.Deliver(ctx, env, raw)
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
		"size", len(raw), "tls", env.TLSVersion, "took", time.Since(start).Round(time.Microsecond))
	return out
}

// readMessage reads DATA (or BDAT chunks), enforces the size, framing and
// loop limits, and prepends our Received header, trace bytes long. release
// returns the message's share of the in-flight memory budget; call it when
// done with raw.
func (ss *session) readMessage(r io.Reader) (m message, release func(), err error) {
	budget := &budgetReader{s: ss.s}
	release = budget.release
	if !ss.hasFrom || len(ss.rcpts) == 0 {
		return message{}, release, smtpErr(503, smtp.EnhancedCode{5, 5, 1}, "Bad sequence of commands")
	}
	hdr := ss.received()
	// go-smtp sets the read deadline once per command, and its DATA reader
	// fills whole buffers under it: the connection refreshes the deadline
	// as bytes arrive instead, so a slow but steady sender is not cut off.
	ss.tc.dataDeadline.Store(int64(ss.s.lim.CommandTimeout))
	defer ss.tc.dataDeadline.Store(0)
	// r is go-smtp's DATA reader: it ends at <CRLF>.<CRLF> only and
	// unstuffs leading dots. Its one blind spot, "<CRLF>.<CR>x", loses the
	// dot and the CR; every other bare CR or LF reaches checkBody, which
	// refuses the message (docs/go-smtp.md).
	budget.r = r
	if !budget.take(int64(len(hdr))) {
		return message{}, release, errNoMemory
	}
	all, err := ss.readData(budget, len(hdr))
	if err != nil {
		return message{}, release, err
	}
	copy(all[Headroom:], hdr)
	if err := ss.checkBody(all[Headroom+len(hdr):]); err != nil {
		return message{}, release, err
	}
	return message{raw: all[Headroom:], trace: len(hdr), headroom: all[:Headroom]}, release, nil
}

// readData reads the message from budget into one array that starts with
// Headroom bytes and hdrLen bytes left for our Received header, with the
// last line completed. Errors are already the replies to give.
func (ss *session) readData(budget *budgetReader, hdrLen int) ([]byte, error) {
	lr := io.LimitReader(budget, ss.s.lim.MaxMessageBytes+1)
	all, n, err := ss.readDeclared(lr, budget, hdrLen)
	if all == nil || err == nil && Headroom+hdrLen+n == len(all) {
		chunks, more, cerr := readChunks(lr)
		n, err = n+more, cerr
		if err == nil && (len(chunks) > 0 || all == nil) {
			all, err = joinChunks(budget, all, chunks, hdrLen, n)
		}
	}
	if err != nil {
		return nil, ss.readFailed(err)
	}
	return completeLastLine(all[:Headroom+hdrLen+n], n), nil
}

// readDeclared reads the message straight into its final array when the
// client declared its size (MAIL FROM SIZE=, as MTAs send it), paid for up
// front. It returns a nil array, and reads nothing, when there is no usable
// size or the budget cannot pay for it; the caller then reads in chunks.
func (ss *session) readDeclared(lr io.Reader, budget *budgetReader, hdrLen int) (all []byte, n int, err error) {
	hint := ss.sizeHint
	if hint <= 0 || hint > ss.s.lim.MaxMessageBytes {
		return nil, 0, nil
	}
	size := int64(Headroom+hdrLen) + hint + hint/32 + 4096
	if !budget.prepay(size) {
		return nil, 0, nil
	}
	all = make([]byte, size)
	n, _, err = readFull(lr, all[Headroom+hdrLen:])
	return all, n, err
}

// readFailed logs a failed read and turns it into the reply. A broken
// stream also ends the connection, since the client's framing can no longer
// be trusted.
func (ss *session) readFailed(err error) error {
	switch {
	case errors.Is(err, smtp.ErrDataTooLarge):
		ss.log.Info("DATA refused: too big")
		return errTooBig
	case errors.Is(err, errNoMemory):
		ss.log.Warn("DATA refused: in-flight memory budget exhausted")
		return errNoMemory
	}
	// The stream is broken (over-long line, timeout, hang-up): answer
	// without internal detail and end the connection.
	ss.log.Info("DATA failed", "err", err)
	ss.tc.closeAfter.Store(true)
	var ne net.Error
	switch {
	case errors.Is(err, smtp.ErrTooLongLine):
		return errLineTooLong
	case errors.As(err, &ne) && ne.Timeout():
		return errReadTimeout
	}
	return errTempFailure
}

// joinChunks copies what was read, n bytes of message in all, if any, and
// then chunks, into one array of exactly the message's size, headroom and
// hdrLen bytes for our Received header first. The chunks are copied once,
// where a growing buffer copies at every doubling and keeps up to twice the
// message.
func joinChunks(budget *budgetReader, all []byte, chunks [][]byte, hdrLen, n int) ([]byte, error) {
	if all != nil {
		// Past the declared size: the array read so far is copied too.
		read := all[Headroom+hdrLen:]
		if !budget.charge(int64(len(read))) {
			return nil, errNoMemory
		}
		chunks = append([][]byte{read}, chunks...)
	}
	whole := make([]byte, Headroom+hdrLen+n)
	off := Headroom + hdrLen
	for _, c := range chunks {
		off += copy(whole[off:], c)
	}
	return whole, nil
}

// completeLastLine ends all with CRLF when its n message bytes end without
// a line break. BDAT carries the bytes as they are, and the last chunk may
// end without one: the last line is completed, as Postfix does (DKIM's
// canonical body adds the same CRLF, so signatures still verify). A
// trailing bare CR is left for checkBody to refuse.
func completeLastLine(all []byte, n int) []byte {
	if n > 0 && !bytes.HasSuffix(all, []byte("\r\n")) && all[len(all)-1] != '\r' {
		all = append(all, '\r', '\n')
	}
	return all
}

// checkBody applies the size, framing and loop limits to the message as
// the client sent it, and returns the reply for the first it breaks.
func (ss *session) checkBody(body []byte) error {
	switch {
	case int64(len(body)) > ss.s.lim.MaxMessageBytes:
		ss.log.Info("DATA refused: too big")
		return errTooBig
	case len(body) == 0:
		return errEmpty
	case hasBareEOL(body):
		// go-smtp only ends DATA at CRLF.CRLF, so the transaction is intact;
		// refusing also keeps such bytes from reaching an MTA we relay to
		// that might frame them differently.
		ss.log.Info("DATA refused: bare CR or LF")
		return errBareEOL
	case countReceived(body) > ss.s.lim.MaxReceivedHeaders:
		ss.log.Warn("DATA refused: mail loop", "received", countReceived(body))
		return errLoop
	}
	return nil
}

// message is what readMessage read: raw starts with our Received header
// (trace bytes long); headroom is spare room directly before raw in the same
// array.
type message struct {
	raw      []byte
	trace    int
	headroom []byte
}

// readFull reads r into b until b is full or r ends (io.EOF, reported as
// eof with a nil error); any other error is returned.
func readFull(r io.Reader, b []byte) (k int, eof bool, err error) {
	for k < len(b) {
		var nn int
		nn, err = r.Read(b[k:])
		k += nn
		if err == io.EOF {
			return k, true, nil
		}
		if err != nil {
			return k, false, err
		}
	}
	return k, false, nil
}

// readChunks reads r to its end (io.EOF) in chunks that start small and
// double up to 1 MiB, so that a small message costs little and a large one
// is not copied as it grows. Any other error, io.ErrUnexpectedEOF from a
// connection lost inside DATA included, is returned.
func readChunks(r io.Reader) (chunks [][]byte, n int, err error) {
	for size := 4 << 10; ; size = min(2*size, 1<<20) {
		c := make([]byte, size)
		k, eof, err := readFull(r, c)
		if k > 0 {
			chunks = append(chunks, c[:k])
			n += k
		}
		if eof || err != nil {
			return chunks, n, err
		}
	}
}

// budgetReader charges the bytes it reads to the server's in-flight budget.
// It reserves in chunks, and twice what it reads, since the chunks read and
// the array they are copied into are both held for a moment.
type budgetReader struct {
	r        io.Reader
	s        *Server
	reserved int64
	used     int64
	prepaid  int64 // bytes still to read into memory already paid for
}

const budgetChunk = 256 << 10

// take charges n bytes read, twice: the chunks and the array they go to.
func (b *budgetReader) take(n int64) bool { return b.charge(2 * n) }

// prepay charges an array of n bytes allocated before reading; the next n
// bytes read go into it and cost nothing more.
func (b *budgetReader) prepay(n int64) bool {
	if !b.charge(n) {
		return false
	}
	b.prepaid = n
	return true
}

func (b *budgetReader) charge(n int64) bool {
	b.used += n
	for b.used > b.reserved {
		if b.s.inFlight.Add(budgetChunk) > b.s.lim.MaxInFlightBytes {
			b.s.inFlight.Add(-budgetChunk)
			return false
		}
		b.reserved += budgetChunk
	}
	return true
}

func (b *budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		paid := min(int64(n), b.prepaid)
		b.prepaid -= paid
		if !b.take(int64(n) - paid) {
			return 0, errNoMemory
		}
	}
	return n, err
}

func (b *budgetReader) release() {
	b.s.inFlight.Add(-b.reserved)
	b.reserved, b.used, b.prepaid = 0, 0, 0
}

// hasBareEOL reports a CR not followed by LF or an LF not preceded by CR.
// It walks the LFs with IndexByte, which is vectorized (a message is mostly
// long runs between line ends), checks that a CR precedes each, and then
// that there are no other CRs.
func hasBareEOL(b []byte) bool {
	crlf := 0
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			break
		}
		i += j
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		crlf++
		i++
	}
	return bytes.Count(b, []byte{'\r'}) != crlf
}

// countReceived counts Received fields in the header section.
func countReceived(b []byte) int {
	n := 0
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\r\n"))
		if len(line) == 0 {
			break // end of header
		}
		if len(line) > 9 && bytes.EqualFold(line[:8], []byte("received")) {
			rest := bytes.TrimLeft(line[8:], " \t")
			if len(rest) > 0 && rest[0] == ':' {
				n++
			}
		}
	}
	return n
}

// received builds our trace header (RFC 5321 section 4.4). Everything the
// client chose is reduced to safe characters first.
func (ss *session) received() string {
	proto := "ESMTP"
	if ss.lmtp {
		proto = "LMTP"
	} else if ss.utf8 {
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
	if f := ss.fwd; f != nil && (f.Addr != nil || f.Helo != "") {
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
