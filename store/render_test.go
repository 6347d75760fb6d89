package store

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// msgGen builds messages from bytes: every field, nil and empty lists,
// absent and present pointers, hostile strings and times TOML cannot carry.
type msgGen struct{ b []byte }

func (g *msgGen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

var trickyStrings = []string{"", "plain", "+++", "a\"b\\c", "line\nbreak\r\t\b\f", "\x00\x01\x1f\x7f", "\xff\xfe bad utf-8",
	"héllo wörld ✓", "[[x]]", "key = value", "\u2028\u202e", `'''"""`}

func (g *msgGen) str() string {
	switch c := g.byte(); {
	case c < 128:
		return trickyStrings[int(c)%len(trickyStrings)]
	default:
		n := int(g.byte() % 16)
		var s []byte
		for range n {
			s = append(s, g.byte())
		}
		return string(s)
	}
}

func (g *msgGen) strs() []string {
	switch g.byte() % 3 {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	out := make([]string, 1+g.byte()%3)
	for i := range out {
		out[i] = g.str()
	}
	return out
}

func (g *msgGen) time() time.Time {
	var raw [8]byte
	for i := range raw {
		raw[i] = g.byte()
	}
	sec := int64(binary.LittleEndian.Uint64(raw[:]))
	switch g.byte() % 4 {
	case 0:
		return time.Time{}
	case 1:
		sec %= 400_000_000_000 // years from about -10700 to 14600
	default:
		sec %= 10_000_000_000
	}
	offsets := []int{0, 3600, -5 * 3600, 5*3600 + 1800, 45, -3599}
	return time.Unix(sec, int64(g.byte())*3_900_000).In(time.FixedZone("", offsets[int(g.byte())%len(offsets)]))
}

func (g *msgGen) timePtr() *time.Time {
	if g.byte()%2 == 0 {
		return nil
	}
	t := g.time()
	return &t
}

func (g *msgGen) auth() AuthResult {
	return AuthResult{Result: g.str(), Domain: g.str(), Detail: g.str()}
}

func (g *msgGen) message() *Message {
	m := &Message{ID: g.str(), MessageID: g.str(), ThreadID: g.str(), From: g.str(), To: g.strs(), Cc: g.strs(), Bcc: g.strs(),
		ReplyTo: g.strs(), DeliveredTo: g.str(), Tag: g.str(), Subject: g.str(), Date: g.time(), ReceivedAt: g.time(),
		ReceivedFromIP: g.str(), SizeBytes: int64(binary.LittleEndian.Uint16([]byte{g.byte(), g.byte()})) - 100,
		InReplyTo: g.str(), References: g.strs(), ListID: g.str(), AutoSubmitted: g.str(), SPF: g.auth(), DMARC: g.auth(),
		Trusted: g.str(), SubmittedBy: g.str(), Mailbox: g.str(), Read: g.byte()%2 == 0, ReadAt: g.timePtr(), Labels: g.strs(),
		Starred: g.byte()%2 == 0, IsDSN: g.byte()%2 == 0, DSNFor: g.str(), Outbound: g.byte()%2 == 0, DeliveryStatus: g.str(),
		DeliveredAt: g.timePtr(), SendAt: g.timePtr()}
	switch g.byte() % 3 {
	case 1:
		m.Attachments = []Attachment{}
	case 2:
		for range 1 + g.byte()%3 {
			m.Attachments = append(m.Attachments, Attachment{Filename: g.str(), ContentType: g.str(), Size: int64(g.byte()), Path: g.str()})
		}
	}
	switch g.byte() % 3 {
	case 1:
		m.DKIM = []AuthResult{}
	case 2:
		for range 1 + g.byte()%3 {
			m.DKIM = append(m.DKIM, g.auth())
		}
	}
	switch g.byte() % 3 {
	case 1:
		m.DeliveryDetails = []RecipientStatus{}
	case 2:
		for range 1 + g.byte()%3 {
			m.DeliveryDetails = append(m.DeliveryDetails, RecipientStatus{Address: g.str(), Status: g.str(), Detail: g.str(),
				Code: int(g.byte()) - 10, Attempts: int(g.byte() % 4), NextAttempt: g.timePtr(), UpdatedAt: g.timePtr(), TLS: g.str()})
		}
	}
	return m
}

// FuzzRenderMatches: Render writes, byte for byte, what BurntSushi/toml's
// encoder writes for the sanitized message, and changes nothing in it.
func FuzzRenderMatches(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		seed := make([]byte, 400)
		for i := range seed {
			seed[i] = byte(r.Uint32())
		}
		f.Add(seed)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &msgGen{b: data}
		m := g.message()
		before := renderByEncoder(m, "body")
		got, want := Render(m, "body"), renderByEncoder(m, "body")
		if !bytes.Equal(got, want) {
			t.Fatalf("Render differs from the encoder:\n%s\nwant\n%s", got, want)
		}
		if !bytes.Equal(before, want) {
			t.Fatal("Render changed the message it rendered")
		}
	})
}

// TestRenderMatchesEncoder runs a few thousand generated messages through
// both writers, more than the fuzz seeds alone.
func TestRenderMatchesEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 3000 {
		data := make([]byte, 300+i%400)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		m := (&msgGen{b: data}).message()
		if got, want := Render(m, "b"), renderByEncoder(m, "b"); !bytes.Equal(got, want) {
			t.Fatalf("message %d: Render differs from the encoder:\n%s\nwant\n%s", i, got, want)
		}
	}
	// No message is an empty one (the encoder's left its lists out).
	if got, want := Render(nil, ""), renderByEncoder(&Message{}, ""); !bytes.Equal(got, want) {
		t.Fatalf("nil message:\n%s\nwant\n%s", got, want)
	}
}

// benchMessage is a received message as delivery writes it.
func benchMessage() *Message {
	m := testMessage(1)
	m.DKIM = []AuthResult{{Result: "pass", Domain: "example.com"}}
	m.SPF = AuthResult{Result: "pass", Domain: "example.com", Detail: "matched ip"}
	return m
}

// BenchmarkRender: a received message's frontmatter, as delivery writes it.
func BenchmarkRender(b *testing.B) {
	m := benchMessage()
	for b.Loop() {
		Render(m, "A short body.")
	}
}

// BenchmarkRenderByEncoder is BenchmarkRender through the reflective encoder.
func BenchmarkRenderByEncoder(b *testing.B) {
	m := benchMessage()
	for b.Loop() {
		renderByEncoder(m, "A short body.")
	}
}
