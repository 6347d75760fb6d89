package control_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

const listerEnv = "MAILCTL_TEST_LISTINGS"

// senderEnv makes the lister send instead: "dry" dry runs, "real" sends,
// from mailbox $MAILCTL_TEST_MAILBOX to itself.
const senderEnv = "MAILCTL_TEST_SEND"

// TestHelperLister is not a test of its own: run as another user, it makes
// $MAILCTL_TEST_LISTINGS listings of mailbox $MAILCTL_TEST_MAILBOX at once
// on one connection (or, without a mailbox, as many status requests; with
// $MAILCTL_TEST_SEND, as many sends) and prints how many were answered.
func TestHelperLister(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(listerEnv))
	if n == 0 {
		t.Skip("a helper process: lists a mailbox as the uid it is started with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, os.Getenv("MAILCTL_SOCKET"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	var ok atomic.Int32
	var firstErr atomic.Value
	for range n {
		wg.Go(func() {
			var err error
			if mode, mailbox := os.Getenv(senderEnv), os.Getenv("MAILCTL_TEST_MAILBOX"); mode != "" {
				err = c.Call(ctx, protocol.VerbSend, protocol.SendArgs{FromMailbox: mailbox, To: []string{mailbox + "@" + testdaemon.Domain},
					Subject: "paced?", Body: "b", DryRun: mode == "dry"}, &protocol.SendResult{})
			} else if mailbox != "" {
				err = c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox}, &protocol.MessageList{})
			} else {
				err = c.Call(ctx, protocol.VerbStatus, nil, &protocol.Status{})
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	fmt.Printf("LISTED %d %v\n", ok.Load(), firstErr.Load())
}

// lister starts n listings of mailbox as u; its result is the line the
// helper prints.
func lister(t *testing.T, bin, socket string, u testusers.User, mailbox string, n int) <-chan string {
	return helper(t, bin, socket, u, mailbox, n, "")
}

// sender is lister making sends (send: "dry" or "real") instead.
func sender(t *testing.T, bin, socket string, u testusers.User, mailbox string, n int, send string) <-chan string {
	return helper(t, bin, socket, u, mailbox, n, send)
}

func helper(t *testing.T, bin, socket string, u testusers.User, mailbox string, n int, send string) <-chan string {
	cmd := testusers.As(exec.Command(bin, "-test.run", "^TestHelperLister$", "-test.v"), u.UID, u.GID)
	cmd.Env = []string{listerEnv + "=" + strconv.Itoa(n), "MAILCTL_SOCKET=" + socket, "MAILCTL_TEST_MAILBOX=" + mailbox, senderEnv + "=" + send}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		line := "no result"
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "LISTED "); ok {
				line = l
			}
		}
		cmd.Wait()
		res <- line
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return res
}

// gateVerb holds each request of verb that passes its turn, while hold
// says so, until release is closed (at the test's end at the latest), and
// counts them in running; waiting counts the requests of uid that wait for
// a turn.
func gateVerb(t *testing.T, verb string, uid uint32, hold func() bool) (running, waiting *atomic.Int32, release chan struct{}) {
	running, waiting, release = new(atomic.Int32), new(atomic.Int32), make(chan struct{})
	keep := control.SwapGated(func(v string) {
		if v == verb && hold() {
			running.Add(1)
			<-release
		}
	})
	keepWait := control.SwapTurnWait(func(u uint32) {
		if u == uid {
			waiting.Add(1)
		}
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		control.SwapGated(keep)
		control.SwapTurnWait(keepWait)
	})
	return running, waiting, release
}

// TestOneUserCannotRunEveryRequest: a user with many requests in flight
// runs two of them at once and the rest wait their turn, so another user's
// listing starts at once instead of queueing behind all of them for the
// message index (one user's 1,800 listings in flight made another's take
// ten seconds).
func TestOneUserCannotRunEveryRequest(t *testing.T) {
	testusers.RequireRoot(t)
	hog := testusers.Create(t, "mcph")
	other := testusers.Create(t, "mcpo")
	td := testdaemon.Start(t)
	for _, m := range []struct {
		name string
		u    testusers.User
	}{{"hog", hog}, {"other", other}} {
		if err := td.EnsureMailbox(m.name, m.u.UID, m.u.GID); err != nil {
			t.Fatal(err)
		}
	}
	var hold atomic.Bool
	hold.Store(true)
	running, waiting, release := gateVerb(t, protocol.VerbMessageList, hog.UID, hold.Load)

	bin := testusers.Executable(t)
	const n = 8
	hogDone := lister(t, bin, td.Socket, hog, "hog", n)
	testwait.For(t, "every listing of the hog runs or waits", func() bool { return running.Load()+waiting.Load() == n })
	if got := running.Load(); got != 2 {
		t.Fatalf("the hog runs %d listings at once, want 2 (the rest waiting their turn)", got)
	}
	hold.Store(false)
	if got := testwait.Recv(t, "another user's listing", lister(t, bin, td.Socket, other, "other", 1)); got != "1 <nil>" {
		t.Fatalf("another user's listing while the hog's wait: %s", got)
	}
	// status, whose host checks may wait on DNS, takes no turn: the hog's
	// own is answered while its listings hold its slots.
	if got := testwait.Recv(t, "the hog's status", lister(t, bin, td.Socket, hog, "", 1)); got != "1 <nil>" {
		t.Fatalf("the hog's status while its listings hold its slots: %s", got)
	}
	close(release)
	if got := testwait.Recv(t, "the hog's listings", hogDone); got != strconv.Itoa(n)+" <nil>" {
		t.Fatalf("the hog's listings: %s", got)
	}
}

// Regression: a dry-run send does all of a send's work (composing,
// rendering, signing, the policy checks) and waits on no queue, yet took no
// turn, so one user's flood of dry runs ran all at once and cost another
// user's listings. A dry run waits its turn like a listing: of eight in
// flight, two run. A real send, which waits on its first delivery attempt,
// still takes none: it runs while the dry runs hold the uid's slots.
func TestDryRunSendsTakeTurns(t *testing.T) {
	testusers.RequireRoot(t)
	hog := testusers.Create(t, "mcpd")
	td := testdaemon.Start(t)
	if err := td.EnsureMailbox("hog", hog.UID, hog.GID); err != nil {
		t.Fatal(err)
	}
	running, waiting, release := gateVerb(t, protocol.VerbSend, hog.UID, func() bool { return true })

	bin := testusers.Executable(t)
	const n = 8
	dryDone := sender(t, bin, td.Socket, hog, "hog", n, "dry")
	testwait.For(t, "every dry run of the hog runs or waits", func() bool { return running.Load()+waiting.Load() == n })
	if got := running.Load(); got != 2 {
		t.Fatalf("the hog runs %d dry-run sends at once, want 2 (the rest waiting their turn)", got)
	}
	realDone := sender(t, bin, td.Socket, hog, "hog", 1, "real")
	testwait.For(t, "the hog's real send runs beside its dry runs", func() bool { return running.Load() == 3 })
	if got := waiting.Load(); got != n-2 {
		t.Fatalf("%d of the hog's requests waited for a turn, want %d (the real send takes none)", got, n-2)
	}
	close(release)
	if got := testwait.Recv(t, "the hog's dry runs", dryDone); got != strconv.Itoa(n)+" <nil>" {
		t.Fatalf("the hog's dry runs: %s", got)
	}
	if got := testwait.Recv(t, "the hog's real send", realDone); got != "1 <nil>" {
		t.Fatalf("the hog's real send: %s", got)
	}
}
