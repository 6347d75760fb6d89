package testproc

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOutputTakesConcurrentWriters(t *testing.T) {
	var o Output
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				o.Write([]byte("x"))
			}
		})
	}
	wg.Wait()
	if got := len(o.String()); got != 800 {
		t.Fatalf("%d bytes, want 800", got)
	}
}

// A process that ignores SIGTERM is killed once the grace period is over,
// and Stop returns only when it is gone.
func TestStopKillsAfterGrace(t *testing.T) {
	var p Proc
	p.Stop(time.Second) // nothing started: nothing to do
	var out Output
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo up; exec sleep 60`)
	cmd.Stdout = &out
	if err := p.Start(cmd); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "up") {
		if p.Exited() {
			t.Fatal("exited at start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Stop(50 * time.Millisecond)
	if !p.Exited() {
		t.Fatal("Stop returned before the process was gone")
	}
	if ws := cmd.ProcessState; ws == nil || ws.Success() {
		t.Fatalf("process state %v, want killed", ws)
	}
}

func TestKill9(t *testing.T) {
	var p Proc
	if err := p.Start(exec.Command("sleep", "60")); err != nil {
		t.Fatal(err)
	}
	if p.Exited() || p.PID() <= 0 {
		t.Fatal("not running after Start")
	}
	p.Kill9()
	if !p.Exited() {
		t.Fatal("Kill9 returned before the process was gone")
	}
}

// Done lets a test wait for the process with a deadline of its own while
// Proc stays its one waiter: a test that gives up (a kill in its cleanup)
// does not wait a second time.
func TestDoneClosesOnExit(t *testing.T) {
	var p Proc
	if err := p.Start(exec.Command("sh", "-c", "exit 3")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the process exited")
	}
	p.Kill9() // after the end: returns at once
	if st := p.State(); !p.Exited() || st == nil || st.ExitCode() != 3 {
		t.Fatalf("after Done: exited %v, state %v; want exit status 3", p.Exited(), st)
	}
}
