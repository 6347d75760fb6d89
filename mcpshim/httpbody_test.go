package mcpshim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// postHead writes the header of a POST to addr whose body is n bytes.
func postHead(t *testing.T, c net.Conn, addr, token string, n int) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n",
		addr, token, n); err != nil {
		t.Fatal(err)
	}
}

// paddedInitialize is initializeLine grown to n bytes with white space.
func paddedInitialize(n int) string {
	return initializeLine[:len(initializeLine)-1] + strings.Repeat(" ", n-len(initializeLine)) + "}"
}

// Regression: the HTTP server bounds the header (ReadHeaderTimeout) and no
// read after it, as a ReadTimeout would also end the event streams. A client
// that sent a POST's header and part of its body and stopped held what it
// had sent (up to MaxRequestBytes) and its connection for good. The body must
// now arrive within httpBodyTimeout of the header: past it the client is
// answered 408 with a JSON-RPC error of code timeout and the connection
// closes. An event stream opened before is not cut by it.
func TestHTTPHalfSentBodyIsCut(t *testing.T) {
	const token = "0123456789abcdef-halfbody"
	s := New(Options{SocketPath: noDaemon(t)})
	s.httpBodyTimeout = 300 * time.Millisecond
	srv := httptest.NewServer(s.HTTPHandler(token))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	session := openRawSession(t, srv.URL, token)
	stream := openEventStream(t, srv.URL, token, session)
	defer stream.Body.Close()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testwait.Timeout)) // a safety net: the server answers by itself
	body := paddedInitialize(1 << 20)
	postHead(t, c, addr, token, len(body))
	if _, err := io.WriteString(c, body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the half-sent body: %v", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	var rpc struct {
		Error struct {
			Message string
			Data    struct{ Code string }
		}
	}
	if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(answer, &rpc) != nil || rpc.Error.Data.Code != "timeout" ||
		!strings.Contains(rpc.Error.Message, "300ms") {
		t.Fatalf("half-sent body: HTTP %d %s, want 408 and a JSON-RPC error of code timeout naming the limit", resp.StatusCode, answer)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the 408 the connection gave %d bytes, %v; want it closed", n, err)
	}

	// The event stream has been open for longer than the body timeout, and
	// still carries what the server sends its session.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for ss := range s.mcp.Sessions() {
		if ss.ID() == session {
			go ss.Ping(ctx, nil)
		}
	}
	pinged := testwait.Returns(t, "a ping on the event stream", func() bool {
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"method":"ping"`) {
				return true
			}
		}
		return false
	})
	if !pinged {
		t.Fatal("the event stream ended")
	}
}

// A body sent steadily in small writes, as fast as the client can, is read
// whole and served.
func TestHTTPSteadyBodyIsServed(t *testing.T) {
	const token = "0123456789abcdef-steadybody"
	srv := httptest.NewServer(New(Options{SocketPath: noDaemon(t)}).HTTPHandler(token))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testwait.Timeout))
	body := paddedInitialize(8 << 20)
	postHead(t, c, addr, token, len(body))
	go func() {
		for b := body; len(b) > 0; {
			n := min(len(b), 4096)
			if _, err := io.WriteString(c, b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"id":"init"`) {
		t.Fatalf("a %d-byte body sent steadily: HTTP %d %.200s", len(body), resp.StatusCode, answer)
	}
}

// A connection kept alive after its answer, here another user's that was
// refused for want of the token, is closed once unused for the idle
// timeout, instead of holding one of the server's descriptors for good.
func TestHTTPIdleConnectionIsClosed(t *testing.T) {
	s := New(Options{SocketPath: noDaemon(t)})
	s.httpIdleTimeout = 100 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.serveHTTP(ctx, ln, "0123456789abcdef-idle") }()
	defer func() { stop(); testwait.Recv(t, "serveHTTP to return once stopped", served) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Close {
		t.Fatalf("a request without the token: HTTP %d (close %v), want 401 on a connection kept alive", resp.StatusCode, resp.Close)
	}
	if err := testwait.Returns(t, "the idle connection to be closed", func() error {
		_, err := br.ReadByte()
		return err
	}); err != io.EOF {
		t.Errorf("reading the idle connection: %v, want it closed", err)
	}
}
