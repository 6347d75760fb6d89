package daemon

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestFrameOverBudgetIsRefusedOnItsID sends a request frame larger than
// the daemon's request memory: it is discarded without being buffered, the
// refusal is answered on the request's id naming the limit, and the
// connection goes on serving.
func TestFrameOverBudgetIsRefusedOnItsID(t *testing.T) {
	td := startDaemon(t, "[control]\nrequest_memory = 8388608\nrequest_memory_per_uid = 2097152\n")
	conn, err := net.Dial("unix", td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	r.ReadString('\n')
	go func() {
		conn.Write([]byte(`{"id":7,"verb":"send","args":{"from_mailbox":"x","body":"` + strings.Repeat("a", 10<<20) + `"}}` + "\n"))
		conn.Write([]byte(`{"id":8,"verb":"version"}` + "\n"))
	}()
	var resp protocol.Response
	line, _ := r.ReadString('\n')
	if err := json.Unmarshal([]byte(line), &resp); err != nil || resp.ID != 7 || resp.Error == nil ||
		resp.Error.Code != protocol.CodeRateLimited || !strings.Contains(resp.Error.Message, "control.request_memory") {
		t.Fatalf("reply to the oversized frame: %.300s", line)
	}
	line, _ = r.ReadString('\n')
	var next protocol.Response
	if err := json.Unmarshal([]byte(line), &next); err != nil || next.ID != 8 || next.Error != nil {
		t.Fatalf("next request on the same connection: %.300s", line)
	}
}

// TestHalfSentFrameTimesOutAfterReload: control.request_timeout, as a
// reload sets it, bounds how long a begun frame may take to arrive on the
// daemon's socket: a client that stops half-way is answered timeout on the
// frame's id and the connection is closed.
func TestHalfSentFrameTimesOutAfterReload(t *testing.T) {
	td := startDaemon(t, "")
	orig, err := os.ReadFile(td.cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(td.cfg.File, append(orig, "\n[control]\nrequest_timeout = \"300ms\"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(td.cfg.File); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testwait.Timeout)) // a safety net: the daemon answers by itself
	r := bufio.NewReader(conn)
	r.ReadString('\n')
	if _, err := conn.Write([]byte(`{"id":9,"verb":"send","args":{"body":"` + strings.Repeat("a", 1<<20))); err != nil {
		t.Fatal(err)
	}
	line, _ := r.ReadString('\n')
	var resp protocol.Response
	if err := json.Unmarshal([]byte(line), &resp); err != nil || resp.ID != 9 || resp.Error == nil ||
		resp.Error.Code != protocol.CodeTimeout || !strings.Contains(resp.Error.Message, "control.request_timeout") {
		t.Fatalf("reply to the half-sent frame: %.300s", line)
	}
	if line, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the timeout: %q %v, want the connection closed", line, err)
	}
}
