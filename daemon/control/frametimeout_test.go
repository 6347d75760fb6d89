package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// frameServer is a Server with the given control limits whose connections
// are served by handleConn as whichever caller the test names, so that two
// users meet without switching uids.
func frameServer(t *testing.T, lim config.Control) *Server {
	t.Helper()
	lim.IdleTimeout = config.Duration{Duration: 10 * time.Minute}
	return New(Options{Backend: &fakeBackend{cfg: &config.Config{Domains: []string{"example.test"}, Control: lim}}})
}

// frameClient is one client connection to a frameServer.
type frameClient struct {
	conn *net.UnixConn
	r    *bufio.Reader
}

// dialAs connects to s as caller and reads the greeting.
func dialAs(t *testing.T, s *Server, caller Caller) *frameClient {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.handleConn(srv, caller) }()
	t.Cleanup(func() { conn.Close(); testwait.Recv(t, "handleConn to return once the client closed", done) })
	// Only a safety net for a failing test: every read below waits for a
	// state the server reaches by itself.
	conn.SetReadDeadline(time.Now().Add(testwait.Timeout))
	c := &frameClient{conn: conn, r: bufio.NewReader(conn)}
	if _, err := c.r.ReadString('\n'); err != nil {
		t.Fatalf("greeting: %v", err)
	}
	return c
}

// reply reads the next response.
func (c *frameClient) reply(t *testing.T) protocol.Response {
	t.Helper()
	line, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply: %v", err)
	}
	var r protocol.Response
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("reply %.200q: %v", line, err)
	}
	return r
}

// paddedVersion is a version request of about n bytes (white space inside
// the object), without its newline.
func paddedVersion(id uint64, n int) []byte {
	b, _ := json.Marshal(protocol.Request{ID: id, Verb: protocol.VerbVersion})
	return append(append(b[:len(b)-1:len(b)-1], strings.Repeat(" ", n)...), '}')
}

// held is what the budget holds for uid, and in total.
func (b *memBudget) held(uid uint32) (int64, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byUID[uid], b.total
}

// TestHalfSentFrameGivesItsMemoryBack: a user sends the start of a large
// frame and stops. Its buffer, charged to the user, held the users' request
// memory until the idle timeout (10 minutes); now the frame must arrive
// whole within control.request_timeout of its first byte, else the client is
// told so, the connection is closed and the memory given back at once.
// A request the user has in flight on the connection still answers, and
// holds only its own charge meanwhile. Another user's request that needs
// most of the users' memory is then served.
func TestHalfSentFrameGivesItsMemoryBack(t *testing.T) {
	t.Parallel()
	lim := config.Control{RequestTimeout: config.Duration{Duration: 500 * time.Millisecond},
		RequestMemory: 48 << 20, RequestMemoryPerUID: 24 << 20}
	s := frameServer(t, lim)
	hogUID, otherUID := uint32(1001), uint32(1002)

	// The hog's first request stays in flight until the test lets it go.
	entered, letGo := make(chan struct{}), make(chan struct{})
	var enter, once sync.Once
	release := func() { once.Do(func() { close(letGo) }) }
	s.gated = func(string) { enter.Do(func() { close(entered) }); <-letGo }
	defer release()

	hog := dialAs(t, s, Caller{UID: hogUID, GID: hogUID})
	first := paddedVersion(4, 10)
	if _, err := hog.conn.Write(append(first, '\n')); err != nil {
		t.Fatal(err)
	}
	testwait.Returns(t, "the first request to be in flight", func() struct{} { <-entered; return struct{}{} })
	inFlight := requestCost(protocol.VerbVersion, len(first))
	part := paddedVersion(5, 7<<20)
	if _, err := hog.conn.Write(part[:len(part)-1]); err != nil { // no end, no newline
		t.Fatalf("writing the start of the frame: %v", err)
	}
	r := hog.reply(t)
	if r.ID != 5 || r.Error == nil || r.Error.Code != protocol.CodeTimeout || !strings.Contains(r.Error.Message, "control.request_timeout") {
		t.Fatalf("the half-sent frame was answered %+v %+v, want timeout naming control.request_timeout on its id", r, r.Error)
	}
	// The buffer went back before the answer was written, with a request
	// still in flight.
	if mine, _ := s.mem.held(hogUID); mine != inFlight {
		t.Fatalf("after the timeout the user holds %d bytes, want only the %d of its request in flight", mine, inFlight)
	}
	release()
	if r := hog.reply(t); r.ID != 4 || r.Error != nil {
		t.Fatalf("the request in flight answered %+v %+v", r, r.Error)
	}
	if line, err := hog.r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after the timeout the connection gave %q %v, want it closed", line, err)
	}
	testwait.For(t, "the user's memory to be given back", func() bool {
		mine, total := s.mem.held(hogUID)
		return mine == 0 && total == 0
	})

	// The frame's buffer held enough that the other user's request would
	// not have fitted beside it.
	s.mem.mu.Lock()
	peak := s.mem.peak
	s.mem.mu.Unlock()
	big := paddedVersion(6, 5<<20)
	users := lim.RequestMemory - lim.RequestMemoryPerUID
	if need := requestCost(protocol.VerbVersion, len(big)); peak < int64(len(part)) || int64(len(part))+need <= users || need > lim.RequestMemoryPerUID {
		t.Fatalf("test setup: the half-sent frame held %d (a peak of %d), the other user's request needs %d of the users' %d", len(part), peak, need, users)
	}
	other := dialAs(t, s, Caller{UID: otherUID, GID: otherUID})
	if _, err := other.conn.Write(append(big, '\n')); err != nil {
		t.Fatal(err)
	}
	if r := other.reply(t); r.ID != 6 || r.Error != nil {
		t.Fatalf("the other user's large request: %+v %+v", r, r.Error)
	}
}

