package dkim

import (
	"testing"
)

// BenchmarkSign compares the two key types on a composed message of about
// 2 kB: the Ed25519 and the RSA-2048 signature alone, and both side by side
// as the daemon signs; RSA through libcrypto where the host has it (see
// rsasigner.go), and through Go's crypto/rsa. The signature itself is a
// fixed cost; the body hash grows with the message. Run:
// go test ./daemon/outbound/dkim -run '^$' -bench Sign
func BenchmarkSign(b *testing.B) {
	keys := testKeys(b)
	raw := signedTestMessage(b) // a real composed message; its own signatures are just more header lines
	goRSA := &Key{Selector: keys[1].Selector, Algorithm: "rsa", Signer: keys[1].Signer}
	goRSA.fastOnce.Do(func() { goRSA.fast = goRSA.Signer })
	rsaName := "rsa2048-" + keys[1].Backend()
	seen := map[string]bool{}
	for _, c := range []struct {
		name string
		keys []*Key
	}{{"ed25519", keys[:1]}, {rsaName, keys[1:]}, {"both-" + keys[1].Backend(), keys}, {"rsa2048-go", []*Key{goRSA}}, {"both-go", []*Key{keys[0], goRSA}}} {
		if seen[c.name] { // no libcrypto here: the first rows are Go's already
			continue
		}
		seen[c.name] = true
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
