package doctor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/certs"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// checkTLS checks the certificate the daemon serves (the daemon's own
// status hands it over; root's doctor fetches it with STARTTLS from a
// listener) against the file, and its expiry: a renewed file the daemon
// did not take into use is a failure, not an OK read off the file.
func checkTLS(ctx context.Context, f *findings, cfg *config.Config, env Env) {
	if cfg.SMTP.TLSCert == "" {
		f.add("tls.none", Warn, "set smtp.tls_cert and smtp.tls_key (or `mailctl setup --self-signed` on a fresh host)", "no TLS certificate: STARTTLS is not offered and senders deliver in clear text")
		return
	}
	data, err := safeio.ReadInput(cfg.SMTP.TLSCert, certs.MaxChain)
	if err != nil {
		f.add("tls.cert", Fail, "fix smtp.tls_cert in the config", "cannot read the TLS certificate: %v", err)
		return
	}
	blk, _ := pem.Decode(data)
	if blk == nil {
		f.add("tls.cert", Fail, "fix smtp.tls_cert in the config", "%s holds no PEM certificate", cfg.SMTP.TLSCert)
		return
	}
	file, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		f.add("tls.cert", Fail, "fix smtp.tls_cert in the config", "%s: %v", cfg.SMTP.TLSCert, err)
		return
	}
	cert, where := file, "in "+cfg.SMTP.TLSCert
	if served, from, ok := servedCertificate(ctx, f, cfg, env); ok {
		if !bytes.Equal(served.Raw, file.Raw) {
			f.add("tls.served_differs", Fail, protocol.LogsLine("certificate")+" says why the new pair was refused; fix it, then "+protocol.ReloadLine(),
				"the daemon serves %s a certificate (SHA-256 %s, valid until %s) other than the one in %s (SHA-256 %s, valid until %s)",
				from, fingerprint(served), day(served.NotAfter), cfg.SMTP.TLSCert, fingerprint(file), day(file.NotAfter))
		}
		cert, where = served, "served "+from
	}
	now := env.Now()
	switch {
	case now.After(cert.NotAfter):
		f.add("tls.expired", Fail, "renew the certificate, then "+protocol.ReloadLine(), "the TLS certificate %s expired on %s", where, day(cert.NotAfter))
	case cert.NotAfter.Sub(now) < 14*24*time.Hour:
		f.add("tls.expiring", Warn, "renew the certificate, then "+protocol.ReloadLine(), "the TLS certificate %s expires on %s", where, day(cert.NotAfter))
	case cert.VerifyHostname(cfg.Hostname) != nil:
		f.add("tls.hostname", Warn, "get a certificate for "+cfg.Hostname, "the TLS certificate %s does not name %s", where, cfg.Hostname)
	default:
		f.add("tls.cert", OK, "", "TLS certificate for %s valid until %s, %s (SHA-256 %s)", cfg.Hostname, day(cert.NotAfter), where, fingerprint(cert))
	}
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

// fingerprint is the certificate's SHA-256, as certs.Fingerprint and
// `openssl x509 -fingerprint -sha256` name it.
func fingerprint(c *x509.Certificate) string {
	return fmt.Sprintf("%x", sha256.Sum256(c.Raw))
}

// servedCertificate asks env for the served certificate or fetches it with
// STARTTLS from the first SMTP listener that answers. ok is false when
// there is none to compare (no SMTP listener, nothing answers); a listener
// that answers but fails STARTTLS is a finding.
func servedCertificate(ctx context.Context, f *findings, cfg *config.Config, env Env) (cert *x509.Certificate, from string, ok bool) {
	if env.ServedCertificate != nil {
		c, err := env.ServedCertificate(ctx)
		if err != nil || c == nil {
			return nil, "", false
		}
		return c, "by the running daemon", true
	}
	for _, addr := range probeAddrs(cfg) {
		c, err := probeSTARTTLS(ctx, addr, cfg.Hostname)
		if err == nil {
			return c, "on " + addr, true
		}
		if errors.Is(err, errStartTLS) {
			f.add("tls.starttls", Fail, protocol.LogsLine("")+" says why; check smtp.tls_cert and smtp.tls_key",
				"STARTTLS on %s fails: %v", addr, err)
			return nil, "", false
		}
	}
	return nil, "", false
}

// probeAddrs are the configured SMTP listeners as a client on this host
// reaches them: an unspecified address through loopback.
func probeAddrs(cfg *config.Config) []string {
	var out []string
	for _, a := range cfg.SMTP.Listen {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
			if ip != nil && ip.To4() == nil {
				host = "::1"
			}
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out
}

// errStartTLS marks a probe that reached the server but failed at or after
// STARTTLS.
var errStartTLS = errors.New("STARTTLS")

// probeTimeout bounds one probe, from the dial to the QUIT.
const probeTimeout = 5 * time.Second

// probeSMTP opens a session the way a polite client does and ends it with
// QUIT: the daemon logs a probe as an ordinary short session, never a
// connection reset. With startTLS it upgrades the session first and
// returns the certificate the server presented.
func probeSMTP(ctx context.Context, addr, ehlo string, startTLS bool) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	tp := textproto.NewConn(conn)
	if _, _, err := tp.ReadResponse(220); err != nil {
		return nil, fmt.Errorf("greeting: %w", err)
	}
	var cert *x509.Certificate
	if startTLS {
		if _, _, err := probeCmd(tp, 250, "EHLO "+ehlo); err != nil {
			return nil, fmt.Errorf("%w: EHLO: %v", errStartTLS, err)
		}
		if _, _, err := probeCmd(tp, 220, "STARTTLS"); err != nil {
			return nil, fmt.Errorf("%w: %v", errStartTLS, err)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: ehlo, InsecureSkipVerify: true}) // compared, not verified
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("%w: handshake: %v", errStartTLS, err)
		}
		cert = tc.ConnectionState().PeerCertificates[0]
		defer tc.Close()
		tp = textproto.NewConn(tc)
	}
	probeCmd(tp, 221, "QUIT")
	return cert, nil
}

func probeSTARTTLS(ctx context.Context, addr, ehlo string) (*x509.Certificate, error) {
	return probeSMTP(ctx, addr, ehlo, true)
}

func probeCmd(tp *textproto.Conn, want int, cmd string) (int, string, error) {
	if err := tp.PrintfLine("%s", cmd); err != nil {
		return 0, "", err
	}
	code, msg, err := tp.ReadResponse(want)
	return code, strings.TrimSpace(msg), err
}
