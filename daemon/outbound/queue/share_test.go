package queue

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// tarpits holds every attempt to a domain of its own until that domain is
// released and delivers the others at once. It counts the attempts in
// flight per user (the envelope sender up to a dash), per domain and in
// all.
type tarpits struct {
	entered chan string // each attempt's first recipient, as it starts

	mu      sync.Mutex
	gates   map[string]chan struct{}
	now     map[string]int // per sender and per domain
	highest map[string]int
	all     int
	most    int
}

func newTarpits(domains ...string) *tarpits {
	p := &tarpits{entered: make(chan string, 64), gates: map[string]chan struct{}{}, now: map[string]int{}, highest: map[string]int{}}
	for _, d := range domains {
		p.gates[d] = make(chan struct{})
	}
	return p
}

// open lets the attempts to domain through, those held and those to come.
func (p *tarpits) open(domain string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.gates[domain]; g != nil {
		close(g)
		delete(p.gates, domain)
	}
}

func (p *tarpits) openAll() {
	p.mu.Lock()
	var doms []string
	for d := range p.gates {
		doms = append(doms, d)
	}
	p.mu.Unlock()
	for _, d := range doms {
		p.open(d)
	}
}

func (p *tarpits) count(keys []string, by int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.now[k] += by
		p.highest[k] = max(p.highest[k], p.now[k])
	}
	p.all += by
	p.most = max(p.most, p.all)
}

func (p *tarpits) Deliver(_ context.Context, from string, rcpts []string, _ []byte) []delivery.Result {
	dom := rcpts[0][strings.LastIndexByte(rcpts[0], '@')+1:]
	user, _, _ := strings.Cut(from, "-") // alice-a@… and alice-b@… are alice's
	keys := []string{"user " + user, "domain " + dom}
	p.count(keys, 1)
	p.mu.Lock()
	gate := p.gates[dom]
	p.mu.Unlock()
	p.entered <- rcpts[0]
	if gate != nil {
		<-gate
	}
	p.count(keys, -1)
	var out []delivery.Result
	for _, r := range rcpts {
		out = append(out, delivery.Result{Rcpt: r, TLS: delivery.TLSNone, Host: "mx.test"})
	}
	return out
}

// nextEntered is the first recipient of the next attempt to start.
func (p *tarpits) nextEntered(t *testing.T) string {
	t.Helper()
	select {
	case r := <-p.entered:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt started")
		return ""
	}
}

