package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/internal/freeport"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// crashMessage is message i of a crash test: small, or over SpoolOver with
// an attachment (spooled as it arrives, the attachment spilled).
func crashMessage(i int, big bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: a@sender.example\r\nTo: crash@example.test\r\nSubject: crash %d\r\nMessage-ID: <crash-%d@sender.example>\r\nMIME-Version: 1.0\r\n", i, i)
	if !big {
		fmt.Fprintf(&b, "\r\n%s\r\n", strings.Repeat(fmt.Sprintf("message %d ", i), 200))
		return b.Bytes()
	}
	att := make([]byte, 1800<<10)
	rand.NewChaCha8([32]byte{byte(i)}).Read(att) // the same for the same i
	b.WriteString("Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nbig\r\n")
	b.WriteString("--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=a.bin\r\nContent-Transfer-Encoding: base64\r\n\r\n")
	writeBase64(&b, att)
	b.WriteString("--b--\r\n")
	return b.Bytes()
}

// sendCrashMessages sends messages first..first+n-1, a connection each: the
// first seq one at a time, the rest from 4 clients at once. It returns those
// answered 250.
func sendCrashMessages(addr string, first, n, seq int, big bool) map[int]bool {
	var mu sync.Mutex
	acked := map[int]bool{}
	send := func(i int) {
		c, err := smtp.Dial(addr)
		if err != nil {
			return
		}
		defer c.Close()
		c.CommandTimeout, c.SubmissionTimeout = 20*time.Second, 20*time.Second
		if err := c.SendMail("a@sender.example", []string{"crash@example.test"}, bytes.NewReader(crashMessage(i, big))); err == nil {
			mu.Lock()
			acked[i] = true
			mu.Unlock()
		}
	}
	seq = min(seq, n)
	for i := first; i < first+seq; i++ {
		send(i)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := first + seq + w; i < first+n; i += 4 {
				send(i)
			}
		})
	}
	wg.Wait()
	return acked
}

// waitSMTP waits until the daemon's SMTP listener answers.
func waitSMTP(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the SMTP listener did not come up")
}

// waitKilled waits for the daemon to die of the crash point's SIGKILL.
func waitKilled(t *testing.T, cmd *exec.Cmd, point string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the daemon ended with %v, not killed at %s", err, point)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the daemon never reached crash point %s", point)
	}
}

// storedCopies counts the copies of each message in the inbox by its
// Message-ID, checking each is whole: its Markdown file, its raw copy of
// the size the frontmatter says, and, for a big one, its attachment.
func storedCopies(t *testing.T, inbox string, big bool) map[int]int {
	t.Helper()
	mds, _ := filepath.Glob(filepath.Join(inbox, "*.md"))
	count := map[int]int{}
	for _, md := range mds {
		id := strings.TrimSuffix(filepath.Base(md), ".md")
		raw, err := os.ReadFile(filepath.Join(inbox, id+".eml"))
		if err != nil {
			t.Errorf("%s has no raw copy: %v", id, err)
			continue
		}
		var i int
		at := bytes.Index(raw, []byte("Message-ID: <crash-"))
		if at < 0 {
			t.Errorf("%s: no Message-ID in its raw copy", id)
			continue
		}
		fmt.Sscanf(string(raw[at:]), "Message-ID: <crash-%d@", &i)
		if want := crashMessage(i, big); !bytes.HasSuffix(raw, want) {
			t.Errorf("%s: its raw copy (%d bytes) does not end with message %d (%d bytes)", id, len(raw), i, len(want))
		}
		md, _ := os.ReadFile(md)
		if !bytes.Contains(md, []byte(fmt.Sprintf("size_bytes = %d\n", len(raw)))) {
			t.Errorf("%s: its Markdown file does not say the raw copy's size %d", id, len(raw))
		}
		if big {
			if st, err := os.Stat(filepath.Join(inbox, id+".attachments", "a.bin")); err != nil || st.Size() != 1800<<10 {
				t.Errorf("%s: attachment %v", id, err)
			}
		}
		count[i]++
	}
	return count
}

