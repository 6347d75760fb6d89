package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
)

// TestDeclaredHookARunWouldRefuseStopsStart: a [[hooks]] table that a run
// refuses (a timeout past 600 s, an unknown event, a cmd not an absolute
// path) was logged as skipped at every delivery and never ran, while the
// daemon started and reloads succeeded. Start and reload now refuse it,
// naming the hook and what is wrong.
func TestDeclaredHookARunWouldRefuseStopsStart(t *testing.T) {
	box := "[[mailboxes]]\nname = \"support\"\nowner = \"root\"\n"
	for _, tt := range []struct{ hook, want string }{
		{"timeout_secs = 601\nevent = \"on_receive\"\ncmd = [\"/bin/true\"]\n", "timeout_secs 601 is out of range"},
		{"event = \"on_recieve\"\ncmd = [\"/bin/true\"]\n", `unknown event "on_recieve"`},
		{"event = \"on_receive\"\ncmd = [\"wake-agent\"]\n", "is not an absolute path"},
	} {
		dir := testusers.SharedDir(t)
		path := filepath.Join(dir, "config.toml")
		text := "hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n" + box + "[[hooks]]\nname = \"wake\"\nmailbox = \"support\"\n" + tt.hook +
			fmt.Sprintf("[paths]\nstate_dir = %q\nsocket = %q\ndkim_dir = %q\n[smtp]\nlisten = [\"127.0.0.1:0\"]\n",
				filepath.Join(dir, "state"), filepath.Join(dir, "run", "mailctl.sock"), filepath.Join(dir, "dkim"))
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err = New(cfg, Options{Logger: quietLogger(t)}); err == nil {
			t.Fatalf("%q: the daemon started", tt.hook)
		}
		if !strings.Contains(err.Error(), `hooks[0] "wake" on mailbox "support"`) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v; want it to name the hook and %q", tt.hook, err, tt.want)
		}
	}

	td := startDaemon(t, box+"[[hooks]]\nname = \"wake\"\nmailbox = \"support\"\nevent = \"on_receive\"\ncmd = [\"/bin/true\"]\n")
	text, err := os.ReadFile(td.cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(text), "cmd = [\"/bin/true\"]", "cmd = [\"/bin/true\"]\ntimeout_secs = 3600", 1)
	if err := os.WriteFile(td.cfg.File, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(td.cfg.File); err == nil || !strings.Contains(err.Error(), "timeout_secs 3600") {
		t.Fatalf("reload with a hook a run refuses: %v", err)
	}
	if hs := td.allHooks(); len(hs) != 1 || hs[0].TimeoutSecs != 60 {
		t.Errorf("the running hooks after the refused reload: %+v", hs)
	}
}
