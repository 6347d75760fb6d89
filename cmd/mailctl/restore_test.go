package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// backupOf runs `mailctl backup` of the daemon serving cfgPath and returns
// the archive's path.
func backupOf(t *testing.T, cfgPath string) string {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "backup.tar.gz")
	if _, e, code := mailctl(t, []string{"MAILCTL_SOCKET="}, "backup", "--config", cfgPath, "--output", archive); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, e)
	}
	return archive
}

// TestRestoreSaysTheDaemonSignsWithBothHostsKeys: restored onto a host
// that `mailctl setup` gave keys of its own, the archive's keys were added
// beside them and the daemon signed with both sets, one of which DNS does
// not publish, with nothing said. The restore names both sets of selectors
// and what to do.
func TestRestoreSaysTheDaemonSignsWithBothHostsKeys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("backup and restore are root's")
	}
	cfgA := serveConfig(t, t.TempDir(), freePort(t)) // keys dev-ed25519, dev-rsa
	startServe(t, cfgA)
	archive := backupOf(t, cfgA)

	dirB := t.TempDir()
	if _, err := dkim.GenerateKey(filepath.Join(dirB, "dkim"), "ed202611", "ed25519"); err != nil {
		t.Fatal(err)
	}
	cfgB := serveConfig(t, dirB, freePort(t))
	out, e, code := mailctl(t, nil, "restore", "--config", cfgB, archive)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s%s", code, out, e)
	}
	keys := filepath.Join(dirB, "dkim")
	for _, want := range []string{
		"DKIM keys of two hosts in " + keys + ": the archive's (selectors dev-ed25519, dev-rsa) beside this host's (selectors ed202611)",
		"signs every message with every key there, so with both sets",
		"move the .key files of the set your domains' DNS does not publish out of " + keys,
		"`sudo mailctl dkim dns`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("restore's report lacks %q:\n%s", want, out)
		}
	}

	// Onto a host with no keys of its own, nothing to say.
	dirC := t.TempDir()
	cfgC := serveConfig(t, dirC, freePort(t))
	for _, k := range []string{"dev-ed25519.key", "dev-rsa.key"} {
		os.Remove(filepath.Join(dirC, "dkim", k))
	}
	out, e, code = mailctl(t, nil, "restore", "--config", cfgC, archive)
	if code != 0 || strings.Contains(out, "two hosts") {
		t.Errorf("restore onto a host without keys: exit %d:\n%s%s", code, out, e)
	}
}

// TestRestoredStateCarriesItsFormatStamps: a restore wrote the registry and
// the mailbox tree without their format stamps, so the restored daemon's
// first start took them for files written before stamps (and said so in
// its log), and a release reading another format would have taken them
// for version 1. The backup carries the stamps of the daemon that took it,
// the restore writes them, and the restored daemon starts on them.
func TestRestoredStateCarriesItsFormatStamps(t *testing.T) {
	owner := testusers.Create(t, "mcfmt")
	dirA := t.TempDir()
	cfgA := serveConfig(t, dirA, freePort(t))
	startServe(t, cfgA)
	if _, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + filepath.Join(dirA, "mailctl.sock")}, "mailboxes", "create", "bk", "--owner", owner.Name); code != 0 {
		t.Fatalf("mailboxes create: exit %d: %s", code, e)
	}
	archive := backupOf(t, cfgA)

	dirB := t.TempDir()
	cfgB := serveConfig(t, dirB, freePort(t))
	os.RemoveAll(filepath.Join(dirB, "dkim")) // the archive's keys, alone
	out, e, code := mailctl(t, nil, "restore", "--config", cfgB, archive)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s%s", code, out, e)
	}
	// The unit reads only /etc/mailctl/config.toml: the daemon of another
	// config starts with it named (TestStartCommandFitsTheHost).
	if !strings.Contains(out, "start the daemon (`sudo mailctl serve --config "+cfgB+"`)") {
		t.Errorf("the restore's last line names another way to start the daemon:\n%s", out)
	}
	checkStamps := func(when string) {
		t.Helper()
		for _, s := range []struct {
			kind, dir string
			want      int
		}{{formats.KindRegistry, "registry", formats.Registry}, {formats.KindMailboxes, "mailboxes", formats.Mailboxes}} {
			st, err := formats.ReadStamp(filepath.Join(dirB, "state", s.dir, formats.StampName), s.kind)
			if err != nil || st.Version != s.want || st.WrittenBy != version {
				t.Errorf("%s: the %s stamp is %+v (%v), want version %d written by %s", when, s.kind, st, err, s.want, version)
			}
		}
	}
	checkStamps("after the restore")
	logs := startServe(t, cfgB)
	if strings.Contains(logs.String(), "written before stamps") {
		t.Errorf("the restored daemon took its state for state written before stamps:\n%s", logs.String())
	}
	checkStamps("after the restored daemon's start")
	if _, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + filepath.Join(dirB, "mailctl.sock")}, "mailboxes", "show", "bk"); code != 0 {
		t.Errorf("the restored daemon does not serve bk: exit %d: %s", code, e)
	}
}

// TestRestoreLinesSayHowManyMore: the restore names at most
// backup.MaxListed mailboxes of a kind; its line says how many more there
// are, so that the one line stays short for any number of them.
func TestRestoreLinesSayHowManyMore(t *testing.T) {
	var names []string
	for i := range backup.MaxListed {
		names = append(names, fmt.Sprintf("box%04d", i))
	}
	got := listed(names, backup.MaxListed+50)
	if want := "box0000, box0001, "; !strings.HasPrefix(got, want) {
		t.Errorf("listed: %q, want it to start %q", got, want)
	}
	if want := fmt.Sprintf("box%04d and 50 more (%d in all)", backup.MaxListed-1, backup.MaxListed+50); !strings.HasSuffix(got, want) {
		t.Errorf("listed: %q, want it to end %q", got, want)
	}
	if got := listed([]string{"a", "b"}, 2); got != "a, b" {
		t.Errorf("listed of all: %q, want %q", got, "a, b")
	}
}

// TestStartCommandFitsTheHost: the restore ends by saying how to start the
// daemon. It said `sudo systemctl start mailctl` on a host without systemd
// (where setup says to run mailctl serve) and for a config the unit does not
// read.
func TestStartCommandFitsTheHost(t *testing.T) {
	was := protocol.SystemdRuns
	defer func() { protocol.SystemdRuns = was }()
	for _, c := range []struct {
		cfg     string
		systemd bool
		want    string
	}{
		{"/etc/mailctl/config.toml", true, "sudo systemctl start mailctl"},
		{"/etc/mailctl/config.toml", false, "sudo mailctl serve"},
		{"/srv/mail/config.toml", true, "sudo mailctl serve --config /srv/mail/config.toml"},
		{"/srv/mail/config.toml", false, "sudo mailctl serve --config /srv/mail/config.toml"},
		{"/srv/my mail/config.toml", false, "sudo mailctl serve --config '/srv/my mail/config.toml'"},
	} {
		protocol.SystemdRuns = func() bool { return c.systemd }
		if got := startCommand(c.cfg); got != c.want {
			t.Errorf("startCommand(%q, systemd %v) = %q, want %q", c.cfg, c.systemd, got, c.want)
		}
	}
}
