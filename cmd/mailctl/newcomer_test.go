package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// readmeCommands returns the commands of README.md's sh blocks, in order.
func readmeCommands(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		for _, l := range strings.Split(strings.TrimSpace(m[1]), "\n") {
			cmds = append(cmds, strings.TrimSpace(l))
		}
	}
	return cmds
}

// bannerLines are the command lines dev prints under "Try it" and "Wire it".
func bannerLines(banner string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(banner, "\n") {
		switch {
		case strings.HasPrefix(l, "Try it"), strings.HasPrefix(l, "Wire it"):
			in = true
		case in && strings.HasPrefix(l, "  ") && strings.TrimSpace(l) != "":
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

var raceBuild bool

// newcomer is the ordinary user who walks the README: the test's own user,
// or, when the tests run as root, a throwaway user with its own copy of the
// module (vendored, since root's module cache is private) and build cache.
type newcomer struct {
	home, root string
	as         func(*exec.Cmd) *exec.Cmd
	env        []string // what a login shell has: PATH (with go), HOME
}

func newNewcomer(t *testing.T, module string) newcomer {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	goBin, _ = filepath.EvalSymlinks(goBin)
	path := "PATH=" + filepath.Dir(goBin) + ":/usr/local/bin:/usr/bin:/bin"
	if os.Geteuid() != 0 {
		home := t.TempDir()
		testusers.QuietGo(t, home)
		env := []string{path, "HOME=" + home}
		// The user's own caches, as their shell has them.
		for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
			if v, _ := exec.Command("go", "env", k).Output(); len(v) > 0 {
				env = append(env, k+"="+strings.TrimSpace(string(v)))
			}
		}
		return newcomer{home: home, root: module, as: func(c *exec.Cmd) *exec.Cmd { return c }, env: env}
	}
	u := testusers.Create(t, "mcnew")
	src := filepath.Join(u.Home, "mailctl")
	files, err := exec.Command("git", "-C", module, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("needs a git checkout to copy the module for the user: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(module, f))
		if err != nil {
			continue // deleted in the work tree
		}
		os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755)
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vend := exec.Command("go", "mod", "vendor")
	vend.Dir = src
	vend.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := vend.CombinedOutput(); err != nil {
		t.Fatalf("go mod vendor: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", u.UID, u.GID), u.Home).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	return newcomer{home: u.Home, root: src, as: func(c *exec.Cmd) *exec.Cmd { return testusers.As(c, u.UID, u.GID) },
		env: []string{path, "HOME=" + u.Home, "GOTOOLCHAIN=local"}}
}

// shell runs line with /bin/sh as the newcomer, in an environment with
// nothing of the test's: no MAILCTL_* variables, a login shell's PATH.
func (n newcomer) shell(line string) (string, error) {
	cmd := n.as(exec.Command("/bin/sh", "-c", line))
	cmd.Env = n.env
	cmd.Dir = n.home
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// build compiles mailctl into the newcomer's build cache and waits for the
// compiler to finish. The newcomer's cache starts empty, and a build of
// everything (SQLite's translated C among it) takes minutes on a loaded
// machine: counted against the wait for dev's banner, it made that wait
// run out while go run was still compiling. go run then finds what it
// builds in the cache, and the wait is for dev alone.
func (n newcomer) build(t *testing.T) {
	t.Helper()
	cmd := n.as(exec.Command("go", "build", "-o", os.DevNull, "./cmd/mailctl"))
	cmd.Dir = n.root
	cmd.Env = n.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/mailctl as the newcomer: %v\n%s", err, out)
	}
}

// readmeDev runs README's first command (with --dir and --smtp appended so
// that tests do not collide) from the module root, in its own process group.
// The returned Proc is the shell's one waiter.
func (n newcomer) readmeDev(t *testing.T, first, dir, smtp string) (*testproc.Proc, *testproc.Output) {
	t.Helper()
	cmd := n.as(exec.Command("/bin/sh", "-c", first+" --dir "+dir+" --smtp "+smtp))
	cmd.Dir = n.root
	cmd.Env = n.env
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	var out, errb testproc.Output
	cmd.Stdout, cmd.Stderr = &out, &errb
	p := &testproc.Proc{}
	if err := p.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.Done()
	})
	deadline := time.Now().Add(4 * time.Minute) // a hang, not the build: see build
	for !strings.Contains(out.String(), "Ctrl-C") {
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("%s printed no banner; stderr:\n%s", first, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p, &out
}

// stopGroup stops dev's process group with SIGINT, as Ctrl-C does.
func stopGroup(t *testing.T, p *testproc.Proc) {
	t.Helper()
	syscall.Kill(-p.PID(), syscall.SIGINT)
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		syscall.Kill(-p.PID(), syscall.SIGKILL)
		t.Fatal("dev did not stop on SIGINT")
	}
}

// TestREADMEDevBannerLinesRun walks README's first command as a newcomer
// does, as an ordinary user: run it, paste every line the banner prints into
// a fresh shell, stop dev, start it again, and use the agent wiring the
// banner made.
func TestREADMEDevBannerLinesRun(t *testing.T) {
	if testing.Short() || raceBuild {
		t.Skip("builds and drives a separate binary with go run (skipped under -short and -race)")
	}
	module, err := testbin.ModuleRoot()
	if err != nil {
		t.Skip(err)
	}
	cmds := readmeCommands(t, module)
	if len(cmds) != 2 || cmds[0] != "go run ./cmd/mailctl dev" || cmds[1] != "go test ./..." {
		t.Fatalf("README.md must show exactly two commands, dev then the tests; it shows %q", cmds)
	}
	n := newNewcomer(t, module)
	n.build(t)
	dir := filepath.Join(n.home, "dev")
	smtp := freePort(t)
	dev, banner := n.readmeDev(t, cmds[0], dir, smtp)
	lines := bannerLines(banner.String())
	if len(lines) < 4 {
		t.Fatalf("banner has %d command lines:\n%s", len(lines), banner.String())
	}
	var wired bool
	for _, l := range lines {
		if strings.HasPrefix(l, "swaks ") {
			if _, err := exec.LookPath("swaks"); err != nil {
				t.Logf("swaks not installed; skipping %q", l)
				continue
			}
		}
		wired = wired || strings.Contains(l, "agents setup")
		out, err := n.shell(l)
		if err != nil {
			t.Fatalf("banner line %q failed in a fresh shell: %v\n%s", l, err, out)
		}
	}
	if !wired {
		t.Fatalf("banner has no agent wiring line:\n%s", banner.String())
	}
	stopGroup(t, dev)

	// What the banner named outlives the run: the binary, and the harness
	// config pointing at it.
	self := filepath.Join(dir, "bin", "mailctl")
	if _, err := os.Stat(self); err != nil {
		t.Fatalf("the binary the banner names is gone after dev stopped: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(n.home, ".claude.json"))
	if err != nil {
		t.Fatalf("agents setup line wrote no ~/.claude.json: %v", err)
	}
	var doc struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("~/.claude.json: %v\n%s", err, b)
	}
	srv, ok := doc.MCPServers["mailctl"]
	if !ok || srv.Command != self {
		t.Fatalf("harness runs %q, want the stable copy %q:\n%s", srv.Command, self, b)
	}

	// Dev again; the wired server, started as the harness would, answers a
	// tool call.
	n.readmeDev(t, cmds[0], dir, smtp)
	mcp := n.as(exec.Command(srv.Command, srv.Args...))
	mcp.Env = append([]string{}, n.env...)
	for k, v := range srv.Env {
		mcp.Env = append(mcp.Env, k+"="+v)
	}
	in, _ := mcp.StdinPipe()
	outp, _ := mcp.StdoutPipe()
	if err := mcp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); mcp.Wait() }()
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"newcomer","version":"1"}}}`)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"mailbox_list","arguments":{}}}`)
	got := readResponse(t, outp, 2)
	if !strings.Contains(got, "agent@mailctl.test") || strings.Contains(got, `"isError":true`) {
		t.Fatalf("mailbox_list through the wired server after a restart: %s", got)
	}
}

