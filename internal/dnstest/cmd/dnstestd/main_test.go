package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/freeport"
)

func lookupTXT(addr, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return r.LookupTXT(ctx, name)
}

// TestServeReloadStop runs the daemon as a user would: serve a zone file,
// reload it on SIGHUP, stop on SIGTERM.
func TestServeReloadStop(t *testing.T) {
	zone := filepath.Join(t.TempDir(), "zone.txt")
	if err := os.WriteFile(zone, []byte("example.test TXT \"v=spf1 -all\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeport.TCPAndUDP(t)
	done := make(chan error, 1)
	go func() { done <- run(slog.New(slog.NewTextHandler(io.Discard, nil)), addr, zone) }()

	var txt []string
	var err error
	// Under the race detector on a busy machine start-up can take seconds.
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("dnstestd stopped before answering: %v", err)
		default:
		}
		if txt, err = lookupTXT(addr, "example.test"); err == nil {
			break
		}
	}
	if err != nil || len(txt) != 1 || txt[0] != "v=spf1 -all" {
		t.Fatalf("before reload: %q, %v", txt, err)
	}

	if err := os.WriteFile(zone, []byte("example.test TXT v=spf1 mx -all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if txt, err = lookupTXT(addr, "example.test"); err == nil && len(txt) == 1 && txt[0] == "v=spf1 mx -all" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || len(txt) != 1 || txt[0] != "v=spf1 mx -all" {
		t.Fatalf("after SIGHUP: %q, %v", txt, err)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("dnstestd did not stop on SIGTERM")
	}
}

func TestRunNeedsZone(t *testing.T) {
	if err := run(slog.New(slog.NewTextHandler(io.Discard, nil)), "127.0.0.1:0", ""); err == nil {
		t.Fatal("run without -zone succeeded")
	}
}
