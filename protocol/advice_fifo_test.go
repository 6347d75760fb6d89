package protocol

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// TestAdviceNeverWaitsOnAFIFO dials a socket whose folder holds a FIFO
// where a dev instance keeps its config (anyone can plant one in a shared
// folder such as /tmp): the client, which reads that file to say how to
// start the daemon, must answer unavailable instead of waiting for a
// writer.
func TestAdviceNeverWaitsOnAFIFO(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	testwait.FIFO(t, cfg)
	err := testwait.Returns(t, "dialing a missing daemon beside a FIFO config", func() error {
		_, err := Dial(context.Background(), filepath.Join(dir, "mailctl.sock"))
		return err
	})
	if pe, ok := err.(*Error); !ok || pe.Code != CodeUnavailable || !strings.Contains(pe.Message, StartCommand()) {
		t.Fatalf("FIFO beside the socket: %v", err)
	}
}
