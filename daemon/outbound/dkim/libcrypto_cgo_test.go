//go:build cgo && linux

package dkim

// idle is how many contexts wait for the next signature.
func (k *libcryptoKey) idle() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.free)
}
