//go:build !race

package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/internal/freeport"
)

// TestLargeMessagePeakRSS runs the daemon as its own process and sends it,
// over SMTP, a 25 MB message whose attachment is most of it, a 25 MB
// plain-text one and a 25 MB one of header fields. Each is streamed end to
// end: spooled as it arrives, the attachment decoded into the mailbox's
// folder as it is parsed, the raw copy written from the spool. The daemon's
// peak resident set stays under twice the message's size, and each is
// stored whole.
func TestLargeMessagePeakRSS(t *testing.T) {
	addr := freeport.TCP(t)
	td := startDaemonSMTP(t, "", fmt.Sprintf("listen = [%q]\nmax_message_bytes = %d", addr, 26<<20), Options{})
	td.ensureMine(t, "big")
	cfgPath, socket, inbox := td.cfg.File, td.socket, filepath.Join(td.store.Path("big"), "inbox")
	td.stop()

	multi, att := attachmentMessage(25 << 20)
	plain := []byte("From: a@sender.example\r\nSubject: big, plain\r\n\r\n" + strings.Repeat(strings.Repeat("x", 74)+"\r\n", (25<<20)/76))
	// Parts whose headers are short fields: go-message keeps each field in
	// a buffer of its own, and this one used to take the daemon past 2 GB.
	fields := []byte("From: a@sender.example\r\nSubject: big, fields\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n" +
		strings.Repeat("--x\r\n"+strings.Repeat("X:b\r\n", 200000)+"\r\nmore\r\n", 26) + "--x--\r\n")
	cases := []struct {
		name string
		msg  []byte
	}{{"attachment", multi}, {"plain", plain}, {"header fields", fields}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := startDaemonProcess(t, cfgPath, socket)
			defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
			start := vmHWM(t, cmd.Process.Pid)
			c, err := smtp.Dial(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.SendMail("a@sender.example", []string{"big@example.test"}, bytes.NewReader(tc.msg)); err != nil {
				t.Fatal(err)
			}
			peak := vmHWM(t, cmd.Process.Pid)
			t.Logf("peak RSS %d MiB (%d MiB at rest) for a %d MiB message: %.2f×", peak>>20, start>>20, len(tc.msg)>>20, float64(peak)/float64(len(tc.msg)))
			if peak > 2*int64(len(tc.msg)) {
				t.Errorf("peak RSS %d MiB, over twice the %d MiB message", peak>>20, len(tc.msg)>>20)
			}
		})
	}
	files, _ := filepath.Glob(filepath.Join(inbox, "*.attachments", "big.bin"))
	if len(files) != 1 {
		t.Fatalf("%d stored attachments, want 1", len(files))
	}
	if got, err := os.ReadFile(files[0]); err != nil || !bytes.Equal(got, att) {
		t.Errorf("stored attachment: %d bytes of %d, %v", len(got), len(att), err)
	}
	raws, _ := filepath.Glob(filepath.Join(inbox, "*.eml"))
	for _, r := range raws {
		if st, err := os.Stat(r); err != nil || st.Size() < 24<<20 {
			t.Errorf("raw copy %s: %v", r, err)
		}
	}
	if len(raws) != len(cases) {
		t.Errorf("%d raw copies, want %d", len(raws), len(cases))
	}
}

// TestConcurrentHTMLPeakRSS sends the daemon, run as its own process, 16
// messages at once over 16 SMTP sessions, each 1 MiB of HTML of short
// elements: the converter holds about 120 times what it converts, and
// conversions side by side used to hold it that many times over (a peak of
// 855 MiB on two processors, the garbage collector pressed by the daemon's
// memory limit). They run as many at a time as there are processors; the
// daemon's peak resident set stays under 512 MiB (285 MiB), and every
// message is stored.
func TestConcurrentHTMLPeakRSS(t *testing.T) {
	const sessions = 16
	addr := freeport.TCP(t)
	td := startDaemonSMTP(t, "", fmt.Sprintf("listen = [%q]", addr), Options{})
	td.ensureMine(t, "html")
	cfgPath, socket, inbox := td.cfg.File, td.socket, filepath.Join(td.store.Path("html"), "inbox")
	td.stop()
	cmd := startDaemonProcess(t, cfgPath, socket)
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	start := vmHWM(t, cmd.Process.Pid)
	msg := []byte("From: a@sender.example\r\nSubject: list\r\nContent-Type: text/html\r\n\r\n" + strings.Repeat("<li>x\r\n", (1<<20)/7))
	errs := make(chan error, sessions)
	for range sessions {
		go func() {
			c, err := smtp.Dial(addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			errs <- c.SendMail("a@sender.example", []string{"html@example.test"}, bytes.NewReader(msg))
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	peak := vmHWM(t, cmd.Process.Pid)
	t.Logf("peak RSS %d MiB (%d MiB at rest) converting %d messages of 1 MiB of HTML at once", peak>>20, start>>20, sessions)
	if peak > 512<<20 {
		t.Errorf("peak RSS %d MiB, over 512 MiB", peak>>20)
	}
	if mds, _ := filepath.Glob(filepath.Join(inbox, "*.md")); len(mds) != sessions {
		t.Errorf("%d messages stored, want %d", len(mds), sessions)
	}
}
