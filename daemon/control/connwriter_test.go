package control

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// A client that stops reading for longer than the write timeout must not
// later read a frame cut short and glued to the next one: the first frame
// that cannot be written whole ends the connection.
func TestStalledClientGetsNoTornFrame(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client.SetReadBuffer(4096)
	server.SetWriteBuffer(4096)

	w := &connWriter{conn: server, timeout: 200 * time.Millisecond}
	big, _ := json.Marshal(map[string]string{"x": strings.Repeat("a", 4<<20)})
	if err := w.send(protocol.Response{ID: 1, Data: big}); err == nil {
		t.Fatal("a 4 MiB frame to a client that does not read was written in full")
	}
	// The client reads again, and the next answer (another request on
	// the connection) comes: it must not be written after the torn one.
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(client, 8<<20)
	go w.send(protocol.Response{ID: 2, Data: []byte(`{"ok":true}`)})
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			if len(line) > 0 && json.Valid(line) {
				t.Fatalf("the connection ended on a whole frame without its newline")
			}
			return // a cut frame at the very end is followed by EOF: the client knows
		}
		if err != nil {
			t.Fatalf("reading: %v (the connection was left open)", err)
		}
		if !json.Valid(line) {
			t.Fatalf("client read a torn frame of %d bytes: %.60q ... %.60q", len(line), line, line[max(0, len(line)-60):])
		}
	}
}
