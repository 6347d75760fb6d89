package smtpin

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// bigBody is a message of about n bytes in 100-byte CRLF lines.
func bigBody(n int) string {
	return "Subject: big\r\n\r\n" + strings.Repeat(strings.Repeat("z", 98)+"\r\n", n/100)
}

// TestLargeMessageIsSpooled: a message larger than SpoolOver goes to a
// spool as it arrives, with or without a declared size, and is delivered
// byte for byte; it holds so little memory that a message four times the
// in-flight budget is taken, and the budget is given back.
func TestLargeMessageIsSpooled(t *testing.T) {
	ts := startServer(t, Limits{MaxInFlightBytes: 2*SpoolOver + 1<<20}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	msg := bigBody(20 << 20)
	for i, mail := range []string{"MAIL FROM:<alice@sender.example>", fmt.Sprintf("MAIL FROM:<alice@sender.example> SIZE=%d", len(msg))} {
		c.cmd(mail, "250 ")
		c.cmd("RCPT TO:<bob@example.com>", "250 ")
		c.cmd("DATA", "354 ")
		c.send(msg + ".\r\n")
		c.expect("250 ")
		got := ts.be.got()
		if len(got) != i+1 || !got[i].spooled || body(t, got[i].raw) != msg {
			t.Fatalf("%s: %d deliveries, spooled %v", mail, len(got), len(got) > i && got[i].spooled)
		}
		if n := ts.inFlight.Load(); n != 0 {
			t.Errorf("in-flight bytes after delivery: %d", n)
		}
	}
	// Up to SpoolOver, a message is held.
	c.pipelineEnvelope()
	c.send(bigBody(SpoolOver-200) + ".\r\n")
	c.expect("250 ")
	if got := ts.be.got(); got[2].spooled {
		t.Error("a message under SpoolOver was spooled")
	}
}

// TestSpooledMessageLimits: a spooled message is held to the same limits as
// one in memory, checked as it arrives: a bare LF or CR far into it, a bare
// CR as its last byte (BDAT), and a size over the limit are refused, and
// the session goes on.
func TestSpooledMessageLimits(t *testing.T) {
	ts := startServer(t, Limits{MaxMessageBytes: 8 << 20}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	for _, tc := range []struct {
		name, msg, reply string
	}{
		{"bare LF deep inside", bigBody(SpoolOver+1<<20) + "bare\nlf\r\n", "554 5.6.0"},
		{"bare CR deep inside", bigBody(SpoolOver+1<<20) + "bare\rcr", "554 5.6.0"},
		{"too big", bigBody(9 << 20), "552 5.3.4"},
	} {
		c.pipelineEnvelope()
		c.send(tc.msg + "\r\n.\r\n")
		c.expect(tc.reply)
	}
	last := bigBody(SpoolOver+1<<20) + "bare cr\r"
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(last), last))
	c.expect("554 5.6.0")
	c.pipelineEnvelope()
	c.send("Subject: after\r\n\r\nok\r\n.\r\n")
	c.expect("250 ")
	if got := ts.be.got(); len(got) != 1 {
		t.Errorf("%d deliveries, want the last one only", len(got))
	}
}

// TestSpooledBDATEndsInCRLF: a spooled message sent with BDAT whose last
// chunk ends mid-line gets its last line completed, as a held one does.
func TestSpooledBDATEndsInCRLF(t *testing.T) {
	ts := startServer(t, Limits{}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	msg := bigBody(SpoolOver+1<<20) + "no end"
	c.cmd("MAIL FROM:<a@sender.example>", "250 ")
	c.cmd("RCPT TO:<b@example.com>", "250 ")
	c.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(msg), msg))
	c.expect("250 ")
	if got := ts.be.got(); len(got) != 1 || !got[0].spooled || body(t, got[0].raw) != msg+"\r\n" {
		t.Fatalf("deliveries: %d", len(got))
	}
}

// spoolingBackend provides its own spools and counts those closed.
type spoolingBackend struct {
	*fakeBackend
	mu             sync.Mutex
	opened, closed int
}

type countedSpool struct {
	Spool
	b *spoolingBackend
}

func (s countedSpool) Close() error {
	s.b.mu.Lock()
	s.b.closed++
	s.b.mu.Unlock()
	return s.Spool.Close()
}

