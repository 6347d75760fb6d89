package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
)

// metricsGet makes one keep-alive request for /metrics on c and reads its
// answer whole.
func metricsGet(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestMetricsEndpointClosesIdleConnections: any local user may connect to
// the metrics endpoint; a connection kept open after its request is closed
// once it has been unused for the idle timeout, instead of holding one of
// the daemon's file descriptors for good.
func TestMetricsEndpointClosesIdleConnections(t *testing.T) {
	keep := metricsIdleTimeout
	metricsIdleTimeout = 100 * time.Millisecond
	t.Cleanup(func() { metricsIdleTimeout = keep })
	td := startDaemon(t, "[metrics]\nlisten = \"127.0.0.1:0\"\n")
	c, err := net.Dial("tcp", td.metricsS.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if resp := metricsGet(t, c, br); resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %s", resp.Status)
	}
	if err := testwait.Returns(t, "the idle connection to be closed", func() error {
		_, err := br.ReadByte()
		return err
	}); !errors.Is(err, io.EOF) {
		t.Errorf("reading the idle connection: %v, want it closed", err)
	}
}

// TestMetricsEndpointBoundsConnections: connections held open past the
// endpoint's bound do not each take a file descriptor of the daemon's: one
// more waits to be served until one of them goes.
func TestMetricsEndpointBoundsConnections(t *testing.T) {
	td := startDaemon(t, "[metrics]\nlisten = \"127.0.0.1:0\"\n")
	var held []net.Conn
	for range metricsMaxConns {
		c, err := net.Dial("tcp", td.metricsS.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		metricsGet(t, c, bufio.NewReader(c)) // served, then kept open
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", td.metricsS.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if _, err := io.WriteString(extra, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(extra)
	extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection past the bound was answered while %d others were open (%v)", metricsMaxConns, err)
	}
	extra.SetReadDeadline(time.Time{})
	held[0].Close()
	resp := testwait.Returns(t, "the waiting connection to be served", func() *http.Response {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Error(err)
			return nil
		}
		return resp
	})
	if resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the connection that waited: %v", resp)
	}
	resp.Body.Close()
}
