package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testclock"
	"github.com/mailctl/mailctl/protocol"
)

// idemRecords names the idempotency records in the daemon's state, sorted.
func (td *testDaemon) idemRecords(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(td.cfg.Paths.QueueDir(), queue.IdempotencyDir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !safeio.IsTemp(e.Name()) {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// sweepKeys runs the daemon's sweep of idempotency records to the end of
// the directory, as its timer would.
func (td *testDaemon) sweepKeys(t *testing.T) int {
	t.Helper()
	removed := 0
	for {
		res, err := td.out.svc.SweepKeys(keySweepBatch)
		if err != nil {
			t.Fatal(err)
		}
		removed += res.Removed
		if !res.More {
			return removed
		}
	}
}

// TestIdempotencyWindowIsTheConfigs: the daemon remembers a key for
// delivery.idempotency_window on its own clock: a retry a day before the
// end is answered with the first message, one at the end is a new send;
// the sweep then leaves only the new send's record.
func TestIdempotencyWindowIsTheConfigs(t *testing.T) {
	clk := testclock.New()
	td := startDaemonWith(t, "[delivery]\nidempotency_window = \"7d\"\n", Options{Resolver: &resolver.Map{}, Clock: clk.Now})
	td.ensureMine(t, "agent")
	send := func() protocol.SendResult {
		t.Helper()
		var res protocol.SendResult
		args := protocol.SendArgs{FromMailbox: "agent", To: []string{"agent@example.test"}, Subject: "report", Body: "b", IdempotencyKey: "report-1"}
		if err := td.call(t, protocol.VerbSend, args, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := send()
	if first.Status != "delivered" {
		t.Fatalf("first send: %+v", first)
	}
	clk.Advance(6 * 24 * time.Hour)
	if res := send(); !res.Duplicate || res.MessageID != first.MessageID {
		t.Fatalf("a retry within the window: %+v, want the first message", res)
	}
	clk.Advance(24 * time.Hour)
	second := send()
	if second.Duplicate || second.MessageID == first.MessageID {
		t.Fatalf("a retry at the end of the window: %+v, want a new send", second)
	}
	td.sweepKeys(t)
	if got := td.idemRecords(t); len(got) != 1 {
		t.Fatalf("records after the sweep: %v, want the new send's alone", got)
	}
	if res := send(); !res.Duplicate || res.MessageID != second.MessageID {
		t.Fatalf("a retry of the new send after the sweep: %+v, want the new send", res)
	}
}

// TestIdempotencyKeysOfADeletedMailbox: user 1 sends with a key from its
// mailbox and deletes the mailbox; user 2 creates a mailbox of the same
// name and sends with the same key. Before any sweep, the key is already
// scoped to the mailbox's identity: user 2's send is a new message, and
// user 2 sees nothing of user 1's (not its id, its Message-ID, its sent
// copy). The next sweep removes user 1's record though it is well inside
// the window, and keeps user 2's, which still answers user 2's retry.
func TestIdempotencyKeysOfADeletedMailbox(t *testing.T) {
	td, c1, c2 := twoUsers(t, "mcik")
	const key = "weekly-report"
	send := func(c *clientProc) protocol.SendResult {
		t.Helper()
		var res protocol.SendResult
		data := c.must(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "shared", To: []string{"x@remote.test"}, Subject: "weekly", Body: "b", IdempotencyKey: key})
		if err := json.Unmarshal(data, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	c1.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "shared"})
	first := send(c1)
	if again := send(c1); !again.Duplicate || again.MessageID != first.MessageID {
		t.Fatalf("user 1's retry: %+v, want its first message", again)
	}
	c1.must(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "shared", Force: true})
	if got := td.idemRecords(t); len(got) != 1 {
		t.Fatalf("records after the delete: %v, want user 1's", got)
	}

	c2.must(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "shared"})
	second := send(c2)
	if second.Duplicate || second.MessageID == first.MessageID {
		t.Fatalf("user 2's send with user 1's key: %+v, answered with user 1's message %s", second, first.MessageID)
	}
	var sent protocol.MessageList
	if err := json.Unmarshal(c2.must(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "shared", Folder: protocol.FolderSent}), &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Messages) != 1 || sent.Messages[0].MessageID != second.MessageID {
		t.Fatalf("user 2's sent folder: %+v, want its own message alone", sent.Messages)
	}

	m, ok := td.reg.Mailbox("shared")
	if !ok {
		t.Fatal("user 2's mailbox is not in the registry")
	}
	if n := td.sweepKeys(t); n != 1 {
		t.Errorf("the sweep removed %d records, want user 1's", n)
	}
	if got, want := td.idemRecords(t), []string{queue.IdempotencyFile("shared", m.ID, key)}; !slices.Equal(got, want) {
		t.Errorf("records after the sweep: %v, want user 2's alone %v", got, want)
	}
	if again := send(c2); !again.Duplicate || again.MessageID != second.MessageID {
		t.Errorf("user 2's retry after the sweep: %+v, want its own message", again)
	}
}
