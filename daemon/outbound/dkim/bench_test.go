package dkim

import (
	"testing"
)

// BenchmarkSign compares the two key types on a composed message of about
// 2 kB: the Ed25519 and the RSA-2048 signature alone (Go's crypto/ed25519
// and crypto/rsa), and both side by side as the daemon signs. The signature
// itself is a fixed cost; the body hash grows with the message. Run:
// go test ./daemon/outbound/dkim -run '^$' -bench Sign
func BenchmarkSign(b *testing.B) {
	keys := testKeys(b)
	raw := signedTestMessage(b) // a real composed message; its own signatures are just more header lines
	for _, c := range []struct {
		name string
		keys []*Key
	}{{"ed25519", keys[:1]}, {"rsa2048", keys[1:]}, {"both", keys}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for i := 0; i < b.N; i++ {
				if _, err := Sign(raw, "example.com", c.keys); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