// One user whose mail goes to a few slow or tarpitting domains cannot hold
// every place: with items of theirs to three tarpits due (more than there
// are places, each tarpit within max_per_destination), their attempts take
// all places but one, and another user's item and a null-sender report go
// meanwhile. The user's items wait, none failed or lost, and go as soon as
// one of their attempts ends, oldest first.
func TestOneUserCannotHoldEveryDeliveryPlace(t *testing.T) {
	p := newTarpits("slow1.test", "slow2.test", "slow3.test")
	owners := map[string]uint32{"alice-a": 1002, "alice-b": 1002, "bob": 1003}
	q, err := Open(t.TempDir(), p, nil, Options{Clock: testclock.New().Now, MaxConcurrent: 4, // 2 per destination
		Owner: func(mailbox, _ string) (uint32, bool) { uid, ok := owners[mailbox]; return uid, ok }})
	if err != nil {
		t.Fatal(err)
	}
	runQueue(t, q)
	t.Cleanup(p.openAll) // before runQueue's cleanup, which waits for the attempts
	item := func(id, mailbox, from, rcpt string) *Item {
		it := testItem(id, rcpt)
		it.Mailbox, it.MailFrom = mailbox, from
		return it
	}
	// Alice's items, from two mailboxes of hers: the same clock reading
	// for all, so they go in the order of their ids.
	for i, dom := range []string{"slow1", "slow2", "slow3", "slow1", "slow2", "slow3"} {
		mailbox := []string{"alice-a", "alice-b"}[i%2]
		id := "a" + string(rune('1'+i))
		if err := q.Enqueue(item(id, mailbox, mailbox+"@example.com", id+"@"+dom+".test")); err != nil {
			t.Fatal(err)
		}
	}
	var first []string
	for range 3 {
		first = append(first, p.nextEntered(t))
	}
	slices.Sort(first) // attempts started together enter in any order
	if strings.Join(first, " ") != "a1@slow1.test a2@slow2.test a3@slow3.test" {
		t.Fatalf("first attempts %q, want alice's three oldest", first)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Bob's mail, a mailbox the queue knows no owner of (keyed by itself),
	// and a report with the null sender from alice's mailbox go meanwhile.
	for _, it := range []*Item{
		item("b1", "bob", "bob@example.com", "b1@fast.test"),
		item("c1", "carol", "carol@example.com", "c1@fast.test"),
		item("d1", "alice-a", "", "d1@fast.test"),
	} {
		if err := q.Enqueue(it); err != nil {
			t.Fatal(err)
		}
		if got := p.nextEntered(t); got != it.Recipients[0].Address {
			t.Fatalf("attempt to %s while %s waits: one user holds every place", got, it.ID)
		}
		done, err := q.WaitFirstAttempt(ctx, it.ID)
		if err != nil {
			t.Fatalf("%s waited behind alice's tarpits: %v", it.ID, err)
		}
		if r := done.Recipients[0]; r.Status != StatusDelivered {
			t.Fatalf("%s: %+v", it.ID, r)
		}
	}
	// Alice's items past her share wait, neither failed nor attempted.
	for _, id := range []string{"a4", "a5", "a6"} {
		it, err := q.Get(id)
		if err != nil || it.InFlight || it.Attempts != 0 || it.Recipients[0].Status != StatusPending {
			t.Fatalf("%s: %+v, %v: want it waiting, pending", id, it, err)
		}
	}
	// Her attempt to slow1 ends: her next oldest item goes (a4, to slow1,
	// now open), then the next (a5, held at slow2 with a2), and no more.
	p.open("slow1.test")
	for _, want := range []string{"a4@slow1.test", "a5@slow2.test"} {
		if got := p.nextEntered(t); got != want {
			t.Fatalf("attempt to %s, want %s once alice's share frees", got, want)
		}
	}
	for _, id := range []string{"a1", "a4"} {
		if _, err := q.WaitFirstAttempt(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if it, err := q.Get("a6"); err != nil || it.InFlight || it.Attempts != 0 {
		t.Fatalf("a6: %+v, %v: want it waiting for alice's share", it, err)
	}
	p.openAll()
	for _, id := range []string{"a2", "a3", "a5", "a6"} {
		it, err := q.WaitFirstAttempt(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if r := it.Recipients[0]; r.Status != StatusDelivered || it.Attempts != 1 {
			t.Fatalf("%s after %d attempts: %+v", id, it.Attempts, r)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if got := p.highest["user alice"]; got != 3 {
		t.Errorf("alice's mailboxes had up to %d attempts at once, want 3 (all places but one)", got)
	}
	for _, d := range []string{"slow1.test", "slow2.test", "slow3.test"} {
		if got := p.highest["domain "+d]; got > 2 {
			t.Errorf("%d attempts at once to %s, want at most 2 (max_per_destination)", got, d)
		}
	}
	if p.most > 4 {
		t.Errorf("%d attempts at once, want at most 4 (max_concurrent)", p.most)
	}
}

func TestOwnerShare(t *testing.T) {
	for _, c := range []struct{ places, want int }{{1, 1}, {2, 1}, {4, 3}, {8, 7}} {
		if got := OwnerShare(c.places); got != c.want {
			t.Errorf("OwnerShare(%d) = %d, want %d", c.places, got, c.want)
		}
	}
}

// The share is keyed by the owner of the item's mailbox when the queue
// knows it (and the mailbox is still the one that sent the item), else by
// the mailbox; the daemon's own null-sender mail has a share of its own.
func TestShareKey(t *testing.T) {
	q := &Queue{opts: Options{Owner: func(mailbox, id string) (uint32, bool) {
		return 1002, mailbox == "alice" && (id == "" || id == "alice-1")
	}}}
	for _, c := range []struct {
		it   Item
		want string
	}{
		{Item{Mailbox: "alice", MailFrom: "alice@example.com"}, "uid 1002"},
		{Item{Mailbox: "alice", MailboxID: "alice-1", MailFrom: "alice@example.com"}, "uid 1002"},
		{Item{Mailbox: "alice", MailboxID: "alice-0", MailFrom: "alice@example.com"}, "mailbox alice alice-0"},
		{Item{Mailbox: "bob", MailFrom: "bob@example.com"}, "mailbox bob "},
		{Item{Mailbox: "alice", MailFrom: ""}, "null sender"},
		{Item{Mailbox: "", MailFrom: ""}, "null sender"},
	} {
		it := c.it
		it.Recipients = []protocol.RecipientStatus{{Address: "x@remote.test"}}
		if got := q.shareKey(&it); got != c.want {
			t.Errorf("%+v: keyed %q, want %q", c.it, got, c.want)
		}
	}
}
