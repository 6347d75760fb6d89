package mcpshim

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"testing"
)

// bigToolsCall is a tools/call of email_send carrying an attachment of n
// bytes inline, in base64, as an agent sends a file it holds in memory.
func bigToolsCall(n int) []byte {
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("mailctl\x00"), n/8+1)[:n])
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"email_send","arguments":{"mailbox":"agent","to":"a@b.test","subject":"report","body":"attached","attachments_base64":[{"filename":"report.bin","data":%q}]}}}`, data)
}

// BenchmarkProbeLargeToolsCall measures what each transport spends reading
// a large message itself before the SDK parses it: the HTTP transport's
// refusal check of a POST body and the stdio transport's id check of a line.
// The message is an 8 MiB attachment in base64 (about 11 MiB).
func BenchmarkProbeLargeToolsCall(b *testing.B) {
	msg := bigToolsCall(8 << 20)
	b.Run("http", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			if bad := refuseBody(msg); bad != nil {
				b.Fatalf("refused: %s", bad.msg)
			}
		}
	})
	b.Run("stdio", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			if _, why, _ := badID(msg); why != "" {
				b.Fatal(why)
			}
		}
	})
}
