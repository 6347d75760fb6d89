package mcpshim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// plantFIFO makes path a FIFO and arms a watchdog that, should a reader
// block on it for 10 seconds, releases the reader and records that it
// blocked. The reader in a fixed shim never blocks, so the watchdog never
// fires.
func plantFIFO(t *testing.T, path string) *atomic.Bool {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	var blocked atomic.Bool
	w := time.AfterFunc(10*time.Second, func() {
		blocked.Store(true)
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Write([]byte("released by the watchdog"))
			f.Close()
		}
	})
	t.Cleanup(func() { w.Stop() })
	return &blocked
}

// TestFIFOAttachmentsNeverHang swaps an attachment file, a file to attach
// and a token file for FIFOs: every tool answers at once with an error
// (the shim may run as root, whom a FIFO blocks like anyone).
func TestFIFOAttachmentsNeverHang(t *testing.T) {
	e := newEnv(t)
	e.d.Mailbox(t, "boss")
	id := e.deliver("agent", testdaemon.Message{From: "x@evil.test", Subject: "fifo",
		Attachments: []testdaemon.Attachment{{Filename: "a.txt", ContentType: "text/plain", Data: []byte("hello")}}})
	var m protocol.Message
	e.d.Call(t, protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "agent", ID: id}, &m)
	att := plantFIFO(t, m.AttachmentList[0].Path)
	e.fail("email_attachment", map[string]any{"mailbox": "agent", "id": id}, protocol.CodeForbidden)
	e.fail("email_attachment", map[string]any{"mailbox": "agent", "id": id, "mode": "base64"}, protocol.CodeForbidden)
	e.fail("email_forward", map[string]any{"mailbox": "agent", "id": id, "to": "boss@example.test"}, protocol.CodeForbidden)
	local := filepath.Join(t.TempDir(), "report.pdf")
	send := plantFIFO(t, local)
	e.fail("email_send", map[string]any{"from_mailbox": "agent", "to": "boss@example.test", "subject": "s", "body": "b", "attachments": []string{local}}, protocol.CodeInvalidInput)
	token := filepath.Join(t.TempDir(), "token")
	tok := plantFIFO(t, token)
	if _, err := ReadTokenFile(token); err == nil {
		t.Error("a FIFO token file was read")
	}
	for what, blocked := range map[string]*atomic.Bool{"attachment": att, "file to attach": send, "token file": tok} {
		if blocked.Load() {
			t.Errorf("opening a FIFO %s blocked until the watchdog released it", what)
		}
	}
}

// A file the kernel can poll is refused when it is opened, before a byte is
// read: /proc/kmsg is a regular file whose read blocks until the kernel
// logs (and takes the message from the system log), so a shim run by root
// that read it for email_send would never answer. /proc/self/mountinfo is
// such a file anyone may open (it never blocks, but is no file of data
// either).
func TestPollableKernelFilesAreRefused(t *testing.T) {
	// /proc/PID, not /proc/self: the latter is a link, which a shim run by
	// root refuses on a path before anything else (TestRootFollowsNoLink).
	paths := []string{fmt.Sprintf("/proc/%d/mountinfo", os.Getpid())}
	if f, err := os.Open("/proc/kmsg"); err == nil { // root; opening reads nothing
		f.Close()
		paths = append(paths, "/proc/kmsg")
	}
	for _, p := range paths {
		f, err := openRegular(p)
		if err == nil {
			f.Close()
			t.Errorf("%s was opened as a file to read", p)
		} else if !errors.Is(err, errNotRegular) {
			t.Errorf("%s: %v", p, err)
		}
	}
	// A file on disk is read as ever.
	p := filepath.Join(t.TempDir(), "report.txt")
	os.WriteFile(p, []byte("numbers"), 0o600)
	if b, full, err := ReadRegularFile(p, 100); err != nil || !full || string(b) != "numbers" {
		t.Errorf("a file on disk: %q %v %v", b, full, err)
	}
}
