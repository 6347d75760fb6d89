package dkim

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"io"
	"os"
	"runtime"
)

// An RSA-2048 signature costs about 1.1 ms of CPU in Go's constant-time
// crypto/rsa, about half the CPU of sending a message, and about 0.3 ms in
// the host's libcrypto (OpenSSL 3; docs/benchmarks.md). So the daemon
// signs RSA through libcrypto when the host has it. PKCS#1 v1.5
// signatures are deterministic: both give the same bytes for the same key
// and digest, and a key goes through libcrypto only after one signature
// made both ways matched. Anything else (no cgo, no libcrypto.so.3,
// MAILCTL_DKIM_LIBCRYPTO=0, a mismatch) signs with crypto/rsa.

// LibcryptoEnv names the environment variable that, set to 0, keeps RSA
// signing in Go's crypto/rsa.
const LibcryptoEnv = "MAILCTL_DKIM_LIBCRYPTO"

// maxIdleContexts bounds the libcrypto signing contexts a key keeps between
// signatures; more concurrent signatures make (and then free) their own.
const maxIdleContexts = 8

// rsaSigner signs SHA-256 digests with libcrypto and everything else with
// the Go key.
type rsaSigner struct {
	priv *rsa.PrivateKey
	lc   *libcryptoKey
}

func (s *rsaSigner) Public() crypto.PublicKey { return s.priv.Public() }

func (s *rsaSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if _, pss := opts.(*rsa.PSSOptions); !pss && opts.HashFunc() == crypto.SHA256 && len(digest) == sha256.Size {
		if sig, err := s.lc.sign(digest); err == nil {
			return sig, nil
		}
	}
	return s.priv.Sign(r, digest, opts)
}

// fastSigner is the signer the daemon uses for s: s itself unless it is an
// RSA key libcrypto signs identically.
func fastSigner(s crypto.Signer) crypto.Signer {
	priv, ok := s.(*rsa.PrivateKey)
	if !ok || os.Getenv(LibcryptoEnv) == "0" {
		return s
	}
	lc, err := newLibcryptoKey(priv)
	if err != nil {
		return s
	}
	fast := &rsaSigner{priv: priv, lc: lc}
	runtime.AddCleanup(fast, func(lc *libcryptoKey) { lc.close() }, lc)
	if !sameSignature(fast, priv) {
		return s
	}
	return fast
}

// sameSignature signs one digest with libcrypto and with crypto/rsa.
func sameSignature(fast *rsaSigner, priv *rsa.PrivateKey) bool {
	digest := sha256.Sum256([]byte("mailctl: libcrypto and crypto/rsa agree"))
	got, err := fast.lc.sign(digest[:])
	if err != nil {
		return false
	}
	want, err := rsa.SignPKCS1v15(nil, priv, crypto.SHA256, digest[:])
	return err == nil && bytes.Equal(got, want)
}

// Backend names what signs with k: "libcrypto" or "go".
func (k *Key) Backend() string {
	if _, ok := k.signer().(*rsaSigner); ok {
		return "libcrypto"
	}
	return "go"
}
