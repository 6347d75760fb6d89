package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon"
	"github.com/mailctl/mailctl/internal/freeport"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/protocol"
)

// TestMain lets the test binary run as the mailctl binary itself, so the
// smoke tests exercise the real command line without a separate build.
func TestMain(m *testing.M) {
	if out := os.Getenv("MAILCTL_TEST_EDITOR_PROBE"); out != "" {
		os.Exit(editorProbe(out, os.Args[1:]))
	}
	if os.Getenv("MAILCTL_AS_BINARY") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// mailctl runs the binary with args and returns stdout, stderr and the exit code.
func mailctl(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "MAILCTL_AS_BINARY=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func freePort(t *testing.T) string { return freeport.TCP(t) }

// serveConfig writes the config of a `mailctl serve` with every path under
// dir, SMTP on smtpAddr (with smtpLines added to its section) and no DNS,
// and the DKIM keys it loads; it returns the config's path.
func serveConfig(t *testing.T, dir, smtpAddr string, smtpLines ...string) string {
	t.Helper()
	if err := daemon.EnsureDevKeys(filepath.Join(dir, "dkim")); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	cfg := fmt.Sprintf(`hostname = "mx.example.com"
domains = ["example.com"]
[paths]
state_dir = %q
socket = %q
dkim_dir = %q
[smtp]
listen = [%q]
%s[dns]
resolver = "127.0.0.1:9"
`, filepath.Join(dir, "state"), filepath.Join(dir, "mailctl.sock"), filepath.Join(dir, "dkim"), smtpAddr, strings.Join(append(smtpLines, ""), "\n"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

// startServe runs `mailctl serve --config cfgPath` until the test ends and
// returns its log once it is ready.
func startServe(t *testing.T, cfgPath string) *testproc.Output {
	t.Helper()
	serve := exec.Command(os.Args[0], "serve", "--config", cfgPath)
	serve.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	var logs testproc.Output
	serve.Stderr = &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill(); serve.Wait() })
	waitLog(t, &logs, "mailctl daemon ready", 1)
	return &logs
}

// startDev runs `mailctl dev` and waits until its socket answers and its
// banner is out. The returned Proc is the process's one waiter.
func startDev(t *testing.T, dir string, extra ...string) (*testproc.Proc, *testproc.Output, string) {
	t.Helper()
	smtp := freePort(t)
	args := append([]string{"dev", "--dir", dir, "--smtp", smtp}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	var out, errb testproc.Output
	cmd.Stdout = &out
	cmd.Stderr = &errb
	p := &testproc.Proc{}
	if err := p.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill9)
	sock := filepath.Join(dir, "mailctl.sock")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			if strings.Contains(out.String(), "Ctrl-C") {
				break
			}
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("mailctl dev did not answer on %s; stderr:\n%s", sock, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p, &out, sock
}

func TestDevSmoke(t *testing.T) {
	dir := t.TempDir()
	dev, banner, sock := startDev(t, dir)
	env := []string{"MAILCTL_SOCKET=" + sock}

	out, errOut, code := mailctl(t, env, "mailboxes", "list", "--json")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	var list protocol.MailboxList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list --json is not JSON: %v\n%s", err, out)
	}
	// The user's mailbox, and "captured", where outbound mail to other
	// domains lands.
	if len(list.Mailboxes) != 2 || list.Mailboxes[0].Name != "agent" || list.Mailboxes[0].Address != "agent@mailctl.test" || list.Mailboxes[1].Name != "captured" {
		t.Fatalf("dev mailboxes: %+v", list.Mailboxes)
	}
	for _, want := range []string{"agent@mailctl.test", sock, "MAILCTL_SOCKET=" + sock, "mcp"} {
		if !strings.Contains(banner.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, banner.String())
		}
	}

	if _, e, code := mailctl(t, env, "mailboxes", "create", "scratch"); code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	out, _, code = mailctl(t, env, "mailboxes", "show", "scratch", "--json")
	var m protocol.Mailbox
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil || m.Address != "scratch@mailctl.test" || m.OwnerUID != uint32(os.Getuid()) {
		t.Fatalf("show: exit %d, %s", code, out)
	}
	if _, e, code := mailctl(t, env, "mailboxes", "delete", "scratch"); code != 0 {
		t.Fatalf("delete: %d %s", code, e)
	}
	if _, e, code := mailctl(t, env, "mailboxes", "show", "scratch"); code != 3 || !strings.Contains(e, "not_found") {
		t.Fatalf("show after delete: exit %d, %s (want not_found, exit 3)", code, e)
	}

	// The socket refuses a second daemon on the same directory.
	if _, e, code := mailctl(t, nil, "dev", "--dir", dir, "--smtp", freePort(t)); code == 0 || !strings.Contains(e, "another mailctl daemon") {
		t.Errorf("second daemon: exit %d, %s", code, e)
	}

	syscall.Kill(dev.PID(), syscall.SIGTERM)
	select {
	case <-dev.Done():
		if st := dev.State(); !st.Success() {
			t.Errorf("dev exited with %v after SIGTERM", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("dev did not exit after SIGTERM")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after shutdown: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "mailctl.sock")
	// A socket file nobody answers on, as left by a crash.
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	startDev(t, dir)
	if out, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "version"); code != 0 || !strings.Contains(out, "daemon: mailctl") {
		t.Fatalf("version after stale socket: %d %s %s", code, out, e)
	}
}

func TestClientWithoutDaemonSaysHowToStart(t *testing.T) {
	_, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + filepath.Join(t.TempDir(), "none.sock")}, "mailboxes", "list")
	if code != 75 || !strings.Contains(e, "mailctl dev") || !strings.Contains(e, protocol.StartCommand()) {
		t.Fatalf("exit %d, %q: want exit 75 and the fix", code, e)
	}
}

// With a dev instance stopped, its socket's advice is the dev command that
// starts it again (the banner's binary, its folder and address), never
// systemctl.
func TestStoppedDevSaysHowToStartIt(t *testing.T) {
	dir := t.TempDir()
	dev, banner, sock := startDev(t, dir)
	smtpAddr := regexp.MustCompile(`127\.0\.0\.1:\d+`).FindString(banner.String())
	dev.Stop(10 * time.Second)
	_, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "mailboxes", "list")
	want := "start it again with `" + filepath.Join(dir, "bin", "mailctl") + " dev --dir " + dir + " --smtp " + smtpAddr + "`"
	if code != 75 || !strings.Contains(e, want) || strings.Contains(e, "systemctl") {
		t.Fatalf("exit %d, %q\nwant exit 75 and %s", code, e, want)
	}
}

