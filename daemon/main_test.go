package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestMain lets the test binary double as a socket client run under another
// uid: with MAILCTL_TEST_CLIENT set it reads requests from stdin, one JSON
// object per line, performs each on a fresh connection and prints each
// outcome as one JSON line.
func TestMain(m *testing.M) {
	if os.Getenv("MAILCTL_TEST_CLIENT") != "" {
		os.Exit(clientMain())
	}
	if n := os.Getenv("MAILCTL_TEST_HOLD"); n != "" {
		os.Exit(holdMain(n))
	}
	if path := os.Getenv("MAILCTL_TEST_DAEMON"); path != "" {
		os.Exit(daemonMain(path))
	}
	os.Exit(m.Run())
}

// clientRequest is one request a client process is asked to make.
type clientRequest struct {
	Verb string          `json:"verb"`
	Args json.RawMessage `json:"args"`
}

// clientOutcome is what a client process reports.
type clientOutcome struct {
	Code string          `json:"code"` // "" on success
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

func clientMain() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req clientRequest
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		enc.Encode(clientCall(req))
	}
	return 0
}

// holdOutcome is what a connection-holding process reports.
type holdOutcome struct {
	Opened int    `json:"opened"`
	Code   string `json:"code"` // of the first refusal
	Msg    string `json:"msg"`
}

// holdMain opens up to n connections and holds them until stdin closes,
// printing how many it got and why the next was refused.
func holdMain(n string) int {
	want, _ := strconv.Atoi(n)
	var out holdOutcome
	var held []*protocol.Client
	for range want {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := protocol.Dial(ctx, os.Getenv("MAILCTL_SOCKET"))
		cancel()
		if err != nil {
			out.Code, out.Msg = protocol.CodeOf(err), err.Error()
			break
		}
		held = append(held, c)
	}
	out.Opened = len(held)
	json.NewEncoder(os.Stdout).Encode(out)
	io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

func clientCall(req clientRequest) clientOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out clientOutcome
	c, err := protocol.Dial(ctx, os.Getenv("MAILCTL_SOCKET"))
	if err == nil {
		defer c.Close()
		var data json.RawMessage
		err = c.Call(ctx, req.Verb, req.Args, &data)
		out.Data = data
	}
	if err != nil {
		out.Code = protocol.CodeOf(err)
		out.Msg = err.Error()
	}
	return out
}

// testDaemon is a daemon running in-process on a private state dir.
type testDaemon struct {
	*Daemon
	cfg    *config.Config
	socket string
	dir    string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	t      testing.TB    // the test it runs for, failed when it does not stop
	within time.Duration // how long stop waits for it; 0 is testwait.StopTimeout
}

func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startDaemon runs a daemon whose socket every user can reach.
func startDaemon(t testing.TB, extra string) *testDaemon {
	t.Helper()
	return startDaemonWith(t, extra, Options{})
}

// startDaemonWith is startDaemon with options (a test resolver, say).
func startDaemonWith(t testing.TB, extra string, opts Options) *testDaemon {
	t.Helper()
	return startDaemonSMTP(t, extra, `listen = ["127.0.0.1:0"]`, opts)
}

// startDaemonSMTP is startDaemonWith with the lines of the [smtp] table.
func startDaemonSMTP(t testing.TB, extra, smtpLines string, opts Options) *testDaemon {
	t.Helper()
	dir := testusers.SharedDir(t)
	text := "hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n" + extra + fmt.Sprintf(`
[paths]
state_dir = %q
socket = %q
dkim_dir = %q
[smtp]
%s
`, filepath.Join(dir, "state"), filepath.Join(dir, "run", "mailctl.sock"), filepath.Join(dir, "dkim"), smtpLines)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return runTestDaemon(t, cfg, dir, opts)
}

// runTestDaemon runs a daemon on a loaded config until the test ends.
func runTestDaemon(t testing.TB, cfg *config.Config, dir string, opts Options) *testDaemon {
	t.Helper()
	hostPorts(t, cfg)
	ready := make(chan struct{})
	if opts.Logger == nil {
		opts.Logger = quietLogger(t)
	}
	opts.Version, opts.Ready = "test", func() { close(ready) }
	d, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	td := &testDaemon{Daemon: d, cfg: cfg, socket: cfg.Paths.Socket, dir: dir, cancel: cancel, done: make(chan error, 1), t: t}
	go func() { td.done <- d.Run(ctx) }()
	select {
	case <-ready:
	case err := <-td.done:
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not become ready")
	}
	os.Chmod(filepath.Dir(td.socket), 0o755)
	t.Cleanup(td.stop)
	return td
}

// hostPorts fails a test whose daemon would listen on a port below 1024 of
// the host (a config that leaves smtp.listen at its default takes port
// 25): whether it starts would depend on whatever else runs there, an MTA
// or another test process, and it would take the port from them.
func hostPorts(t testing.TB, cfg *config.Config) {
	t.Helper()
	addrs := append(append([]string{cfg.Metrics.Listen}, cfg.SMTP.Listen...), cfg.LMTP.ListenTCP...)
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err == nil {
			if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 1024 {
				t.Fatalf("the test daemon would listen on %s, a port of the host: give the test config a listen address of its own (127.0.0.1:0)", a)
			}
		}
	}
}

// stop ends the daemon and waits for it. A daemon that does not end fails
// its test, with the stacks that hold it; the test and the later ones go on.
func (td *testDaemon) stop() {
	td.once.Do(func() {
		td.cancel()
		within := td.within
		if within == 0 {
			within = testwait.StopTimeout
		}
		testwait.StoppedWithin(td.t, "the daemon", td.done, within)
	})
}

// call performs one request in-process as whoever runs the test.
func (td *testDaemon) call(t testing.TB, verb string, args, out any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Call(ctx, verb, args, out)
}

// watch opens a watch of mailboxes on a connection of its own, which ends
// with the test or after 10 s; ctx ends then too.
func (td *testDaemon) watch(t testing.TB, mailboxes ...string) (context.Context, <-chan protocol.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	events, err := c.Watch(ctx, protocol.WatchArgs{Mailboxes: mailboxes})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, events
}

// daemonMain runs a daemon from a config file until killed (crash tests).
func daemonMain(path string) int {
	if os.Getenv("MAILCTL_TEST_HOLD_INDEX") != "" {
		store.HoldIndexWrites()
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := New(cfg, Options{Version: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// SIGTERM stops it as it stops the real daemon: drained, a clean stop.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// operatorOnly skips a test that makes requests only the operator (root)
// may make: quotas, retention, a rebuild of the index. CI runs it as root.
func operatorOnly(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("makes requests only the operator (root) may make: run as root (CI does)")
	}
}

// ensureMine creates a mailbox owned by the user running the test, so the
// daemon can hand it over whether or not the test runs as root.
func (td *testDaemon) ensureMine(t testing.TB, name string) {
	t.Helper()
	if err := td.EnsureMailbox(name, uint32(os.Getuid()), uint32(os.Getgid())); err != nil {
		t.Fatal(err)
	}
}

// myName is the login name of the user running the test.
func myName(t testing.TB) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}
