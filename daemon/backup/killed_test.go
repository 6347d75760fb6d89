package backup

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/crashpoint"
)

// The child process of TestKilledRestoreLeavesNothingBehind reads these.
const (
	envChildArchive = "MAILCTL_TEST_RESTORE_ARCHIVE"
	envChildState   = "MAILCTL_TEST_RESTORE_STATE"
)

func selfOwner(string) (uint32, uint32, error) {
	return uint32(os.Getuid()), uint32(os.Getgid()), nil
}

// TestRestoreChild is the restore TestKilledRestoreLeavesNothingBehind
// kills; run alone, it skips.
func TestRestoreChild(t *testing.T) {
	arch := os.Getenv(envChildArchive)
	if arch == "" {
		t.Skip("the child process of TestKilledRestoreLeavesNothingBehind")
	}
	f, err := os.Open(arch)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Restore(f, RestoreOptions{StateDir: os.Getenv(envChildState), LookupUser: selfOwner})
	t.Fatalf("the restore was not killed at its crash point: %v", err)
}

// TestKilledRestoreLeavesNothingBehind kills a restore (SIGKILL, in a child
// process) right after it staged its first file. The staging directory it
// leaves is removed by the next restore, which then finishes with every
// file in place and nothing of the killed one left.
func TestKilledRestoreLeavesNothingBehind(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	names := []string{"2026-01-01-000000-a.md", "2026-01-01-000000-b.md"}
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirMailboxes + "agent/inbox/" + names[0], data: "+++\n+++\n"},
		entry{name: prefix + dirMailboxes + "agent/inbox/" + names[1], data: "+++\n+++\n"})
	arch := filepath.Join(t.TempDir(), "backup.tar.gz")
	if err := os.WriteFile(arch, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildArchive+"="+arch, envChildState+"="+state, crashpoint.Env+"=restore-staged")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child restore: %v, want killed by SIGKILL\n%s", err, out)
	}
	staged, _ := filepath.Glob(filepath.Join(state, stagingPrefix+"*"))
	if len(staged) != 1 {
		t.Fatalf("the killed restore left %d staging directories, want 1 (the crash point is not where the test thinks)", len(staged))
	}

	if _, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, LookupUser: selfOwner}); err != nil {
		t.Fatalf("restore after the killed one: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(state, stagingPrefix+"*")); len(left) != 0 {
		t.Errorf("staging directories left after the next restore: %v", left)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(state, "mailboxes", "agent", "inbox", n)); err != nil {
			t.Errorf("restored file: %v", err)
		}
	}
}

// TestRemoveStagingLeavesOtherEntries: only staging directories go; the
// state's own parts and other temporary entries stay.
func TestRemoveStagingLeavesOtherEntries(t *testing.T) {
	state := t.TempDir()
	for _, d := range []string{stagingPrefix + "1/mailboxes/agent/inbox", stagingPrefix + "2", "mailboxes/agent/inbox", "registry"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "restore-notes"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := RemoveStaging(state)
	if err != nil || n != 2 {
		t.Fatalf("RemoveStaging = %d, %v; want 2", n, err)
	}
	for _, keep := range []string{"mailboxes/agent/inbox", "registry", "restore-notes"} {
		if _, err := os.Stat(filepath.Join(state, keep)); err != nil {
			t.Errorf("%s: %v", keep, err)
		}
	}
	if n, err := RemoveStaging(filepath.Join(state, "absent")); err != nil || n != 0 {
		t.Errorf("RemoveStaging of a missing directory = %d, %v", n, err)
	}
}

// TestRestoreKilledWhileSwappingIsNotTakenForState kills a restore (SIGKILL,
// in a child process) after it moved the archive's mailboxes into the state
// directory and before its registry: the state is part old, part restored.
// The state says so until a restore finishes, so that a daemon start
// refuses it rather than serve mailboxes without their registry entries and
// drop the archive's staged rest; the restore run again puts every part in
// place and clears the mark.
func TestRestoreKilledWhileSwappingIsNotTakenForState(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	name := "2026-01-01-000000-a.md"
	reg := `{"id":"m-1","name":"agent","owner_uid":1234,"owner_gid":1234,"created_at":"2026-01-01T00:00:00Z","created_by":0}`
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirRegMboxes + "agent.json", data: reg},
		entry{name: prefix + dirMailboxes + "agent/inbox/" + name, data: "+++\n+++\n"})
	arch := filepath.Join(t.TempDir(), "backup.tar")
	if err := os.WriteFile(arch, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildArchive+"="+arch, envChildState+"="+state, crashpoint.Env+"=restore-swapping")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child restore: %v, want killed by SIGKILL\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(state, "mailboxes", "agent", "inbox", name)); err != nil {
		t.Fatalf("the crash point is not after the mailboxes moved in: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "registry")); !os.IsNotExist(err) {
		t.Fatalf("the crash point is not before the registry moved in: %v", err)
	}
	if err := CheckIncomplete(state); err == nil {
		t.Fatal("CheckIncomplete = nil after a restore killed half-way through putting its state in place")
	}

	if _, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, LookupUser: selfOwner, Force: true}); err != nil {
		t.Fatalf("restore after the killed one: %v", err)
	}
	if err := CheckIncomplete(state); err != nil {
		t.Errorf("CheckIncomplete after a whole restore: %v", err)
	}
	for _, p := range []string{"mailboxes/agent/inbox/" + name, "registry/mailboxes/agent.json"} {
		if _, err := os.Stat(filepath.Join(state, p)); err != nil {
			t.Errorf("restored file: %v", err)
		}
	}
}
