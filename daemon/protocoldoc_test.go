package daemon

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/protocol"
)

// TestProtocolREADMEExamples sends every request line documented in
// protocol/README.md to a real daemon, over a raw socket as socat would, and
// checks the daemon understands each one (no invalid_input): the document
// cannot drift from the protocol.
func TestProtocolREADMEExamples(t *testing.T) {
	doc, err := os.ReadFile("../protocol/README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^(\{"id":\d+,"verb":.*\})$`).FindAllString(string(doc), -1)
	if len(lines) < 10 {
		t.Fatalf("found only %d example lines in protocol/README.md", len(lines))
	}
	verbs := map[string]bool{}
	for _, v := range control.Verbs() {
		verbs[v] = false
	}
	td := startDaemon(t, "")
	conn, err := net.Dial("unix", td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	greeting, _ := r.ReadString('\n')
	if !strings.Contains(greeting, `"protocol":"mailctl"`) {
		t.Fatalf("greeting %q", greeting)
	}
	for _, line := range lines {
		var req protocol.Request
		json.Unmarshal([]byte(line), &req)
		verbs[req.Verb] = true
		if _, err := conn.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		reply, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		var resp protocol.Response
		if err := json.Unmarshal([]byte(reply), &resp); err != nil || resp.ID != req.ID {
			t.Fatalf("%s: reply %q", line, reply)
		}
		if resp.Error != nil && resp.Error.Code == protocol.CodeInvalidInput {
			t.Errorf("documented example refused: %s -> %s", line, resp.Error.Message)
		}
	}
	// Every verb appears in the verbs table.
	for v := range verbs {
		if !strings.Contains(string(doc), "`"+v+"`") {
			t.Errorf("verb %s is not documented in protocol/README.md", v)
		}
	}
	if path, err := exec.LookPath("socat"); err == nil {
		out, err := exec.Command("sh", "-c", `printf '%s\n' '{"id":1,"verb":"version"}' | `+path+` -t2 - UNIX-CONNECT:`+td.socket).Output()
		if err != nil || !strings.Contains(string(out), `"protocol_version":"1.0"`) {
			t.Errorf("the socat example: %v %s", err, out)
		}
	}
}
