// Package smtpin receives mail: an SMTP server for the internet and an LMTP
// server for a fronting MTA, both on go-smtp, with the limits a public
// listener needs (sizes, recipients, line length, per-command and
// whole-session deadlines, connection caps, error caps, a Received loop
// guard) and strict DATA framing so that no message can be split or merged
// by odd line endings (SMTP smuggling).
//
// Routing, authentication checks and storage are the Backend's job.
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
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/logsum"
)

// Envelope is what the SMTP transaction said about a message.
type Envelope struct {
	RemoteIP   net.IP // nil for LMTP over a Unix socket
	Helo       string
	MailFrom   string // "" for the null reverse-path (bounces)
	Rcpts      []string
	TLS        bool
	TLSVersion string // e.g. "TLS1.3"
	// Forwarded is what a front MTA said about its client (LMTP with
	// XFORWARD); RemoteIP and Helo are then that client's.
	Forwarded *Forwarded
	// Screen is what the Screener said about the client at connect (SMTP
	// only): the lists that listed it, and whether its mail goes to junk.
	Screen Screening
	// Session names the connection in the server's log lines, so the one
	// line a stored message gets can be tied to its session.
	Session string
}

// Headroom is the room left before every message read from SMTP or LMTP,
// enough for an Authentication-Results header.
const Headroom = 1024

// Backend decides who may receive mail and stores it.
type Backend interface {
	// CheckRecipient is called at RCPT TO (address as given, without <>).
	// Return nil to accept, or an *smtp.SMTPError (e.g. 550 5.7.1 relaying
	// denied, 550 5.1.1 no such user) to refuse. Any other error is
	// answered with 451 4.3.0.
	CheckRecipient(ctx context.Context, rcpt string) error
	// Deliver must make the message durable for every accepted recipient
	// before returning. It returns one error per env.Rcpts entry (nil =
	// stored). msg is the message as received, with our Received header
	// already prepended; it is the server's again once Deliver returns.
	Deliver(ctx context.Context, env Envelope, msg *Message) []error
}

// Screener judges an SMTP client at connect, before the greeting (DNS
// block- and allow-lists). It must return within its own deadline; the
// greeting waits for it.
type Screener interface {
	Screen(ctx context.Context, ip net.IP) Screening
}

// Screening is a Screener's verdict on a client.
type Screening struct {
	// Refuse, when set, is the text of the 554 5.7.1 the client gets
	// instead of the greeting; the connection is then closed.
	Refuse string
	// Listed says what the lists answered, for the stored message.
	Listed []string
	// Junk, when set, sends every message of the session to the junk
	// folder; it says why.
	Junk string
}

// Limits bounds what one client can make the server do. Zero fields take
// the defaults from DefaultLimits.
type Limits struct {
	MaxMessageBytes     int64         // 25 MiB; larger messages get 552 5.3.4
	MaxRecipients       int           // 100 per message; more get 452 4.5.3
	MaxLineLength       int           // 4096 bytes per command or DATA line
	CommandTimeout      time.Duration // 5m for each read or write
	SessionTimeout      time.Duration // 30m for the whole connection, NOOP or not
	MaxConnections      int           // 500 open at once in total
	MaxConnectionsPerIP int           // 20 open at once from one IP
	MaxErrors           int           // 10 refused commands, then 421 and close
	MaxReceivedHeaders  int           // 50; more means a mail loop: 554 5.4.6
	// MaxInFlightBytes bounds the message bytes held in memory by all
	// sessions together (512 MiB); past it DATA gets 452 4.3.1 and the
	// client retries later. Without it, MaxConnections clients each sending
	// messages of SpoolOver bytes could exhaust memory. Larger messages
	// are spooled as they arrive and hold SpoolOver bytes at most.
	MaxInFlightBytes int64
}

// DefaultLimits are the documented defaults: daemon/config's for [smtp]
// (the one place they are written) and the in-flight budget, which is not a
// config key.
var DefaultLimits = func() Limits {
	l := LimitsFrom(config.Default().SMTP)
	l.MaxInFlightBytes = 512 << 20
	return l
}()

// LimitsFrom takes the limits of an [smtp] table.
func LimitsFrom(s config.SMTP) Limits {
	return Limits{MaxMessageBytes: s.MaxMessageBytes, MaxRecipients: s.MaxRecipients, MaxLineLength: s.MaxLineLength,
		CommandTimeout: s.CommandTimeout.Duration, SessionTimeout: s.SessionTimeout.Duration, MaxConnections: s.MaxConnections,
		MaxConnectionsPerIP: s.MaxConnectionsPerIP, MaxErrors: s.MaxErrors, MaxReceivedHeaders: s.MaxReceivedHeaders}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	orDefault(&l.MaxMessageBytes, d.MaxMessageBytes)
	orDefault(&l.MaxRecipients, d.MaxRecipients)
	orDefault(&l.MaxLineLength, d.MaxLineLength)
	orDefault(&l.CommandTimeout, d.CommandTimeout)
	orDefault(&l.SessionTimeout, d.SessionTimeout)
	orDefault(&l.MaxConnections, d.MaxConnections)
	orDefault(&l.MaxConnectionsPerIP, d.MaxConnectionsPerIP)
	orDefault(&l.MaxErrors, d.MaxErrors)
	orDefault(&l.MaxReceivedHeaders, d.MaxReceivedHeaders)
	orDefault(&l.MaxInFlightBytes, d.MaxInFlightBytes)
	return l
}

