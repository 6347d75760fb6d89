package doctor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testwait"
)

// TestRoleAddressFindings: without postmaster and abuse declared, doctor
// warns for each; a role mailbox a user created (before role names were
// reserved) is reported too.
func TestRoleAddressFindings(t *testing.T) {
	in := newInstall(t)
	data, err := os.ReadFile(in.cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"postmaster", "abuse"} {
		i := bytes.Index(data, []byte("[[mailboxes]]\nname = \""+role+"\""))
		if i < 0 {
			t.Fatalf("setup declared no %s:\n%s", role, data)
		}
		end := bytes.Index(data[i+1:], []byte("\n[")) // the next table
		if end < 0 {
			data = data[:i]
		} else {
			data = append(data[:i:i], data[i+1+end+1:]...)
		}
	}
	if err := os.WriteFile(in.cfg.File, data, 0o640); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(in.cfg.Paths.RegistryDir(), "mailboxes", "admin.json")
	if err := os.WriteFile(reg, []byte(`{"name":"admin","owner_uid":4242,"owner_gid":4242}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, x := range in.check(t) {
		if strings.HasPrefix(x.ID, "role.") {
			got[x.ID] = append(got[x.ID], x.Severity+": "+x.Message)
		}
	}
	if m := got["role.missing"]; len(m) != 2 || !strings.Contains(m[0]+m[1], "postmaster@example.test") || !strings.Contains(m[0]+m[1], "abuse@example.test") {
		t.Errorf("role.missing findings %q, want a warning for postmaster and abuse", m)
	}
	if m := got["role.user_owned"]; len(m) != 1 || !strings.Contains(m[0], "admin@example.test is a mailbox of uid 4242") {
		t.Errorf("role.user_owned findings %q", m)
	}
	if _, ok := got["role.ok"]; ok {
		t.Error("role.ok despite the problems")
	}
}

// Doctor reads a registry mailbox's owner as the daemon does: a link to a
// file elsewhere (left as it was) or a FIFO in its place names no owner,
// never followed nor waited on.
func TestRegisteredRefusesWhatIsNoRegularFile(t *testing.T) {
	cfg := &config.Config{}
	cfg.Paths.StateDir = t.TempDir()
	dir := filepath.Join(cfg.Paths.RegistryDir(), "mailboxes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "precious.json")
	const held = `{"name":"admin","owner_uid":4242}`
	if err := os.WriteFile(other, []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(dir, "linked.json")); err != nil {
		t.Fatal(err)
	}
	testwait.FIFO(t, filepath.Join(dir, "fifo.json"))
	if err := os.WriteFile(filepath.Join(dir, "admin.json"), []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	type owner struct {
		uid uint32
		ok  bool
	}
	for _, c := range []struct {
		name string
		want owner
	}{{"linked", owner{}}, {"fifo", owner{}}, {"admin", owner{4242, true}}} {
		got := testwait.Returns(t, "registered("+c.name+")", func() owner { uid, ok := registered(cfg, c.name); return owner{uid, ok} })
		if got != c.want {
			t.Errorf("registered(%s) = %+v, want %+v", c.name, got, c.want)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != held {
		t.Errorf("the file the link leads to now holds %q", b)
	}
}