// TestKillNineInbound kills the real daemon (SIGKILL, at a crash point)
// at every step of taking a message: while a large one is spooled, before
// its record, between its record and its fsync, after it, halfway through
// its raw copy, after its files, after it is marked written, after a
// checkpoint's sync, and while a restart writes again what the journal
// held. After the restart each sender that saw no 250 sends its message
// again, as an MTA retries; then every message is in the mailbox exactly
// once and whole (a copy the restart wrote from the journal is recognised
// as the same delivery as its retry), the index lists each file once, and
// after a clean stop the journal is empty again.
func TestKillNineInbound(t *testing.T) {
	for _, tc := range []struct {
		point string
		big   bool
	}{
		{"inbound-reserved:5", false},
		{"intake-appended:5", false},
		{"inbound-journaled:5", false},
		{"inbound-raw-half:5", false},
		{"inbound-written:5", false},
		{"inbound-marked:5", false},
		{"intake-synced:1", false},
		{"inbound-replayed:1", false},
		{"intake-spooling:20", true},
		{"intake-appended:3", true},
		{"inbound-journaled:3", true},
		{"inbound-raw-half:3", true},
		{"inbound-marked:3", true},
		{"inbound-replayed:1", true},
	} {
		name := strings.ReplaceAll(tc.point, ":", "@")
		if tc.big {
			name += "-spooled"
		}
		t.Run(name, func(t *testing.T) {
			addr := freeport.TCP(t)
			// DNS lookups fail at once, the same in every run: a sender's
			// retry gets the same verdict, so the same delivery key.
			td := startDaemonSMTP(t, "[dns]\nresolver = \"127.0.0.1:9\"\n", fmt.Sprintf("listen = [%q]", addr), Options{})
			td.ensureMine(t, "crash")
			cfgPath, socket := td.cfg.File, td.socket
			inbox := filepath.Join(td.store.Path("crash"), "inbox")
			inboundDir := td.cfg.Paths.InboundDir()
			td.stop()

			n := 12
			if tc.big {
				n = 6
			}
			point := tc.point
			var acked map[int]bool
			if strings.HasPrefix(point, "inbound-replayed") {
				// First a crash that leaves copies for the restart to write,
				// then a crash in that restart.
				cmd := startDaemonProcess(t, cfgPath, socket, crashpoint.Env+"=inbound-journaled:3")
				waitSMTP(t, addr)
				acked = sendCrashMessages(addr, 0, n, 2, tc.big)
				waitKilled(t, cmd, "inbound-journaled:3")
				cmd = spawnDaemon(t, cfgPath, crashpoint.Env+"="+point)
				waitKilled(t, cmd, point)
			} else {
				cmd := startDaemonProcess(t, cfgPath, socket, crashpoint.Env+"="+point)
				waitSMTP(t, addr)
				// The arrivals at the point before the one that crashes come
				// one at a time: they are answered, whatever the timing.
				var before int
				fmt.Sscanf(point[strings.IndexByte(point, ':')+1:], "%d", &before)
				acked = sendCrashMessages(addr, 0, n, before-1, tc.big)
				if strings.HasPrefix(point, "intake-synced") {
					// The checkpoint comes within a second; more mail meanwhile.
					for k, v := range sendCrashMessages(addr, n, 4, 0, tc.big) {
						acked[k] = v
					}
				}
				waitKilled(t, cmd, point)
			}

			cmd := startDaemonProcess(t, cfgPath, socket)
			waitSMTP(t, addr)
			// Past its record's fsync, the copy the crash caught is durable:
			// it is there too, though never answered.
			if durable := !strings.HasPrefix(tc.point, "inbound-reserved") && !strings.HasPrefix(tc.point, "intake-appended") &&
				!strings.HasPrefix(tc.point, "intake-synced") && !strings.HasPrefix(tc.point, "intake-spooling"); durable {
				if stored := len(storedCopies(t, inbox, tc.big)); stored <= len(acked) {
					t.Errorf("%d messages stored, %d answered: the copy recorded when the daemon was killed at %s is lost", stored, len(acked), tc.point)
				}
			}
			if len(acked) == 0 && !strings.HasPrefix(tc.point, "intake-synced") {
				t.Errorf("no message was answered 250 before the crash at %s: nothing was checked", tc.point)
			}
			// Each sender that saw no 250 sends its message again, as an
			// MTA retries. A copy the restart wrote from the journal is
			// recognised as the same delivery (it remembered the delivery
			// as it wrote it) and not stored a second time.
			sent := n
			if strings.HasPrefix(point, "intake-synced") {
				sent = n + 4
			}
			for i := range sent {
				if !acked[i] {
					if again := sendCrashMessages(addr, i, 1, 1, tc.big); !again[i] {
						t.Fatalf("message %d, sent again after the restart, was not answered 250", i)
					}
				}
			}
			count := storedCopies(t, inbox, tc.big)
			for i := range sent {
				if count[i] != 1 {
					t.Errorf("message %d is stored %d times after its sender retried, want exactly once (answered before the crash: %v)", i, count[i], acked[i])
				}
			}
			// The index lists each stored copy once: the journal's writes
			// reach it as the first write would have.
			assertIndexMatchesFiles(t, socket, "crash", inbox)
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			// A clean stop leaves the journal empty: every segment holds
			// its magic line only, and no spool file is left.
			segs, _ := filepath.Glob(filepath.Join(inboundDir, "journal.*"))
			for _, s := range segs {
				if st, err := os.Stat(s); err != nil || st.Size() > 64 {
					t.Errorf("%s is %d bytes after a clean stop, want it empty", s, st.Size())
				}
			}
			spools, _ := os.ReadDir(filepath.Join(inboundDir, "spool"))
			for _, e := range spools {
				if st, err := os.Stat(filepath.Join(inboundDir, "spool", e.Name())); !strings.HasPrefix(e.Name(), "free.") || err != nil || st.Size() != 0 {
					t.Errorf("spool file %s left after a clean stop (%v)", e.Name(), err)
				}
			}
		})
	}
}

// assertIndexMatchesFiles checks that a listing of the mailbox's inbox
// (the index) holds each message file of the folder once, and nothing else.
func assertIndexMatchesFiles(t *testing.T, socket, mailbox, inbox string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var l protocol.MessageList
	testwait.For(t, "a listing of the inbox", func() bool {
		err := c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Limit: 200}, &l)
		if err != nil && protocol.CodeOf(err) != protocol.CodeUnavailable {
			t.Fatal(err)
		}
		return err == nil
	})
	listed := map[string]int{}
	for _, m := range l.Messages {
		listed[m.ID]++
	}
	mds, _ := filepath.Glob(filepath.Join(inbox, "*.md"))
	for _, md := range mds {
		id := strings.TrimSuffix(filepath.Base(md), ".md")
		if listed[id] != 1 {
			t.Errorf("message %s is listed %d times by the index, want once", id, listed[id])
		}
		delete(listed, id)
	}
	for id := range listed {
		t.Errorf("the index lists %s, which has no file", id)
	}
	if l.Total != len(mds) {
		t.Errorf("the index counts %d messages in the inbox, the folder holds %d", l.Total, len(mds))
	}
}

// writeBase64 writes data in base64, in lines of 76 characters, as a mail
// client encodes an attachment.
func writeBase64(b *bytes.Buffer, data []byte) {
	enc := base64.StdEncoding.EncodeToString(data)
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\r\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\r\n")
}