// TestSteadyLargeFrameIsNotCut: a large frame written in small pieces, as
// fast as the client can, arrives whole within the default request timeout
// and is served. It does not run beside the other frame tests: its 16 MiB
// frame would take the CPU that TestHalfSentFrameGivesItsMemoryBack needs
// to send the start of its frame within that test's request timeout.
func TestSteadyLargeFrameIsNotCut(t *testing.T) {
	s := frameServer(t, config.Control{RequestTimeout: config.Duration{Duration: 30 * time.Second},
		RequestMemory: 512 << 20, RequestMemoryPerUID: 224 << 20})
	c := dialAs(t, s, Caller{UID: 1001, GID: 1001})
	frame := append(paddedVersion(3, 16<<20), '\n')
	go func() {
		for b := frame; len(b) > 0; {
			n := min(len(b), 4096)
			if _, err := c.conn.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	}()
	if r := c.reply(t); r.ID != 3 || r.Error != nil {
		t.Fatalf("a %d-byte frame sent steadily: %+v %+v", len(frame), r, r.Error)
	}
}

// TestRequestTimeoutRunsOnlyWithinAFrame: a connection that waits between
// frames for longer than control.request_timeout is not closed for it (the
// idle timeout applies there); only a frame that has begun is bounded.
func TestRequestTimeoutRunsOnlyWithinAFrame(t *testing.T) {
	t.Parallel()
	s := frameServer(t, config.Control{RequestTimeout: config.Duration{Duration: 100 * time.Millisecond},
		RequestMemory: 64 << 20, RequestMemoryPerUID: 16 << 20})
	caller := Caller{UID: 1001, GID: 1001}
	waiting := dialAs(t, s, caller)
	if _, err := waiting.conn.Write(append(paddedVersion(1, 10), '\n')); err != nil {
		t.Fatal(err)
	}
	if r := waiting.reply(t); r.ID != 1 || r.Error != nil {
		t.Fatalf("first request: %+v %+v", r, r.Error)
	}
	// A frame begun on another connection after that answer runs out: at
	// least request_timeout has passed since then.
	stalled := dialAs(t, s, caller)
	if _, err := stalled.conn.Write([]byte(`{"id":2,`)); err != nil {
		t.Fatal(err)
	}
	if r := stalled.reply(t); r.ID != 2 || r.Error == nil || r.Error.Code != protocol.CodeTimeout {
		t.Fatalf("the stalled frame: %+v %+v, want timeout", r, r.Error)
	}
	if _, err := waiting.conn.Write(append(paddedVersion(3, 10), '\n')); err != nil {
		t.Fatal(err)
	}
	if r := waiting.reply(t); r.ID != 3 || r.Error != nil {
		t.Fatalf("a request after waiting longer than request_timeout between frames: %+v %+v", r, r.Error)
	}
}

// TestIdleTimeoutWaitsForABegunFrame: a frame that has begun is bounded by
// control.request_timeout alone; the idle timeout, which closes a
// connection left unused, does not cut it half-way and leave its request
// unanswered when the frame began just before the connection would have
// been idle for that long.
func TestIdleTimeoutWaitsForABegunFrame(t *testing.T) {
	t.Parallel()
	lim := config.Control{RequestTimeout: config.Duration{Duration: time.Minute}, IdleTimeout: config.Duration{Duration: 200 * time.Millisecond},
		RequestMemory: 64 << 20, RequestMemoryPerUID: 16 << 20}
	s := New(Options{Backend: &fakeBackend{cfg: &config.Config{Domains: []string{"example.test"}, Control: lim}}})
	caller := Caller{UID: 1001, GID: 1001}
	slow := dialAs(t, s, caller)
	if _, err := slow.conn.Write([]byte(`{"id":1,`)); err != nil {
		t.Fatal(err)
	}
	// Two connections opened after it, one after the other, closed as idle:
	// the slow one has been open longer than the idle timeout since.
	for range 2 {
		witness := dialAs(t, s, caller)
		if line, err := witness.r.ReadString('\n'); !errors.Is(err, io.EOF) {
			t.Fatalf("an unused connection gave %q %v, want it closed", line, err)
		}
	}
	if _, err := slow.conn.Write([]byte(`"verb":"version"}` + "\n")); err != nil {
		t.Fatalf("the rest of the frame: %v", err)
	}
	if r := slow.reply(t); r.ID != 1 || r.Error != nil {
		t.Fatalf("a frame begun before the idle timeout: %+v %+v", r, r.Error)
	}
}
