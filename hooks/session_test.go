package hooks

import (
	"bufio"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/testwait"
)

// parseStat takes the session id from the sixth field, counted from comm's
// last ')' (a comm may hold spaces and parentheses), and calls a zombie or
// a dead process not live.
func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		sid  int
		live bool
	}{
		{"1234 (sleep) S 1 1234 1234 0 -1", 1234, true},
		{"1234 (a) b) (c) R 1 77 88 0", 88, true},
		{") S 1 2 7", 7, true}, // a ')' first: the fields still follow it
		{"1234 (x) S 1 2 3", 3, true},
		{"1234 (x) S 1 2", 0, false}, // no session field
		{"1234 (zombie) Z 1 2 3 0", 3, false},
		{"1234 (dead) X 1 2 3 0", 3, false},
		{"1234 (x) S 1 2 notanumber", 0, false},
		{"no parenthesis S 1 2 3", 0, false},
		{"", 0, false},
	} {
		sid, live := parseStat([]byte(tc.line))
		if live != tc.live || live && sid != tc.sid {
			t.Errorf("parseStat(%q) = %d %v, want %d %v", tc.line, sid, live, tc.sid, tc.live)
		}
	}
}

// signalSession reaches every live process of the session but its leader,
// including one in another process group, and says how many; nothing of
// another session is touched.
func TestSignalSessionReachesTheSessionOnly(t *testing.T) {
	// The leader starts two children in its group and one in a group of
	// its own (through a subshell, which has ended, and been reaped, when
	// the leader says it is ready): a session of four processes. Once its
	// children are gone it becomes a sleep itself, so that it stays.
	leader := exec.Command("/bin/sh", "-c", `sleep 300 & (set -m; sleep 300 &) ; sleep 300 & echo ready; wait; exec sleep 300`)
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	ready, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	outsider := exec.Command("/bin/sleep", "300")
	for _, c := range []*exec.Cmd{leader, outsider} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	if line, err := bufio.NewReader(ready).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the leader said %q, %v, want ready", line, err)
	}
	sid := leader.Process.Pid
	members := func() int {
		n := 0
		for _, pid := range listProc() {
			if s, live := sessionOf(pid); live && s == sid && pid != sid {
				n++
			}
		}
		return n
	}
	if n := members(); n != 3 {
		t.Fatalf("the session has %d members besides its leader, want its 3 children", n)
	}
	if n := signalSession(sid, unix.SIGKILL); n != 3 {
		t.Errorf("signalSession signalled %d, want the 3 children", n)
	}
	testwait.For(t, "the children to die", func() bool { return members() == 0 })
	if n := signalSession(sid, unix.SIGKILL); n != 0 {
		t.Errorf("signalSession on a session of its leader alone signalled %d, want 0", n)
	}
	if s, live := sessionOf(sid); !live || s != sid {
		t.Errorf("the leader: session %d live %v, want it alive in its session", s, live)
	}
	if _, live := sessionOf(outsider.Process.Pid); !live {
		t.Error("a process of another session was killed")
	}
}
