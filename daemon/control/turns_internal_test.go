package control

import (
	"context"
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// The slots of turns: one uid runs at most its share and waits for the
// rest; another uid starts at once in what is left; a freed slot goes to
// the waiting uid that runs fewest, whatever came first; a wait that is
// given up leaves the queue.
func TestTurnsShareTheSlots(t *testing.T) {
	var tr turns
	ctx := context.Background()
	const hog, other, third = 1001, 1002, 1003
	for range perUIDSlots {
		if err := tr.acquire(ctx, hog); err != nil {
			t.Fatal(err)
		}
	}
	queued := func() int { tr.mu.Lock(); defer tr.mu.Unlock(); return len(tr.queue) }
	hogGot := make(chan error, 1)
	go func() { hogGot <- tr.acquire(ctx, hog) }()
	testwait.For(t, "the hog's next request waits", func() bool { return queued() == 1 })
	// Another uid is not queued behind the hog's waiting request.
	if err := tr.acquire(ctx, other); err != nil {
		t.Fatal(err)
	}
	// Every slot is taken now; a third uid waits, after the hog.
	thirdGot := make(chan error, 1)
	go func() { thirdGot <- tr.acquire(ctx, third) }()
	testwait.For(t, "the third uid waits", func() bool { return queued() == 2 })
	tr.release(other)
	if err := testwait.Recv(t, "the third uid's slot once another was released", thirdGot); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hogGot:
		t.Fatal("the hog got a third slot")
	default:
	}
	tr.release(hog)
	if err := testwait.Recv(t, "the hog's slot once its own was released", hogGot); err != nil {
		t.Fatal(err)
	}
	// A wait given up leaves the queue and takes nothing.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- tr.acquire(cctx, other) }()
	testwait.For(t, "the last request waits", func() bool { return queued() == 1 })
	cancel()
	if err := testwait.Recv(t, "the cancelled wait to give up", gaveUp); err == nil {
		t.Fatal("a cancelled wait got a slot")
	}
	if queued() != 0 {
		t.Fatalf("%d still queued", queued())
	}
	tr.release(hog)
	tr.release(hog)
	tr.release(third)
	if tr.running != 0 || len(tr.byUID) != 0 {
		t.Fatalf("after every release: %d running, %v", tr.running, tr.byUID)
	}
}
