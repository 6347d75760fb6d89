package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

func TestRateLimitSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	p := config.SendPolicy{PerMinute: 2, PerDay: 3}
	r, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := r.Allow("bot", p, 1); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	// No Close: a killed daemon never closes its files.
	r2, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	err = r2.Allow("bot", p, 1)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("after a restart the minute's two sends were forgotten: %v", err)
	}
	// The first send was 20s ago: the window frees in 40s, as before the restart.
	if got := err.(*protocol.Error).RetryAfterMS; got != 40_000 {
		t.Fatalf("retry after %dms, want 40000", got)
	}
	if err := r2.Allow("other", p, 1); err != nil {
		t.Fatalf("limits are per mailbox: %v", err)
	}
	clk.Advance(time.Minute)
	if err := r2.Allow("bot", p, 1); err != nil {
		t.Fatal(err)
	}
	if err := r2.Allow("bot", p, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("the day's fourth send across a restart: %v", err)
	}
	// A day later everything before has left every window, and the file
	// is rewritten without it at the next start.
	clk.Advance(25 * time.Hour)
	r2.Close()
	r3, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if data, _ := os.ReadFile(path); len(data) != 0 {
		t.Fatalf("sends older than a day kept: %q", data)
	}
	if err := r3.Allow("bot", p, 1); err != nil {
		t.Fatal(err)
	}
}

func TestSendLogSkipsDamageAndStaysBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.log")
	clk := testclock.New()
	good := sendLine("bot", clk.Now().Add(-time.Second))
	os.WriteFile(path, []byte("garbage\n12 \"unterminated\n"+good+"99999999999999999999999 \"x\"\n1 \"\"\n"+good[:10]), 0o600)
	r, err := OpenRateLimiter(path, clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Allow("bot", config.SendPolicy{PerMinute: 1}, 1); protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("the one good line was not counted: %v", err)
	}
	// Sends over two days with no limit: the file holds about the last day.
	for range 3000 {
		if err := r.Allow("bot", config.SendPolicy{}, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	data, _ := os.ReadFile(path)
	if n := bytes.Count(data, []byte("\n")); n > 2*24*60+1024 {
		t.Fatalf("the send log holds %d lines for at most %d live sends", n, 24*60)
	}
}
