//go:build !race

package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// vmHWM is a process's peak resident set size in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// peakRSSCeiling is the daemon's documented peak resident memory under the
// attack below: the default control.request_memory (512 MiB) plus 384 MiB
// (docs/security.md).
const peakRSSCeiling = 896 << 20

// TestDaemonMemoryUnderHostileClients runs the daemon as its own process
// and attacks its memory the two ways that used to grow it without bound:
// 16 connections each holding an unfinished 47 MiB request frame, and 16
// concurrent reads of a 60 MiB message. The daemon's peak resident set must
// stay under peakRSSCeiling; every read still gets its window.
func TestDaemonMemoryUnderHostileClients(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "big")
	body := strings.Repeat("ü", 30<<20)
	id, _, err := td.store.Deliver("big", "inbox", &store.Message{MessageID: "big@example.test", Subject: "big", ReceivedAt: time.Now()},
		body, []byte("Subject: big\r\n\r\n"+body), nil)
	if err != nil {
		t.Fatal(err)
	}
	body = ""
	cfgPath, socket := td.cfg.File, td.socket
	td.stop()
	cmd := startDaemonProcess(t, cfgPath, socket)
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	start := vmHWM(t, cmd.Process.Pid)

	var wg sync.WaitGroup
	var held []net.Conn
	var mu sync.Mutex
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", socket)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			bufio.NewReader(c).ReadString('\n') // the greeting
			c.Write([]byte(`{"id":1,"verb":"send","args":{"from_mailbox":"big","to":["a@remote.test"],"body":"`))
			chunk := []byte(strings.Repeat("a", 1<<20))
			for range 47 {
				if _, err := c.Write(chunk); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := protocol.Dial(ctx, socket)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var m protocol.Message
			if err := c.Call(ctx, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "big", ID: id, Raw: i%2 == 1,
				Offset: 1 << 20, MaxChars: 200_000}, &m); err != nil {
				t.Error(err)
				return
			}
			if len([]rune(m.Body)) != 200_000 || m.BodyChars < 30<<20 || !m.Truncated {
				t.Errorf("read: %d characters of %d, truncated %v", len([]rune(m.Body)), m.BodyChars, m.Truncated)
			}
		}()
	}
	wg.Wait()
	peak := vmHWM(t, cmd.Process.Pid)
	for _, c := range held {
		c.Close()
	}
	t.Logf("daemon peak RSS: %d MiB after start, %d MiB under the attack (ceiling %d MiB)", start>>20, peak>>20, peakRSSCeiling>>20)
	if peak > peakRSSCeiling {
		t.Errorf("daemon peak RSS %d MiB, over the documented %d MiB", peak>>20, peakRSSCeiling>>20)
	}
}