// orDefault sets *v to d when *v is zero or negative (unset).
func orDefault[T ~int | ~int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Config configures a Server.
type Config struct {
	Hostname string      // our name in the greeting and Received; default os.Hostname
	Limits   Limits      // zero fields take DefaultLimits
	TLS      *tls.Config // nil = no STARTTLS
	Logger   *slog.Logger
	// XForwardUIDs may use XFORWARD on the LMTP socket to pass on their own
	// client's address, name and HELO (root may too); see xforward.go.
	XForwardUIDs []uint32
	// LMTPAllowFrom are the networks of the front MTAs that may use LMTP
	// over TCP (lmtp.allow_from): a TCP LMTP connection from any other
	// address is refused at connect with 554. Those that are let in may use
	// XFORWARD, and one front carrying everyone's mail is not held to
	// MaxConnectionsPerIP (it still counts against MaxConnections).
	LMTPAllowFrom []netip.Prefix
	// Summarizer, when set, counts repeated refusals from one address
	// instead of logging each; its owner flushes the counts.
	Summarizer *logsum.Summarizer
	// Screener, when set, judges each SMTP client before the greeting.
	Screener Screener
	// PregreetWait holds the SMTP greeting back this long; a client that
	// talks before it (pregreet) is refused. During a Screener's lookups
	// the same check runs whatever the wait. Zero: no wait.
	PregreetWait time.Duration
}

// Server is an SMTP and LMTP receiver sharing one backend and one set of
// connection limits.
type Server struct {
	cfg      Config
	lim      Limits
	b        Backend
	log      *slog.Logger
	smtp     *smtp.Server
	lmtp     *smtp.Server
	inFlight atomic.Int64 // message bytes held by all sessions

	mu    sync.Mutex
	total int
	perIP map[string]int

	// The listeners being served, and whether Shutdown has begun: a
	// listener handed to Serve after Shutdown began is closed at once
	// instead of being served forever.
	lmu       sync.Mutex
	listeners map[net.Listener]bool
	closing   bool
}

// NewServer returns a server; start it with ServeSMTP and/or ServeLMTP.
func NewServer(cfg Config, b Backend) *Server {
	if cfg.Hostname == "" {
		h, _ := os.Hostname()
		cfg.Hostname = cmp.Or(h, "localhost")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	s := &Server{
		cfg:       cfg,
		lim:       cfg.Limits.withDefaults(),
		b:         b,
		log:       cfg.Logger,
		perIP:     map[string]int{},
		listeners: map[net.Listener]bool{},
	}
	s.smtp = s.newSMTP(false)
	s.lmtp = s.newSMTP(true)
	return s
}

// summarize says whether to log a line of kind key now and how many of its
// kind were counted since (see Config.Summarizer).
func (s *Server) summarize(key string) (bool, int) {
	if s.cfg.Summarizer == nil {
		return true, 0
	}
	return s.cfg.Summarizer.Allow(key)
}

func (s *Server) newSMTP(lmtp bool) *smtp.Server {
	gs := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return s.newSession(c, lmtp)
	}))
	gs.LMTP = lmtp
	gs.Domain = s.cfg.Hostname
	gs.MaxRecipients = s.lim.MaxRecipients
	// go-smtp advertises this limit in EHLO, checks a declared SIZE and
	// BDAT against it, and its DATA reader refuses a message of exactly
	// the limit (it stops before it sees the terminator): a DATA message
	// takes one byte less (docs/go-smtp.md, point 5). The EHLO reply
	// cannot be rewritten to say otherwise: after STARTTLS it is encrypted
	// above the connection mailctl wraps.
	gs.MaxMessageBytes = s.lim.MaxMessageBytes
	gs.MaxLineLength = s.lim.MaxLineLength
	gs.ReadTimeout = s.lim.CommandTimeout
	gs.WriteTimeout = s.lim.CommandTimeout
	gs.EnableSMTPUTF8 = true
	gs.ErrorLog = errorLog{s.log}
	if !lmtp {
		gs.TLSConfig = s.cfg.TLS
	}
	return gs
}

// mayForward reports whether an LMTP peer with uid may use XFORWARD.
func (s *Server) mayForward(uid uint32) bool {
	return uid == 0 || slices.Contains(s.cfg.XForwardUIDs, uid)
}

// ServeSMTP accepts SMTP connections on l until Shutdown.
func (s *Server) ServeSMTP(l net.Listener) error {
	return s.serve(s.smtp, l, "smtp")
}

// ServeLMTP accepts LMTP connections on l until Shutdown: a Unix socket
// (peers told apart by uid) or a TCP listener (peers must be in
// LMTPAllowFrom). Replies to DATA are per recipient.
func (s *Server) ServeLMTP(l net.Listener) error {
	return s.serve(s.lmtp, l, "lmtp")
}

