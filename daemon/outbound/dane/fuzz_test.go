package dane

import (
	"crypto/x509"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary certificates (as an MX host could present)
// and TLSA records (as a zone could publish) to the matcher: it must not
// panic, a record built from the certificate itself must match it, and a
// record whose data differs in one byte must not.
func FuzzVerify(f *testing.F) {
	now := time.Now()
	ca, caKey := issue(f, "Test CA", nil, true, nil, nil, now.Add(-time.Hour))
	leaf, _ := issue(f, "mx.example.test", []string{"mx.example.test"}, false, ca, caKey, now.Add(-time.Hour))
	for _, c := range []*x509.Certificate{leaf, ca} {
		for _, r := range []Record{recordFor(c, 3, 1, 1), recordFor(c, 2, 0, 2), recordFor(c, 3, 0, 0)} {
			f.Add(leaf.Raw, ca.Raw, r.Usage, r.Selector, r.MatchingType, r.Data)
		}
	}
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x00}, []byte{}, uint8(3), uint8(1), uint8(1), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, leafDER, caDER []byte, usage, selector, mtype uint8, data []byte) {
		var chain []*x509.Certificate
		for _, der := range [][]byte{leafDER, caDER} {
			if c, err := x509.ParseCertificate(der); err == nil {
				chain = append(chain, c)
			}
		}
		r := Record{Usage: usage, Selector: selector, MatchingType: mtype, Data: data}
		_ = Verify(chain, []Record{r}, []string{"mx.example.test"}, now)
		if len(chain) == 0 {
			return
		}
		for _, c := range chain {
			Match(r, c)
		}
		own := recordFor(chain[0], UsageDANEEE, selector%2, mtype%3)
		if !Match(own, chain[0]) || Verify(chain[:1], []Record{own}, nil, now) != nil {
			t.Fatalf("a record of the certificate itself does not match it: %v", own)
		}
		own.Data = append([]byte(nil), own.Data...)
		own.Data[len(own.Data)-1] ^= 1
		if Match(own, chain[0]) {
			t.Fatalf("a record one bit off matches: %v", own)
		}
	})
}
