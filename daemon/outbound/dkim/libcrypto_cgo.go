//go:build cgo && linux

package dkim

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

// The few libcrypto (OpenSSL 3) entry points an RSA PKCS#1 v1.5 signature
// needs, found with dlsym: no OpenSSL headers or library at build time, and
// a host without libcrypto signs with Go's crypto/rsa instead.
typedef void *(*d2i_fn)(int, void **, const unsigned char **, long);
typedef void *(*ctx_new_fn)(void *, void *);
typedef int (*ctx_int_fn)(void *, int);
typedef int (*ctx_fn)(void *);
typedef const void *(*md_fn)(void);
typedef int (*ctx_md_fn)(void *, const void *);
typedef int (*sign_fn)(void *, unsigned char *, size_t *, const unsigned char *, size_t);
typedef void (*free_fn)(void *);

static struct {
	d2i_fn d2i_PrivateKey;
	ctx_new_fn EVP_PKEY_CTX_new;
	ctx_fn EVP_PKEY_sign_init;
	ctx_int_fn EVP_PKEY_CTX_set_rsa_padding;
	md_fn EVP_sha256;
	ctx_md_fn EVP_PKEY_CTX_set_signature_md;
	sign_fn EVP_PKEY_sign;
	free_fn EVP_PKEY_CTX_free;
	free_fn EVP_PKEY_free;
} lc;

static int lc_open(void) {
	void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
	if (!h) return 0;
#define LC_SYM(name) if (!(*(void **)&lc.name = dlsym(h, #name))) return 0;
	LC_SYM(d2i_PrivateKey)
	LC_SYM(EVP_PKEY_CTX_new)
	LC_SYM(EVP_PKEY_sign_init)
	LC_SYM(EVP_PKEY_CTX_set_rsa_padding)
	LC_SYM(EVP_sha256)
	LC_SYM(EVP_PKEY_CTX_set_signature_md)
	LC_SYM(EVP_PKEY_sign)
	LC_SYM(EVP_PKEY_CTX_free)
	LC_SYM(EVP_PKEY_free)
#undef LC_SYM
	return 1;
}

// lc_key parses a PKCS#1 RSAPrivateKey (EVP_PKEY_RSA is 6).
static void *lc_key(const unsigned char *der, long len) {
	const unsigned char *p = der;
	return lc.d2i_PrivateKey(6, NULL, &p, len);
}

// lc_ctx is a signing context for key: PKCS#1 v1.5 padding, SHA-256.
static void *lc_ctx(void *key) {
	void *ctx = lc.EVP_PKEY_CTX_new(key, NULL);
	if (!ctx) return NULL;
	if (lc.EVP_PKEY_sign_init(ctx) <= 0 || lc.EVP_PKEY_CTX_set_rsa_padding(ctx, 1) <= 0 ||
	    lc.EVP_PKEY_CTX_set_signature_md(ctx, lc.EVP_sha256()) <= 0) {
		lc.EVP_PKEY_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

static int lc_sign(void *ctx, unsigned char *sig, size_t *siglen, const unsigned char *digest, size_t n) {
	return lc.EVP_PKEY_sign(ctx, sig, siglen, digest, n);
}

static void lc_ctx_free(void *ctx) { lc.EVP_PKEY_CTX_free(ctx); }
static void lc_key_free(void *key) { lc.EVP_PKEY_free(key); }
*/
import "C"

import (
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"sync"
	"unsafe"
)

var libcryptoOpen = sync.OnceValue(func() bool { return C.lc_open() == 1 })

// libcryptoKey is one RSA key held by libcrypto, with a small free list of
// signing contexts (a context is used by one signature at a time).
type libcryptoKey struct {
	key  unsafe.Pointer
	size int
	mu   sync.Mutex
	free []unsafe.Pointer
}

func newLibcryptoKey(priv *rsa.PrivateKey) (*libcryptoKey, error) {
	if !libcryptoOpen() {
		return nil, errors.New("libcrypto.so.3 not found")
	}
	der := x509.MarshalPKCS1PrivateKey(priv)
	defer clear(der)
	key := C.lc_key((*C.uchar)(unsafe.Pointer(&der[0])), C.long(len(der)))
	if key == nil {
		return nil, errors.New("libcrypto refused the key")
	}
	return &libcryptoKey{key: key, size: priv.Size()}, nil
}

// sign returns the PKCS#1 v1.5 signature of a SHA-256 digest.
func (k *libcryptoKey) sign(digest []byte) ([]byte, error) {
	k.mu.Lock()
	var ctx unsafe.Pointer
	if n := len(k.free); n > 0 {
		ctx, k.free = k.free[n-1], k.free[:n-1]
	}
	k.mu.Unlock()
	if ctx == nil {
		if ctx = C.lc_ctx(k.key); ctx == nil {
			return nil, errors.New("libcrypto: no signing context")
		}
	}
	sig := make([]byte, k.size)
	n := C.size_t(len(sig))
	ok := C.lc_sign(ctx, (*C.uchar)(unsafe.Pointer(&sig[0])), &n, (*C.uchar)(unsafe.Pointer(&digest[0])), C.size_t(len(digest))) == 1
	k.mu.Lock()
	if len(k.free) < maxIdleContexts {
		k.free = append(k.free, ctx)
		ctx = nil
	}
	k.mu.Unlock()
	if ctx != nil {
		C.lc_ctx_free(ctx)
	}
	if !ok || int(n) != len(sig) {
		return nil, errors.New("libcrypto: signing failed")
	}
	return sig, nil
}

// close frees the key and its idle contexts; no signature may be running.
func (k *libcryptoKey) close() {
	for _, ctx := range k.free {
		C.lc_ctx_free(ctx)
	}
	k.free = nil
	C.lc_key_free(k.key)
}
