package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// holdConnections starts a process as p that opens up to n control
// connections and holds them until the test ends.
func holdConnections(t *testing.T, bin, socket string, p principal, n int) holdOutcome {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"MAILCTL_TEST_HOLD=" + itoa(n), "MAILCTL_SOCKET=" + socket}
	testusers.As(cmd, p.uid, p.gid)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("holder as %s printed nothing", p.name)
	}
	var o holdOutcome
	if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestOneUserCannotStarveTheSocket: one user opens 512 control connections
// and holds them. It gets its per-uid share and then a refusal that says
// what happened; root and another user are still served.
func TestOneUserCannotStarveTheSocket(t *testing.T) {
	testusers.RequireRoot(t)
	hog := testusers.Create(t, "mchg")
	other := testusers.Create(t, "mcot")
	td := startDaemon(t, "")
	bin := testusers.Executable(t)
	o := holdConnections(t, bin, td.socket, principal{"hog", hog.UID, hog.GID}, 512)
	lim := td.cfg.Control
	if o.Opened != lim.MaxConnectionsPerUID || o.Code != protocol.CodeRateLimited ||
		!strings.Contains(o.Msg, "control.max_connections_per_uid") || strings.Contains(o.Msg, "does not speak") {
		t.Fatalf("hog: %+v; want %d connections, then rate_limited naming control.max_connections_per_uid", o, lim.MaxConnectionsPerUID)
	}
	oth := startClient(t, bin, td.socket, principal{"other", other.UID, other.GID})
	if r := oth.do(t, protocol.VerbMailboxList, nil); r.Code != "" {
		t.Errorf("another user while the hog holds its connections: %+v", r)
	}
	if err := td.call(t, protocol.VerbStatus, nil, nil); err != nil {
		t.Errorf("root while the hog holds its connections: %v", err)
	}
}

// TestRootKeepsReservedConnections: users together fill their share of
// the control connections; the next user is refused with a reason, and
// root still gets in.
func TestRootKeepsReservedConnections(t *testing.T) {
	testusers.RequireRoot(t)
	a := testusers.Create(t, "mcra")
	b := testusers.Create(t, "mcrb")
	td := startDaemon(t, "[control]\nmax_connections = 8\nmax_connections_per_uid = 64\nreserved_for_root = 2\n")
	bin := testusers.Executable(t)
	if o := holdConnections(t, bin, td.socket, principal{"a", a.UID, a.GID}, 100); o.Opened != 6 {
		t.Fatalf("user a: %+v, want the users' 6 connections", o)
	}
	if o := holdConnections(t, bin, td.socket, principal{"b", b.UID, b.GID}, 1); o.Opened != 0 || !strings.Contains(o.Msg, "control.reserved_for_root") {
		t.Fatalf("user b: %+v, want refused naming control.reserved_for_root", o)
	}
	if err := td.call(t, protocol.VerbVersion, nil, nil); err != nil {
		t.Errorf("root: %v", err)
	}
}

// TestIdleControlConnectionsClose: a connection with no request in flight
// is closed after control.idle_timeout, and its slot freed; one holding a
// watch stays open.
func TestIdleControlConnectionsClose(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "mine")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watcher, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	events, err := watcher.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"mine"}})
	if err != nil {
		t.Fatal(err)
	}
	// With the watch in flight, shorten the idle timeout.
	orig, err := os.ReadFile(td.cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(td.cfg.File, append(orig, "\n[control]\nidle_timeout = \"300ms\"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(td.cfg.File); err != nil {
		t.Fatal(err)
	}
	idle, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	select {
	case <-idle.Done():
	case <-ctx.Done():
		t.Fatal("an idle connection stayed open")
	}
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "mine", ID: "x1"}, "")
	select {
	case ev := <-events:
		if ev.ID != "x1" {
			t.Errorf("watch got %+v", ev)
		}
	case <-watcher.Done():
		t.Fatal("the idle timeout closed a connection holding a watch")
	case <-ctx.Done():
		t.Fatal("no event on the watch")
	}
}