func (b *spoolingBackend) NewSpool() (Spool, error) {
	sp, err := newFileSpool()
	b.mu.Lock()
	b.opened++
	b.mu.Unlock()
	return countedSpool{sp, b}, err
}

// TestBackendSpools: a backend that provides spools gets every large
// message in one of its own, and each is closed once the server is done
// with it, delivered or refused.
func TestBackendSpools(t *testing.T) {
	ts := startServer(t, Limits{MaxMessageBytes: SpoolOver + 2<<20}, nil, false)
	be := &spoolingBackend{fakeBackend: ts.be}
	ts.Server.b = be
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	c.send(bigBody(SpoolOver+1<<20) + ".\r\n")
	c.expect("250 ")
	c.pipelineEnvelope()
	c.send(bigBody(SpoolOver+3<<20) + ".\r\n")
	c.expect("552 ")
	c.cmd("QUIT", "221 ")
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.opened != 2 || be.closed != 2 {
		t.Errorf("%d spools opened, %d closed; want 2 and 2", be.opened, be.closed)
	}
}

// FuzzEOLCheck: a bare CR or LF is found in a message fed in any pieces
// exactly when it is in the whole, and the end is known to be CRLF or not.
func FuzzEOLCheck(f *testing.F) {
	f.Add([]byte("a\r\nb\r\n"), []byte{1, 2})
	f.Add([]byte("a\r\nb\r"), []byte{2})
	f.Add([]byte("\n"), []byte{0})
	f.Add([]byte("x\r\r\n"), []byte{1, 1, 1})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		var e eolCheck
		rest := data
		for _, c := range cuts {
			k := min(int(c), len(rest))
			e.feed(rest[:k])
			rest = rest[k:]
		}
		e.feed(rest)
		if got, want := e.bare(), hasBareEOL(data); got != want {
			t.Fatalf("pieces of %q cut at %v: bare %v, want %v", data, cuts, got, want)
		}
		if !e.bare() && len(data) > 0 && e.endsCRLF != bytes.HasSuffix(data, []byte("\r\n")) {
			t.Fatalf("%q: ends in CRLF %v", data, e.endsCRLF)
		}
	})
}

// TestReusedChunksHoldOnlyTheirMessage: the arrays a message is read into
// serve the next one, so each message must come out as exactly its own
// bytes whatever the one before left in them: a large message of one
// letter, then smaller ones of others, with and without a declared size
// (past it, on in chunks), a refused one, and one spooled.
func TestReusedChunksHoldOnlyTheirMessage(t *testing.T) {
	ts := startServer(t, Limits{MaxInFlightBytes: 4*SpoolOver + 1<<20}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	fill := func(letter string, n int) string {
		return "Subject: " + letter + "\r\n\r\n" + strings.Repeat(strings.Repeat(letter, 98)+"\r\n", n/100)
	}
	sends := []struct {
		msg, size string
	}{
		{fill("a", 1<<20), ""},
		{fill("b", 300<<10), ""},
		{fill("c", 5000), ""},
		{fill("d", 40<<10), " SIZE=1000"}, // declared too small: the rest in chunks
		{fill("e", SpoolOver+(100<<10)), ""},
		{fill("f", 70<<10), ""},
		{fill("g", 50<<10) + "g\ng\r\n", ""}, // a bare LF
		{fill("h", 9000), ""},
	}
	want := 0
	for i, s := range sends {
		c.cmd("MAIL FROM:<alice@sender.example>"+s.size, "250 ")
		c.cmd("RCPT TO:<bob@example.com>", "250 ")
		c.cmd("DATA", "354 ")
		c.send(s.msg + ".\r\n")
		if i == 6 {
			c.expect("554 ") // a bare line end: refused, its chunks given back
			continue
		}
		c.expect("250 ")
		want++
		got := ts.be.got()
		if len(got) != want {
			t.Fatalf("message %d: %d deliveries, want %d", i, len(got), want)
		}
		if b := body(t, got[want-1].raw); b != s.msg {
			t.Fatalf("message %d (%d bytes) came out as %d bytes, starting %q", i, len(s.msg), len(b), b[:min(len(b), 40)])
		}
	}
	if n := ts.inFlight.Load(); n != 0 {
		t.Errorf("in-flight bytes after the last delivery: %d", n)
	}
}
