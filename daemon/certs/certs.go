// Package certs serves the daemon's TLS certificate from its files and puts
// a renewed pair into use for the next handshake, without a restart and
// without touching connections already up.
//
// The key is read as a secret (safeio.ReadSecret), the certificate chain
// bounded. Every handshake looks at the two files' stamps (device, inode,
// size, modification and change times: two stat calls, a few microseconds
// beside the milliseconds of a handshake) and loads the pair again when a
// stamp moved; a reload loads it whatever the stamps say. Checking on the
// handshake needs no goroutine or timer and leaves no window in which a
// renewed certificate sits unused: certbot's files replaced at 03:00 are
// what the 03:00:01 connection gets. A new pair that does not load (the key
// does not match, a file is missing or unreadable, the certificate has
// expired, the key breaks the secret rule) is refused with one log line per
// change of the files, and the pair in use stays. Expiry is judged by the
// clock: a pair refused as expired while the clock was ahead is loaded again
// at the first handshake after the clock says it is valid.
package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
)

// MaxChain bounds the certificate file: a leaf and its intermediates in PEM
// are a few KiB.
const MaxChain = 1 << 20

// LoadPair reads a PEM certificate chain and its private key and checks
// that they belong together.
func LoadPair(certFile, keyFile string) (tls.Certificate, error) {
	keyPEM, err := safeio.ReadSecret(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("smtp.tls_key: %w", err)
	}
	certPEM, err := readChain(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("smtp.tls_cert: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("smtp.tls_cert %s and smtp.tls_key %s: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("smtp.tls_cert %s: %w", certFile, err)
		}
	}
	return pair, nil
}

func readChain(path string) ([]byte, error) {
	b, err := safeio.ReadInput(path, MaxChain)
	if errors.Is(err, safeio.ErrTooLarge) {
		return nil, fmt.Errorf("%s is larger than %d KiB: point smtp.tls_cert at the PEM certificate chain", path, MaxChain>>10)
	}
	return b, err
}

// Fingerprint is the SHA-256 of a certificate, in hex: how logs and doctor
// name a certificate.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// Holder holds the pair in use and replaces it when its files change.
type Holder struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	cur  atomic.Pointer[tls.Certificate]
	seen atomic.Pointer[stamp] // the files when the pair in use, or a refused one, was read
	// expired is the end of the pair last refused as expired, while its
	// files stay as they were (nil: none was). Expiry is judged by the
	// clock, which may have been ahead: once it says the pair is valid,
	// the next handshake loads it again.
	expired atomic.Pointer[time.Time]
	mu      sync.Mutex // one load at a time
}

// NewHolder loads the pair; the daemon does not start without one. now is
// the clock expiry is judged by (nil: time.Now).
func NewHolder(certFile, keyFile string, log *slog.Logger, now func() time.Time) (*Holder, error) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Holder{certFile: certFile, keyFile: keyFile, log: log, now: now}
	st := h.stamp()
	pair, err := LoadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	h.cur.Store(&pair)
	h.seen.Store(&st)
	return h, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, loaded
// again first when its files changed.
func (h *Holder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	h.refresh(false)
	return h.cur.Load(), nil
}

// Current is the pair in use now, without looking at the files.
func (h *Holder) Current() *tls.Certificate { return h.cur.Load() }

// Reload loads the pair from its files whatever their stamps say (SIGHUP,
// `systemctl reload`). A pair that does not load is refused and returned;
// the one in use stays.
func (h *Holder) Reload() error { return h.refresh(true) }

func (h *Holder) refresh(force bool) error {
	st := h.stamp()
	if !force && st == *h.seen.Load() && !h.validAgain() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !force && st == *h.seen.Load() && !h.validAgain() {
		return nil // another handshake loaded it meanwhile
	}
	// The stamp is taken before reading: files that change during the
	// read have another stamp by the next handshake, which reads again.
	h.seen.Store(&st)
	h.expired.Store(nil)
	old := h.cur.Load()
	pair, err := LoadPair(h.certFile, h.keyFile)
	if err == nil && h.now().After(pair.Leaf.NotAfter) {
		err = fmt.Errorf("smtp.tls_cert %s expired on %s", h.certFile, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
		end := pair.Leaf.NotAfter
		h.expired.Store(&end)
	}
	if err != nil {
		h.log.Error("new TLS certificate refused; the one in use stays", "err", err,
			"in_use", Fingerprint(old.Leaf), "in_use_not_after", old.Leaf.NotAfter.UTC().Format(time.RFC3339))
		return err
	}
	if bytes.Equal(pair.Leaf.Raw, old.Leaf.Raw) {
		return nil
	}
	h.cur.Store(&pair)
	h.log.Info("TLS certificate now in use", "subject", pair.Leaf.Subject.CommonName, "fingerprint", Fingerprint(pair.Leaf),
		"not_after", pair.Leaf.NotAfter.UTC().Format(time.RFC3339), "replaces", Fingerprint(old.Leaf))
	return nil
}

// validAgain says whether the pair last refused as expired is valid by
// the clock now: the clock was ahead when it was refused.
func (h *Holder) validAgain() bool {
	end := h.expired.Load()
	return end != nil && !h.now().After(*end)
}

// stamp is what tells two versions of the files apart without reading
// them. The key is looked at without following a link, as it is read.
type stamp struct{ cert, key fileStamp }

type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
	missing      bool
}

func (h *Holder) stamp() stamp {
	return stamp{cert: stampOf(os.Stat(h.certFile)), key: stampOf(os.Lstat(h.keyFile))}
}

func stampOf(fi os.FileInfo, err error) fileStamp {
	if err != nil {
		return fileStamp{missing: true}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	}
	return fileStamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
