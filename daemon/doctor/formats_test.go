package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/protocol"
)

// doctor says each format's version in one line; a newer one or a damaged
// stamp is a failure with the daemon's own message, and a config of a newer
// format is named as such, not as a parse error.
func TestDoctorReportsFormatVersions(t *testing.T) {
	in := newInstall(t)
	find := func(id string) *protocol.Finding {
		for _, f := range in.check(t) {
			if f.ID == id {
				return &f
			}
		}
		return nil
	}
	// A fresh install, as setup leaves it: nothing written by a daemon yet.
	f := find("format.versions")
	if f == nil || f.Message != "formats: config 1, registry 1 (stamped at the next start), mailboxes 1 (stamped at the next start), queue journal none yet, index none yet, deliveries none yet" {
		t.Fatalf("fresh install: %+v", f)
	}
	q, err := queue.Open(in.cfg.Paths.QueueDir(), deferAll{}, nil, queue.Options{Clock: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	for _, d := range []string{in.cfg.Paths.RegistryDir(), in.cfg.Paths.MailboxesDir()} {
		if err := formats.WriteStamp(filepath.Join(d, formats.StampName), filepath.Base(d), 1, "1.2.3"); err != nil {
			t.Fatal(err)
		}
	}
	if f := find("format.versions"); f == nil || !strings.Contains(f.Message, "registry 1, mailboxes 1, queue journal 1,") {
		t.Fatalf("stamped: %+v", f)
	}

	reg := filepath.Join(in.cfg.Paths.RegistryDir(), formats.StampName)
	os.WriteFile(reg, []byte("mailctl registry format 2\nwritten by mailctl 2.0.0\n"), 0o600)
	if f := find("format.newer"); f == nil || f.Severity != Fail || !strings.Contains(f.Message, "run mailctl 2.0.0 (which wrote it) or later") || find("format.versions") != nil {
		t.Fatalf("newer registry: %+v", f)
	}
	os.WriteFile(reg, []byte("garbage\n"), 0o600)
	if f := find("format.damaged"); f == nil || f.Severity != Fail || !strings.Contains(f.Message, reg) {
		t.Fatalf("damaged stamp: %+v", f)
	}
	os.Remove(reg)

	journal := filepath.Join(in.cfg.Paths.QueueDir(), "journal")
	raw, _ := os.ReadFile(journal)
	os.WriteFile(journal, append([]byte("mailctl queue journal 7\n"), raw[len("mailctl queue journal 1\n"):]...), 0o600)
	if f := find("format.newer"); f == nil || !strings.Contains(f.Message, "the queue journal") || find("queue.unreadable") != nil {
		t.Fatalf("newer journal: %+v", f)
	}
	os.WriteFile(journal, raw, 0o600)

	cfgText, _ := os.ReadFile(in.cfg.File)
	os.WriteFile(in.cfg.File, append([]byte("format = 5\n"), cfgText...), 0o640)
	_, fs := CheckFile(context.Background(), in.cfg.File, in.env)
	var got *protocol.Finding
	for _, f := range fs {
		if f.ID == "format.newer" {
			got = &f
		}
	}
	if got == nil || !strings.Contains(got.Message, "the config "+in.cfg.File+" is format version 5") {
		t.Fatalf("newer config: %+v", fs)
	}
}

// A restore stopped while it put the archive's state in place leaves its
// mark, and the daemon refuses to start on that state: doctor says so, and
// what to run, instead of only that the daemon is down.
func TestDoctorReportsAnIncompleteRestore(t *testing.T) {
	in := newInstall(t)
	find := func() *protocol.Finding {
		for _, f := range in.check(t) {
			if f.ID == "restore.incomplete" {
				return &f
			}
		}
		return nil
	}
	if f := find(); f != nil {
		t.Fatalf("a fresh install: %+v", f)
	}
	mark := filepath.Join(in.cfg.Paths.StateDir, backup.IncompleteName)
	if err := os.WriteFile(mark, []byte("restore of x.tar.gz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := find(); f == nil || f.Severity != Fail || !strings.Contains(f.Fix, "mailctl restore --force") {
		t.Fatalf("after a restore stopped half-way: %+v", f)
	}
}
