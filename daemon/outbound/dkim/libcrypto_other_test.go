//go:build !(cgo && linux)

package dkim

func (*libcryptoKey) idle() int { return 0 }