// README keeps its two commands and says, in prose, how to type plain
// mailctl as docs/cli.md's examples do.
func TestREADMESaysHowToPutMailctlOnPath(t *testing.T) {
	module, err := testbin.ModuleRoot()
	if err != nil {
		t.Skip(err)
	}
	if cmds := readmeCommands(t, module); len(cmds) != 2 {
		t.Fatalf("README.md shows %d commands, want the two (dev, tests): %q", len(cmds), cmds)
	}
	b, _ := os.ReadFile(filepath.Join(module, "README.md"))
	if !strings.Contains(string(b), "`go install ./cmd/mailctl`") || !strings.Contains(string(b), "path the banner") {
		t.Error("README.md does not say how to put mailctl on PATH (go install ./cmd/mailctl) or to use the banner's path")
	}
}

// readResponse reads JSON-RPC lines until the one with id.
func readResponse(t *testing.T, r io.Reader, id int) string {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	done := make(chan string, 1)
	go func() {
		for sc.Scan() {
			var m struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.ID != nil && *m.ID == id {
				done <- sc.Text()
				return
			}
		}
		done <- ""
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no MCP response")
		return ""
	}
}

// TestDevScenarioHookAndCapture: in dev, mail from a trusted sender (another
// mailbox of the instance, the default --trust) fires a hook whose run is
// listed, mail from outside does not, and a send to another domain lands in
// the captured mailbox instead of the internet. Run as an ordinary user
// (hooks never run as root).
func TestDevScenarioHookAndCapture(t *testing.T) {
	bin, dir, as := devAsUser(t, "mcdev")
	sock := filepath.Join(dir, "mailctl.sock")
	env := append(os.Environ(), "MAILCTL_AS_BINARY=1", "MAILCTL_SOCKET="+sock)
	// Standard output only: a coverage build of the test binary (CI's
	// coverage step) writes its own lines to standard error on exit.
	run := func(args ...string) (string, error) {
		c := as(exec.Command(bin, args...))
		c.Env = env
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			return string(out) + stderr.String(), err
		}
		return string(out), nil
	}
	dev := as(exec.Command(bin, "dev", "--dir", dir, "--smtp", freePort(t)))
	dev.Env = env
	var out testproc.Output
	dev.Stdout, dev.Stderr = &out, &out
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Process.Kill(); dev.Wait() })
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "Ctrl-C"); {
		if time.Now().After(deadline) {
			t.Fatalf("dev did not start:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		o, err := run(args...)
		if err != nil {
			t.Fatalf("mailctl %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return o
	}
	woke := filepath.Join(dir, "woke")
	mustRun("mailboxes", "create", "boss")
	mustRun("hooks", "create", "--mailbox", "agent", "--event", "on_receive", "--name", "wake",
		"--cmd", `["/bin/sh","-c","cat > `+woke+`; echo note from the hook >&2"]`)
	mustRun("send", "--from", "boss", "--to", "agent@mailctl.test", "--subject", "the task", "--body", "do it")

	var runs protocol.HookRuns
	for deadline := time.Now().Add(20 * time.Second); ; {
		runs = protocol.HookRuns{}
		if err := json.Unmarshal([]byte(mustRun("hooks", "runs", "--json")), &runs); err != nil {
			t.Fatal(err)
		}
		if len(runs.Runs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("trusted mail fired no hook")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := runs.Runs[0]; r.Hook != "wake" || r.ExitCode != 0 || r.Error != "" {
		t.Fatalf("hook run: %+v", r)
	}
	if b, err := os.ReadFile(woke); err != nil || !strings.Contains(string(b), "the task") {
		t.Fatalf("hook got no message on stdin: %v %q", err, b)
	}
	// A hook that succeeds may write to stderr: that is no error.
	table := mustRun("hooks", "runs")
	if strings.Contains(table, "ERROR") || !regexp.MustCompile(`(?m)^STARTED .*RESULT .*STDERR$`).MatchString(table) ||
		!regexp.MustCompile(`(?m) wake .* ok .* note from the hook$`).MatchString(table) {
		t.Errorf("hooks runs of a successful hook that wrote to stderr:\n%s", table)
	}

	// The local message is trusted as a submission of boss's owner, and
	// its DKIM signatures agree: dev's checker knows dev's keys.
	var inbox protocol.MessageList
	json.Unmarshal([]byte(mustRun("mail", "list", "--mailbox", "agent", "--json")), &inbox)
	if len(inbox.Messages) != 1 {
		t.Fatalf("agent's inbox: %+v", inbox)
	}
	read := mustRun("mail", "read", inbox.Messages[0].ID, "--mailbox", "agent")
	for _, want := range []string{"Trust:        trusted sender", "Submitted by: boss, on this host", "DKIM:         pass (mailctl.test), pass (mailctl.test)"} {
		if !strings.Contains(read, want) {
			t.Errorf("read of local mail lacks %q:\n%s", want, read)
		}
	}

	// Outbound to another domain is captured, not sent, and says so once.
	o := mustRun("send", "--from", "agent", "--to", "bob@example.org", "--subject", "outside", "--body", "hi", "--json")
	var sent protocol.SendResult
	if err := json.Unmarshal([]byte(o), &sent); err != nil || sent.Status != "delivered" || len(sent.Recipients) != 1 || !sent.Recipients[0].Captured {
		t.Fatalf("captured send: %v %s", err, o)
	}
	o = mustRun("send", "--from", "agent", "--to", "bob@example.org", "--subject", "outside again", "--body", "hi")
	if strings.Count(o, "captured, not sent") != 1 || strings.Contains(o, "delivered: delivered") || !strings.Contains(o, `captured in the mailbox "captured"`) {
		t.Errorf("captured send's lines:\n%s", o)
	}
	o = mustRun("send", "--from", "agent", "--to", "bob@example.org", "--subject", "later", "--body", "hi", "--send-at", "2h")
	if strings.Contains(o, "scheduled: scheduled") || !strings.Contains(o, "scheduled for ") {
		t.Errorf("scheduled send's lines:\n%s", o)
	}
	for _, line := range strings.Split(o, "\n") {
		if f := strings.Fields(strings.ReplaceAll(line, ":", "")); len(f) > 1 && f[0] == f[1] {
			t.Errorf("doubled word in %q", line)
		}
	}
	var m protocol.Mailbox
	if err := json.Unmarshal([]byte(mustRun("mailboxes", "show", "captured", "--json")), &m); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "state", "mailboxes", "captured", "inbox", "*-outside.md"))
	if capt := mustRun("mail", "read", filepath.Base(strings.TrimSuffix(firstOf(matches), ".md")), "--mailbox", "captured"); !strings.Contains(capt, "DKIM:         pass") {
		t.Errorf("captured mail's DKIM does not agree with its trust:\n%s", capt)
	}
	if len(matches) != 1 {
		t.Fatalf("captured mailbox holds %v", matches)
	}
	if b, _ := os.ReadFile(matches[0]); !strings.Contains(string(b), "bob@example.org") {
		t.Fatalf("captured copy lost its recipient:\n%s", b)
	}

	// The trust gate is explained, not bypassed: dev's user may not open a
	// hook to untrusted mail, and is told how to trust a sender instead.
	if o, err := run("hooks", "create", "--mailbox", "agent", "--event", "on_receive", "--name", "open",
		"--cmd", `["/bin/true"]`, "--fire-on-untrusted"); err == nil || !strings.Contains(o, "--trust PATTERN") {
		t.Fatalf("fire-on-untrusted in dev: %v %s", err, o)
	}
	// So is setting trusted senders: the operator's mailbox_rules, which
	// dev writes again at every start, are no fix there; its flag is.
	if o, err := run("mailboxes", "set", "agent", "--trusted-senders", "*@example.org"); err == nil || !strings.Contains(o, "--trust PATTERN") {
		t.Fatalf("trusted senders set by dev's user: %v %s", err, o)
	}

	// An empty message is refused unless forced.
	if o, err := run("send", "--from", "agent", "--to", "bob@example.org"); err == nil || !strings.Contains(o, "--force") {
		t.Fatalf("empty send: %v %s", err, o)
	}
	mustRun("send", "--from", "agent", "--to", "bob@example.org", "--force")
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestDevPortErrorsCarryTheFix: a taken port names --smtp, a privileged port
// without root says why, a non-loopback address warns.
func TestDevPortErrorsCarryTheFix(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, e, code := mailctl(t, nil, "dev", "--dir", t.TempDir(), "--smtp", l.Addr().String())
	if code == 0 || !strings.Contains(e, "mailctl dev --smtp 127.0.0.1:") {
		t.Errorf("taken port: exit %d, %s", code, e)
	}
	// README's newcomer runs dev with go run: the fix is given that way
	// too. The daemon's own fix, "change smtp.listen", names a key dev
	// writes again from --smtp at every start: it is not printed.
	if !strings.Contains(e, "go run ./cmd/mailctl dev --smtp 127.0.0.1:") || strings.Contains(e, "smtp.listen") {
		t.Errorf("taken port: want the fix for go run and no smtp.listen:\n%s", e)
	}
	// Port 25 as an ordinary user (as root, as a throwaway user).
	port25 := exec.Command(os.Args[0], "dev", "--dir", filepath.Join(t.TempDir(), "d"), "--smtp", "127.0.0.1:25")
	if os.Geteuid() == 0 {
		u := testusers.Create(t, "mcport")
		port25 = testusers.As(exec.Command(testusers.Executable(t), "dev", "--dir", filepath.Join(testusers.SharedDir(t), "d"), "--smtp", "127.0.0.1:25"), u.UID, u.GID)
		os.Chmod(filepath.Dir(port25.Args[3]), 0o777)
	}
	port25.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if start, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && start <= 25 {
		t.Logf("ordinary users may bind port 25 here (ip_unprivileged_port_start=%d): not checked", start)
	} else if b, err := port25.CombinedOutput(); err == nil || !strings.Contains(string(b), "needs root") || !strings.Contains(string(b), "--smtp 127.0.0.1:2525") {
		t.Errorf("port 25 as a user: %v, %s", err, b)
	}
	// A non-loopback address warns; the port is taken so dev stops at once.
	l2, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	_, e, _ = mailctl(t, nil, "dev", "--dir", t.TempDir(), "--smtp", l2.Addr().String())
	if !strings.Contains(e, "not a loopback address") {
		t.Errorf("non-loopback --smtp did not warn: %s", e)
	}
}

// TestDoctorKnowsDev: doctor against a dev instance (as its user, or as root
// pointed at its socket) fails nothing, says it is dev, and never offers
// `sudo chown root:` fixes that would break it.
func TestDoctorKnowsDev(t *testing.T) {
	_, _, sock := startDev(t, t.TempDir())
	out, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "doctor", "--json")
	var r struct {
		Source   string             `json:"source"`
		Findings []protocol.Finding `json:"findings"`
		Failed   bool               `json:"failed"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: exit %d %v\n%s%s", code, err, out, e)
	}
	var dev bool
	for _, f := range r.Findings {
		if f.Severity == "fail" || strings.Contains(f.Fix, "chown") || strings.HasPrefix(f.ID, "dns.") {
			t.Errorf("dev finding that does not apply: %+v", f)
		}
		dev = dev || f.ID == "dev.instance"
	}
	if code != 0 || r.Source != "daemon" || !dev {
		t.Fatalf("doctor on dev: exit %d, source %s, dev finding %v\n%s", code, r.Source, dev, out)
	}
}

// TestDoctorUnconfiguredHostSaysSetup: with no config the unit cannot start
// (ConditionPathExists), so the fix for a silent daemon is setup, not start.
func TestDoctorUnconfiguredHostSaysSetup(t *testing.T) {
	if _, err := os.Stat("/etc/mailctl/config.toml"); err == nil {
		t.Skip("this host is set up")
	}
	bin := os.Args[0]
	cmd := exec.Command(bin, "doctor")
	if os.Geteuid() == 0 {
		// The path is a non-root user's.
		u := testusers.Create(t, "mcdoc")
		cmd = testusers.As(exec.Command(testusers.Executable(t), "doctor"), u.UID, u.GID)
	}
	cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1", "MAILCTL_SOCKET=/nonexistent/none.sock", "MAILCTL_CONFIG=")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !regexp.MustCompile(`fix: this host is not set up: sudo mailctl setup`).MatchString(out) ||
		strings.Contains(out, "systemctl start") || strings.Contains(out, "checked by the daemon") {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// TestReloadReportsWhatTheDaemonDid: `mailctl reload PID` (the unit's
// ExecReload, and dev's SIGHUP) signals the daemon and reports what it did,
// exiting 0 only when it reloaded: the keys applied, or why the file was
// refused. It finds the daemon's socket from PID itself, and signals
// nothing that is not the daemon answering there.
func TestReloadReportsWhatTheDaemonDid(t *testing.T) {
	dir := t.TempDir()
	dev, _, sock := startDev(t, dir)
	pid := fmt.Sprint(dev.PID())
	env := []string{"MAILCTL_SOCKET="} // found from the process, as ExecReload has no variable
	out, e, code := mailctl(t, env, "reload", pid)
	if code != 0 || !strings.Contains(out, "reloaded (pid "+pid+"): no setting changed") || !strings.Contains(out, "DKIM keys signing: dev-ed25519 (ed25519), dev-rsa (rsa)\n") {
		t.Fatalf("reload of an unchanged config: exit %d\n%s%s", code, out, e)
	}
	// A key added (as mailctl dkim keygen does) is named by the next
	// reload; with every key gone the operator is told mail goes unsigned.
	keyDir := filepath.Join(dir, "dkim")
	if out, e, code := mailctl(t, nil, "dkim", "keygen", "--config", filepath.Join(dir, "config.toml"), "--selector", "next"); code != 0 {
		t.Fatalf("dkim keygen: exit %d\n%s%s", code, out, e)
	}
	if out, e, code := mailctl(t, env, "reload", pid); code != 0 || !strings.Contains(out, "DKIM keys signing: dev-ed25519 (ed25519), dev-rsa (rsa), next (ed25519)\n") {
		t.Errorf("reload after a new key: exit %d\n%s%s", code, out, e)
	}
	aside := filepath.Join(t.TempDir(), "keys")
	if err := os.Rename(keyDir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, e, code := mailctl(t, env, "reload", pid); code != 0 || !strings.Contains(out, "DKIM keys: none, so outbound mail goes unsigned") {
		t.Errorf("reload without keys: exit %d\n%s%s", code, out, e)
	}
	os.Remove(keyDir)
	if err := os.Rename(aside, keyDir); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.toml")
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), `trusted_senders = ["*@mailctl.test"]`, `trusted_senders = ["*@mailctl.test", "boss@example.org"]`, 1)
	if changed == string(b) {
		t.Fatalf("dev's config has no trusted_senders line to change:\n%s", b)
	}
	os.WriteFile(cfgFile, []byte(changed), 0o600)
	if out, e, code := mailctl(t, env, "reload", pid); code != 0 || !strings.Contains(out, "applied trust.trusted_senders") {
		t.Errorf("reload of a changed config: exit %d\n%s%s", code, out, e)
	}
	os.WriteFile(cfgFile, []byte(changed+"\nbroken = [\n"), 0o600)
	if out, e, code := mailctl(t, env, "reload", pid); code != 1 || !strings.Contains(e, "refused the config and keeps running the one it had") || !strings.Contains(e, "config.toml") {
		t.Errorf("reload of a broken config: exit %d\n%s%s", code, out, e)
	}
	// The daemon still runs, on its previous config.
	var v struct{ Daemon protocol.VersionInfo }
	if err := json.Unmarshal([]byte(must(mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "version", "--json"))), &v); err != nil ||
		v.Daemon.PID != dev.PID() || v.Daemon.Reload == nil || v.Daemon.Reload.OK || v.Daemon.Reload.Count != 5 {
		t.Errorf("version after a refused reload: %v %+v", err, v.Daemon)
	}

	// A process that is not the daemon answering is not signalled.
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	// (Which message says so depends on whether a daemon answers at the
	// default socket, as on a host with mailctl installed.)
	if out, e, code := mailctl(t, env, "reload", fmt.Sprint(other.Process.Pid)); code != 1 || !strings.Contains(e, "nothing was signalled") && !strings.Contains(e, "nothing signalled") {
		t.Errorf("reload of a process that is no daemon: exit %d\n%s%s", code, out, e)
	}
	if out, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "reload", fmt.Sprint(other.Process.Pid)); code != 1 || !strings.Contains(e, "is process "+pid+", not") {
		t.Errorf("reload of another pid through the dev socket: exit %d\n%s%s", code, out, e)
	}
	if _, _, code := mailctl(t, nil, "reload", "1"); code != 2 {
		t.Errorf("reload 1: exit %d, want a usage error", code)
	}
}

// TestReloadWithoutAPIDNamesTheDaemon: `mailctl reload` typed without the
// process id (as on a host without systemd, where no unit passes $MAINPID)
// signals nothing and names the daemon answering on the config's socket,
// with the line to run, rather than only asking for a number the operator
// must hunt for.
func TestReloadWithoutAPIDNamesTheDaemon(t *testing.T) {
	reloads := func(env []string) (int, int) {
		t.Helper()
		var v struct{ Daemon protocol.VersionInfo }
		if err := json.Unmarshal([]byte(must(mailctl(t, env, "version", "--json"))), &v); err != nil {
			t.Fatal(err)
		}
		if v.Daemon.Reload == nil {
			return v.Daemon.PID, 0
		}
		return v.Daemon.PID, v.Daemon.Reload.Count
	}

	dir := t.TempDir()
	cfgPath := serveConfig(t, dir, freePort(t))
	startServe(t, cfgPath)
	env := []string{"MAILCTL_SOCKET=", "MAILCTL_CONFIG=" + cfgPath}
	pid, _ := reloads(env)
	out, e, code := mailctl(t, env, "reload")
	if code != 2 || !strings.Contains(e, "the daemon answering at "+filepath.Join(dir, "mailctl.sock")+fmt.Sprintf(" is process %d", pid)) ||
		!strings.Contains(e, fmt.Sprintf("`sudo mailctl reload %d`", pid)) || !strings.Contains(e, "sudo systemctl reload mailctl") {
		t.Fatalf("reload without a pid: exit %d\n%s%s", code, out, e)
	}
	if _, n := reloads(env); n != 0 {
		t.Errorf("the daemon was signalled: %d reloads", n)
	}
	if out, e, code := mailctl(t, env, "reload", fmt.Sprint(pid)); code != 0 {
		t.Errorf("the line it names: exit %d\n%s%s", code, out, e)
	}

	// A dev daemon is its user's: no sudo, no unit.
	devDir := t.TempDir()
	dev, _, sock := startDev(t, devDir)
	_, e, code = mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "reload")
	if code != 2 || !strings.Contains(e, fmt.Sprintf("`mailctl reload %d`", dev.PID())) || strings.Contains(e, "sudo") {
		t.Errorf("reload of a dev daemon without a pid: exit %d\n%s", code, e)
	}

	// With no daemon answering, it says so and still names the unit's way.
	_, e, code = mailctl(t, []string{"MAILCTL_SOCKET=" + filepath.Join(dir, "none.sock")}, "reload")
	if code != 2 || !strings.Contains(e, "no daemon answers at") || !strings.Contains(e, "sudo systemctl reload mailctl") {
		t.Errorf("reload without a pid or a daemon: exit %d\n%s", code, e)
	}
}

// must is the standard output of a mailctl run.
func must(out, _ string, _ int) string { return out }

// TestDKIMKeygenAsAUserSaysSudo: `mailctl dkim keygen` run without root,
// where the keys are root's, says to run it with sudo rather than only
// "permission denied".
func TestDKIMKeygenAsAUserSaysSudo(t *testing.T) {
	testusers.RequireRoot(t)
	dir := testusers.SharedDir(t)
	cfgPath := serveConfig(t, dir, freePort(t))
	if err := os.Chmod(cfgPath, 0o644); err != nil {
		t.Fatal(err)
	}
	// The test binary, where the user can run it.
	bin := filepath.Join(dir, "mailctl")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	uid := testusers.UnusedUID(t)
	cmd := testusers.As(exec.Command(bin, "dkim", "keygen", "--config", cfgPath, "--selector", "user"), uid, uid)
	cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), "are root's: run it with sudo") {
		t.Fatalf("dkim keygen as uid %d: %v\n%s", uid, err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "dkim", "user.pem")); !os.IsNotExist(err) {
		t.Errorf("a key was written: %v", err)
	}
}

// docs/configuration.md: mail between a dev instance's mailboxes is trusted
// so hooks fire, and `--trust PATTERN` adds senders (the advice a refused
// fire_on_untrusted gives in dev). It used to replace *@DOMAIN, so a user
// who trusted one more sender silenced every hook on their own mail.
func TestDevTrustAddsSenders(t *testing.T) {
	_, _, sock := startDev(t, t.TempDir(), "--trust", "*@example.org")
	out, e, code := mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "mailboxes", "show", "agent")
	if code != 0 {
		t.Fatalf("mailboxes show agent: exit %d\n%s%s", code, out, e)
	}
	for _, want := range []string{"*@mailctl.test", "*@example.org"} {
		if !strings.Contains(out, want) {
			t.Errorf("dev --trust '*@example.org': agent's trusted senders lack %s:\n%s", want, out)
		}
	}
}

// TestBackupByAUserSaysWhatToRunInstead: `mailctl backup` is root's, and a
// user who runs it (say, to keep a dev instance) is told both ways on: sudo
// for the host's daemon, a copy of --dir for a dev instance.
func TestBackupByAUserSaysWhatToRunInstead(t *testing.T) {
	bin := os.Args[0]
	cmd := exec.Command(bin, "backup", "--output", filepath.Join(t.TempDir(), "mail.tar"))
	if os.Geteuid() == 0 {
		u := testusers.Create(t, "mcbak")
		cmd = testusers.As(exec.Command(testusers.Executable(t), "backup", "--output", filepath.Join(testusers.SharedDir(t), "mail.tar")), u.UID, u.GID)
	}
	cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, "run it with sudo") ||
		!strings.Contains(out, "`mailctl dev` instance keeps everything in its --dir: stop it and copy that directory") {
		t.Fatalf("%v:\n%s", err, out)
	}
}
