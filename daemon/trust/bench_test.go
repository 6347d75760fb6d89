package trust

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkCheck measures one whole check of a 20 KB message signed with
// Ed25519 and RSA-2048, DNS answered from memory: the CPU cost per message
// that inbound throughput depends on.
func BenchmarkCheck(b *testing.B) {
	m := world(b)
	raw := message("Boss <boss@trusted.test>")
	raw = append(raw, []byte(strings.Repeat("A line of body text that is not very long.\r\n", 450))...)
	raw = sign(b, raw, "trusted.test", "rsa", rsaKey)
	raw = sign(b, raw, "trusted.test", "ed", edKey)
	c := &Checker{Resolver: m}
	in := Input{RemoteIP: trustedIP, Helo: "mx.trusted.test", MailFrom: "boss@trusted.test", Raw: raw}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if r := c.Check(context.Background(), in); !r.Aligned {
			b.Fatal("not aligned")
		}
	}
}
