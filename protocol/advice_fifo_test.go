package protocol

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	if err := syscall.Mkfifo(cfg, 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(cfg, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := Dial(context.Background(), filepath.Join(dir, "mailctl.sock"))
		done <- err
	}()
	var err error
	testwait.For(t, "dialing a missing daemon beside a FIFO config to answer", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if pe, ok := err.(*Error); !ok || pe.Code != CodeUnavailable || !strings.Contains(pe.Message, "sudo systemctl start mailctl") {
		t.Fatalf("FIFO beside the socket: %v", err)
	}
}