func (s *Server) serve(gs *smtp.Server, l net.Listener, proto string) error {
	s.lmu.Lock()
	if s.closing {
		s.lmu.Unlock()
		l.Close()
		return nil
	}
	s.listeners[l] = true
	s.lmu.Unlock()
	defer func() {
		s.lmu.Lock()
		delete(s.listeners, l)
		s.lmu.Unlock()
	}()
	return ignoreClosed(gs.Serve(&limitListener{Listener: l, s: s, proto: proto}))
}

// ignoreClosed drops the errors that only say the server was closed.
func ignoreClosed(err error) error {
	if errors.Is(err, smtp.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// mayConnectLMTP reports whether a TCP peer is one of the front MTAs.
func (s *Server) mayConnectLMTP(ip net.IP) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	a = a.Unmap()
	return slices.ContainsFunc(s.cfg.LMTPAllowFrom, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Shutdown stops accepting, lets sessions finish until ctx ends, then closes
// whatever is left; it returns ctx's error only when sessions were cut.
func (s *Server) Shutdown(ctx context.Context) error {
	// Close every listener now, including one whose Serve has not yet
	// registered it with go-smtp (its Shutdown would miss that one, and
	// the Serve would then accept forever), and refuse later ones.
	s.lmu.Lock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	s.lmu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	cut := make([]bool, 2)
	for i, gs := range []*smtp.Server{s.smtp, s.lmtp} {
		wg.Go(func() {
			err := gs.Shutdown(ctx)
			if err != nil && ctx.Err() != nil {
				// ctx ended first (or as the last session did: go-smtp
				// may then say either): sessions still open are cut.
				cut[i] = s.open() > 0
				err = gs.Close()
			}
			errs[i] = ignoreClosed(err)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("smtpin: shutdown: %w", err)
	}
	if cut[0] || cut[1] {
		return fmt.Errorf("smtpin: shutdown: sessions cut: %w", ctx.Err())
	}
	return nil
}

// open is how many connections are open.
func (s *Server) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// errorLog adapts go-smtp's internal error log to slog. A client that
// hangs up mid-session (a reset, a broken pipe: port probes, scanners,
// impatient senders) is the client's business: that is DEBUG, so WARN stays
// for what an operator should look at; the session's own INFO line
// ("connection closed") still records it.
type errorLog struct{ l *slog.Logger }

func (e errorLog) Printf(format string, v ...any) {
	e.l.Log(context.Background(), level(v), "smtp server", "detail", fmt.Sprintf(format, v...))
}

func (e errorLog) Println(v ...any) {
	e.l.Log(context.Background(), level(v), "smtp server", "detail", fmt.Sprint(v...))
}

func level(v []any) slog.Level {
	for _, a := range v {
		if err, ok := a.(error); ok && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)) {
			return slog.LevelDebug
		}
	}
	return slog.LevelWarn
}

func smtpErr(code int, enh smtp.EnhancedCode, msg string) *smtp.SMTPError {
	return &smtp.SMTPError{Code: code, EnhancedCode: enh, Message: msg}
}

var (
	errTempFailure   = smtpErr(451, smtp.EnhancedCode{4, 3, 0}, "Temporary failure, please try again later")
	errTooBig        = smtpErr(552, smtp.EnhancedCode{5, 3, 4}, "Message too big")
	errTooManyRcpts  = smtpErr(452, smtp.EnhancedCode{4, 5, 3}, "Too many recipients")
	errBadSender     = smtpErr(501, smtp.EnhancedCode{5, 1, 7}, "Bad sender address syntax: no control characters, surrounding spaces or leading dash")
	errBadRcpt       = smtpErr(501, smtp.EnhancedCode{5, 1, 3}, "Bad recipient address syntax: no control characters, surrounding spaces or leading dash")
	errNeedsSMTPUTF8 = smtpErr(553, smtp.EnhancedCode{5, 6, 7}, "Address outside ASCII: give MAIL FROM the SMTPUTF8 parameter")
	errLoop          = smtpErr(554, smtp.EnhancedCode{5, 4, 6}, "Too many Received headers: mail loop")
	errBareEOL       = smtpErr(554, smtp.EnhancedCode{5, 6, 0}, "Bare CR or LF in message: lines must end with CRLF")
	errEmpty         = smtpErr(554, smtp.EnhancedCode{5, 6, 0}, "Empty message")
	errTooManyErrs   = smtpErr(421, smtp.EnhancedCode{4, 7, 0}, "Too many errors, closing connection")
	errLineTooLong   = smtpErr(500, smtp.EnhancedCode{5, 4, 0}, "Line too long, closing connection")
	errReadTimeout   = smtpErr(421, smtp.EnhancedCode{4, 4, 2}, "Timeout, closing connection")
	errNoMemory      = smtpErr(452, smtp.EnhancedCode{4, 3, 1}, "Insufficient system resources, try again later")
	errAborted       = smtpErr(451, smtp.EnhancedCode{4, 3, 0}, "Message transfer aborted, please try again")
)