func TestHelpListsCommands(t *testing.T) {
	out, _, code := mailctl(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"serve", "dev", "mailboxes", "version"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if _, _, code := mailctl(t, nil, "no-such-command"); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
}

// TestDevBannerNamesTheBoundSMTPAddress: with --smtp on port 0 the banner
// names the port the kernel chose, so its swaks line reaches the server.
func TestDevBannerNamesTheBoundSMTPAddress(t *testing.T) {
	_, banner, _ := startDev(t, t.TempDir(), "--smtp", "127.0.0.1:0")
	m := regexp.MustCompile(`swaks --server (\S+) `).FindStringSubmatch(banner.String())
	if m == nil || strings.HasSuffix(m[1], ":0") {
		t.Fatalf("the banner's swaks line names %q:\n%s", m, banner.String())
	}
	c, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatalf("the banner's SMTP address %s: %v", m[1], err)
	}
	defer c.Close()
	greeting, err := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(greeting, "220 ") {
		t.Errorf("%s greeted %q, %v", m[1], greeting, err)
	}
}

// TestDevDirCopiedWhenStoppedIsItsBackup: what `mailctl backup` tells a dev
// user to do instead, a copy of a stopped instance's --dir, brings back its
// mailboxes and their mail, found by a search too, in a new instance run
// on the copy.
func TestDevDirCopiedWhenStoppedIsItsBackup(t *testing.T) {
	dir := t.TempDir()
	dev, _, sock := startDev(t, dir)
	env := []string{"MAILCTL_SOCKET=" + sock}
	if _, e, code := mailctl(t, env, "mailboxes", "create", "kept"); code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	if _, e, code := mailctl(t, env, "drafts", "create", "kept", "--to", "someone@example.com", "--subject", "copied along", "--body", "a quokka in the copy"); code != 0 {
		t.Fatalf("drafts create: %d %s", code, e)
	}
	dev.Stop(20 * time.Second)
	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	_, _, sock = startDev(t, copyDir)
	env = []string{"MAILCTL_SOCKET=" + sock}
	if out, e, code := mailctl(t, env, "mailboxes", "show", "kept", "--json"); code != 0 || !strings.Contains(out, `"kept@mailctl.test"`) {
		t.Fatalf("the copy's mailbox: exit %d\n%s%s", code, out, e)
	}
	if out, e, code := mailctl(t, env, "mail", "list", "--mailbox", "kept", "--folder", "drafts", "--text", "quokka", "--json"); code != 0 || !strings.Contains(out, "copied along") {
		t.Fatalf("the copy's draft, searched: exit %d\n%s%s", code, out, e)
	}
}

// TestDevBannerSaysHowToReload: dev re-reads DIR/config.toml on `mailctl
// reload PID` (docs/configuration.md), and its banner names the file and
// the line with its PID, which a newcomer had to find with pgrep (and go
// run's own process, the first pgrep finds, is not the daemon).
func TestDevBannerSaysHowToReload(t *testing.T) {
	dir := t.TempDir()
	_, banner, _ := startDev(t, dir)
	m := regexp.MustCompile(`config +(\S+) .*to apply an edit now: (\S+ reload \d+)\)`).FindStringSubmatch(banner.String())
	if m == nil || m[1] != filepath.Join(dir, "config.toml") {
		t.Fatalf("the banner names no config and reload line (%q):\n%s", m, banner.String())
	}
	b, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), `trusted_senders = ["*@mailctl.test"]`, `trusted_senders = ["*@mailctl.test", "*@example.net"]`, 1)
	if edited == string(b) {
		t.Fatalf("no trusted_senders line to edit in %s:\n%s", m[1], b)
	}
	if err := os.WriteFile(m[1], []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", m[2])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "MAILCTL_AS_BINARY=1"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "applied trust.trusted_senders") {
		t.Fatalf("the banner's %q: %v\n%s", m[2], err, out)
	}
}
