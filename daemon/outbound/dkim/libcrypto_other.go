//go:build !(cgo && linux)

package dkim

import (
	"crypto/rsa"
	"errors"
)

// libcryptoKey is unavailable without cgo: RSA keys sign with crypto/rsa.
type libcryptoKey struct{}

func newLibcryptoKey(*rsa.PrivateKey) (*libcryptoKey, error) {
	return nil, errors.New("built without cgo")
}

func (*libcryptoKey) sign([]byte) ([]byte, error) { return nil, errors.New("built without cgo") }

func (*libcryptoKey) close() {}
