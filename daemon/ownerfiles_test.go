//go:build !race

package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// plantedSize is the size of each file the owner plants: under the store's
// 64 MiB limit for a message file, over every send limit.
const plantedSize = 63 << 20

// ownerFilesGrowth bounds how much the daemon's peak resident set may grow
// under the attack below: below one planted file, so a single file read
// whole crosses it, let alone the 16 requests at a time that each used to
// read one (what the 68 requests legitimately hold peaks near 20 MiB).
const ownerFilesGrowth = 48 << 20

// TestOwnerFilesAreBoundedBeforeTheyAreRead: a mailbox's files are its
// owner's, who can make any of them a 63 MiB sparse file. The daemon, as
// its own process, gets 16 concurrent requests of each kind that reads
// one: draft.send of a draft listing a 63 MiB attachment, and of a draft
// whose Markdown file is 63 MiB (both refused from fstat, naming the file
// and the limit); a dry-run reply to a message whose file is 63 MiB (its
// frontmatter is all that is read); message.mark and message.read of it.
// The daemon's peak RSS grows by less than ownerFilesGrowth (one such
// draft.send used to take it to 554 MB).
func TestOwnerFilesAreBoundedBeforeTheyAreRead(t *testing.T) {
	// 68 connections at once from the user running the test: more than one
	// user other than root may hold by default.
	td := startDaemon(t, "[control]\nmax_connections_per_uid = 128\n")
	td.ensureMine(t, "big")
	parent, _, err := td.store.Deliver("big", "inbox", &store.Message{MessageID: "parent@example.test", From: "a@example.net",
		Subject: "parent", ReceivedAt: time.Now()}, "hello", []byte("Subject: parent\r\n\r\nhello\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	folder := func(f string) string { return filepath.Join(td.store.Path("big"), f) }
	sparse := func(path string, head []byte) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(head); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(plantedSize); err != nil {
			t.Fatal(err)
		}
	}
	// The parent's body becomes 63 MiB of NULs after its frontmatter.
	m, _, err := td.store.Get("big", "inbox", parent)
	if err != nil {
		t.Fatal(err)
	}
	sparse(filepath.Join(folder("inbox"), parent+".md"), store.Render(m, "hello\n"))

	draft := func(subject string) (string, *store.Message) {
		t.Helper()
		var d protocol.Draft
		if err := td.call(t, protocol.VerbDraftCreate, protocol.DraftArgs{Mailbox: "big", To: []string{"x@remote.test"}, Subject: subject, Body: "b"}, &d); err != nil {
			t.Fatal(err)
		}
		m, _, err := td.store.Get("big", "drafts", d.ID)
		if err != nil {
			t.Fatal(err)
		}
		return d.ID, m
	}
	// 16 drafts listing a 63 MiB attachment of their owner's, and 16 whose
	// own file is 63 MiB (one send of a draft at a time: each request has
	// its own).
	var withAtt, bigBody []string
	for i := range 16 {
		id, m := draft(fmt.Sprintf("attachment %d", i))
		attDir := filepath.Join(folder("drafts"), id+".attachments")
		if err := os.Mkdir(attDir, 0o700); err != nil {
			t.Fatal(err)
		}
		sparse(filepath.Join(attDir, "big.bin"), nil)
		m.Attachments = []store.Attachment{{Filename: "big.bin", ContentType: "application/octet-stream", Size: plantedSize, Path: id + ".attachments/big.bin"}}
		if err := os.WriteFile(filepath.Join(folder("drafts"), id+".md"), store.Render(m, "b"), 0o600); err != nil {
			t.Fatal(err)
		}
		withAtt = append(withAtt, id)
		id, m = draft(fmt.Sprintf("body %d", i))
		sparse(filepath.Join(folder("drafts"), id+".md"), store.Render(m, "b"))
		bigBody = append(bigBody, id)
	}

	cfgPath, socket := td.cfg.File, td.socket
	td.stop()
	// The daemon's collector keeps its heap near what is live once past
	// this soft limit, so the peak below measures what the requests hold,
	// not how far garbage got ahead of the collector on a loaded machine.
	// A file read whole is live while it is held, limit or not.
	t.Setenv("GOMEMLIMIT", "24MiB")
	cmd := startDaemonProcess(t, cfgPath, socket)
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	start := vmHWM(t, cmd.Process.Pid)

	type attack struct {
		verb  string
		args  any
		check func(err error) error
	}
	refused := func(file, key string) func(error) error {
		return func(err error) error {
			if protocol.CodeOf(err) != protocol.CodeTooLarge || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), key) {
				return fmt.Errorf("%v, want too_large naming %s and %s", err, file, key)
			}
			return nil
		}
	}
	ok := func(err error) error { return err }
	var wg sync.WaitGroup
	for i := range 16 {
		attacks := []attack{
			{protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "big", ID: withAtt[i], DryRun: true}, refused("big.bin", "send.max_attachment_bytes")},
			{protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: "big", ID: bigBody[i], DryRun: true}, refused(bigBody[i]+".md", "send.max_message_bytes")},
			{protocol.VerbSend, protocol.SendArgs{FromMailbox: "big", ReplyToID: parent, Body: "re", DryRun: true}, ok},
			{protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "big", ID: parent, MaxChars: 1000}, ok},
		}
		for _, a := range attacks {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				c, err := protocol.Dial(ctx, socket)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				if err := a.check(c.Call(ctx, a.verb, a.args, nil)); err != nil {
					t.Errorf("%s: %v", a.verb, err)
				}
			})
		}
		if i < 4 { // each rewrites 63 MiB on disk
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				c, err := protocol.Dial(ctx, socket)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				if err := c.Call(ctx, protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "big", IDs: []string{parent}, Read: i%2 == 0}, nil); err != nil {
					t.Errorf("mark: %v", err)
				}
			})
		}
	}
	wg.Wait()
	peak := vmHWM(t, cmd.Process.Pid)
	t.Logf("daemon peak RSS: %d MiB after start, %d MiB after the attack (growth bound %d MiB, each file %d MiB)", start>>20, peak>>20, ownerFilesGrowth>>20, plantedSize>>20)
	if peak-start > ownerFilesGrowth {
		t.Errorf("daemon peak RSS grew by %d MiB, over %d MiB", (peak-start)>>20, ownerFilesGrowth>>20)
	}
	// Marking rewrote the frontmatter (read_at comes and goes) and kept the body.
	if fi, err := os.Stat(filepath.Join(folder("inbox"), parent+".md")); err != nil || fi.Size() < plantedSize-1024 || fi.Size() > plantedSize+1024 {
		t.Errorf("the marked message's file: %v, size %d; want its %d-byte body kept", err, fi.Size(), plantedSize)
	}
}
