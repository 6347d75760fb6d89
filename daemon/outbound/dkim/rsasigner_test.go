package dkim

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
)

// requireLibcrypto skips where the host cannot sign through libcrypto.
func requireLibcrypto(t testing.TB) {
	t.Helper()
	if _, err := newLibcryptoKey(testRSAKey(t, 1024)); err != nil {
		t.Skipf("no libcrypto signing here (%v): RSA signs with crypto/rsa", err)
	}
}

var rsaKeys sync.Map // bits -> *rsa.PrivateKey

func testRSAKey(t testing.TB, bits int) *rsa.PrivateKey {
	t.Helper()
	if k, ok := rsaKeys.Load(bits); ok {
		return k.(*rsa.PrivateKey)
	}
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	rsaKeys.Store(bits, k)
	return k
}

// TestLibcryptoSignsLikeGo: for every key size DKIM meets and many digests,
// the libcrypto signature is byte for byte the crypto/rsa one, from
// concurrent signers sharing one key (and its contexts).
func TestLibcryptoSignsLikeGo(t *testing.T) {
	requireLibcrypto(t)
	for _, bits := range []int{1024, 2048, 3072, 4096} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			priv := testRSAKey(t, bits)
			s, ok := fastSigner(priv).(*rsaSigner)
			if !ok {
				t.Fatalf("a %d-bit key does not sign through libcrypto", bits)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 2*maxIdleContexts)
			for g := range 2 * maxIdleContexts {
				wg.Go(func() {
					for i := range 8 {
						d := sha256.Sum256(fmt.Appendf(nil, "message %d of signer %d", i, g))
						got, err := s.Sign(rand.Reader, d[:], crypto.SHA256)
						if err != nil {
							errs <- err
							return
						}
						want, _ := rsa.SignPKCS1v15(nil, priv, crypto.SHA256, d[:])
						if !bytes.Equal(got, want) {
							errs <- fmt.Errorf("signature %d of signer %d differs from crypto/rsa's", i, g)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := s.lc.idle(); n > maxIdleContexts {
				t.Errorf("%d idle contexts kept, at most %d", n, maxIdleContexts)
			}
		})
	}
}

// TestRSASignerFallsBackToGo: what libcrypto is not asked to do (PSS, other
// hashes) is signed by crypto/rsa and verifies.
func TestRSASignerFallsBackToGo(t *testing.T) {
	requireLibcrypto(t)
	priv := testRSAKey(t, 2048)
	s := fastSigner(priv)
	d := sha256.Sum256([]byte("pss"))
	pss := &rsa.PSSOptions{Hash: crypto.SHA256}
	sig, err := s.Sign(rand.Reader, d[:], pss)
	if err != nil {
		t.Fatal(err)
	}
	if err := rsa.VerifyPSS(&priv.PublicKey, crypto.SHA256, d[:], sig, pss); err != nil {
		t.Fatalf("PSS signature does not verify: %v", err)
	}
	d384 := crypto.SHA384.New()
	d384.Write([]byte("sha384"))
	sig, err = s.Sign(rand.Reader, d384.Sum(nil), crypto.SHA384)
	if err != nil {
		t.Fatal(err)
	}
	if err := rsa.VerifyPKCS1v15(&priv.PublicKey, crypto.SHA384, d384.Sum(nil), sig); err != nil {
		t.Fatalf("SHA-384 signature does not verify: %v", err)
	}
}

// TestLibcryptoCanBeTurnedOff: MAILCTL_DKIM_LIBCRYPTO=0 keeps RSA in Go, and
// an Ed25519 key never goes to libcrypto.
func TestLibcryptoCanBeTurnedOff(t *testing.T) {
	keys := testKeys(t)
	t.Setenv(LibcryptoEnv, "0")
	rsaKey := testRSAKey(t, 2048)
	if _, ok := fastSigner(rsaKey).(*rsa.PrivateKey); !ok {
		t.Fatalf("%s=0 still signs through libcrypto", LibcryptoEnv)
	}
	if got := keys[0].Backend(); keys[0].Algorithm != "ed25519" || got != "go" {
		t.Fatalf("Ed25519 key %s: backend %q, want go", keys[0].Selector, got)
	}
}

// TestDaemonKeysSignThroughLibcrypto: a key loaded from its file, as the
// daemon loads it, signs through libcrypto and its mail verifies.
func TestDaemonKeysSignThroughLibcrypto(t *testing.T) {
	requireLibcrypto(t)
	keys := testKeys(t)
	if got := keys[1].Backend(); keys[1].Algorithm != "rsa" || got != "libcrypto" {
		t.Fatalf("RSA key %s: backend %q, want libcrypto", keys[1].Selector, got)
	}
	vs := goVerify(t, signedTestMessage(t), txtRecords("example.com", keys))
	if len(vs) != 2 {
		t.Fatalf("%d signatures, want 2", len(vs))
	}
	for _, v := range vs {
		if v.Err != nil {
			t.Errorf("signature %s does not verify: %v", v.Domain, v.Err)
		}
	}
}

// TestLibcryptoMismatchIsRefused: a libcrypto key that does not sign as
// the Go key does (here, another key) fails the check that decides whether
// libcrypto signs for it.
func TestLibcryptoMismatchIsRefused(t *testing.T) {
	requireLibcrypto(t)
	a, b := testRSAKey(t, 1024), testRSAKey(t, 2048)
	lc, err := newLibcryptoKey(a)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.close()
	if sameSignature(&rsaSigner{priv: b, lc: lc}, b) {
		t.Fatal("a libcrypto key that signs as another key passed the check")
	}
	if !sameSignature(&rsaSigner{priv: a, lc: lc}, a) {
		t.Fatal("the matching key failed the check")
	}
}
