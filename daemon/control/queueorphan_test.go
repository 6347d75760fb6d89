package control

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

// TestQueueItemWithoutMailboxIDIsRootsOnly: a queue item written before
// items carried their mailbox's identity (2e01477) has none after an
// upgrade, and nothing proves which owner of its mailbox name queued it.
// The mailbox that holds the name now (perhaps another user's) must neither
// list, show, retry nor drop it; root still does. An item of that mailbox's
// own identity stays its owner's, and one of an earlier mailbox of the name
// stays hidden. Runs as any user: the decisions are called in-process.
func TestQueueItemWithoutMailboxIDIsRootsOnly(t *testing.T) {
	dir := t.TempDir()
	q, err := queue.Open(filepath.Join(dir, "queue"), nil, nil, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, _, err := registry.Open(filepath.Join(dir, "registry"))
	if err != nil {
		t.Fatal(err)
	}
	d := New(Options{Registry: reg, Backend: &fakeBackend{
		mailboxes: map[string]*registry.Mailbox{"reused": {ID: "m-now", Name: "reused", UID: 1001, GID: 1001, Source: "registry"}},
		queue:     q,
	}})
	for id, mailboxID := range map[string]string{"reused.orphan": "", "reused.mine": "m-now", "reused.earlier": "m-before"} {
		it := &queue.Item{ID: id, Mailbox: "reused", MailboxID: mailboxID, SentID: id, MessageID: id + "@example.test",
			MailFrom: "reused@example.test", Held: true, Data: []byte("Subject: s\r\n\r\nb\r\n"),
			Recipients: []protocol.RecipientStatus{{Address: "x@remote.test"}}}
		if err := q.Enqueue(it); err != nil {
			t.Fatal(err)
		}
	}
	owner, root := Caller{UID: 1001, GID: 1001}, Caller{}

	listed := func(who Caller) map[string]bool {
		t.Helper()
		res, err := handleQueueList(context.Background(), d, &call{caller: who}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, it := range res.(protocol.QueueList).Items {
			ids[it.ID] = true
		}
		return ids
	}
	if got := listed(owner); len(got) != 1 || !got["reused.mine"] {
		t.Errorf("the name's owner lists %v, want only reused.mine", got)
	}
	if got := listed(root); len(got) != 3 {
		t.Errorf("root lists %v, want all three items", got)
	}

	gate := func(who Caller, verb, id string) error {
		args, _ := json.Marshal(protocol.QueueIDArgs{ID: id})
		_, release, err := d.gate(verbTable[verb], &call{caller: who, verb: verb, args: args})
		release()
		return err
	}
	for _, verb := range []string{protocol.VerbQueueShow, protocol.VerbQueueRetry, protocol.VerbQueueDrop} {
		for id, ownerMay := range map[string]bool{"reused.orphan": false, "reused.mine": true, "reused.earlier": false} {
			err := gate(owner, verb, id)
			var pe *protocol.Error
			switch {
			case ownerMay && err != nil:
				t.Errorf("%s %s as the name's owner: %v, want allowed", verb, id, err)
			case !ownerMay && (!errors.As(err, &pe) || pe.Code != protocol.CodeNotFound):
				t.Errorf("%s %s as the name's owner: %v, want not_found", verb, id, err)
			}
			if err := gate(root, verb, id); err != nil {
				t.Errorf("%s %s as root: %v, want allowed", verb, id, err)
			}
		}
	}
}
