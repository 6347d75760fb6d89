package outbound

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// TestRecorderLeavesItemsWithoutMailboxIDAlone: an item queued before items
// carried their mailbox's identity (2e01477) may belong to an earlier owner
// of its mailbox name. Its outcome must change no sent copy of the mailbox
// that holds the name now and reach none of its callbacks (watch events,
// after_send hooks); an item of that mailbox's identity still does.
func TestRecorderLeavesItemsWithoutMailboxIDAlone(t *testing.T) {
	for _, tc := range []struct {
		mailboxID string
		recorded  bool
	}{{"", false}, {"m-before", false}, {"m-now", true}} {
		st := newMemStore()
		m := &store.Message{MessageID: "a@example.test", Outbound: true, DeliveryStatus: queue.StatusDeferred}
		sentID, _, err := st.Reserve("reused", protocol.FolderSent, m)
		if err == nil {
			err = st.CreateUnsynced("reused", protocol.FolderSent, sentID, m, "b", nil, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		var callbacks int
		var logged bytes.Buffer
		r := &Recorder{Store: st, Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			CurrentID: func(name string) string {
				if name == "reused" {
					return "m-now"
				}
				return ""
			},
			OnUpdated: func(string, string, string, protocol.SendResult) { callbacks++ },
			OnSettled: func(string, string, string, protocol.SendResult) { callbacks++ },
		}
		it := &queue.Item{ID: "reused." + sentID, Mailbox: "reused", MailboxID: tc.mailboxID, SentID: sentID,
			Recipients: []protocol.RecipientStatus{{Address: "x@remote.test", Status: queue.StatusDelivered}}}
		r.Updated(it)
		r.Settled(it)
		m, _, _ = st.Get("reused", protocol.FolderSent, sentID)
		if got := m.DeliveryStatus == queue.StatusDelivered; got != tc.recorded {
			t.Errorf("item of mailbox id %q: sent copy %q, recorded %v, want %v", tc.mailboxID, m.DeliveryStatus, got, tc.recorded)
		}
		if want := map[bool]int{true: 2}[tc.recorded]; callbacks != want {
			t.Errorf("item of mailbox id %q: %d callbacks, want %d", tc.mailboxID, callbacks, want)
		}
		// The outcome left unrecorded is logged once, for the state, with
		// the recipients readable.
		lines := strings.Count(logged.String(), "outcome not recorded")
		if want := map[bool]int{false: 1}[tc.recorded]; lines != want {
			t.Errorf("item of mailbox id %q: logged %d times, want %d:\n%s", tc.mailboxID, lines, want, logged.String())
		}
		if !tc.recorded && !strings.Contains(logged.String(), `recipients="x@remote.test: delivered"`) {
			t.Errorf("the recipients are not named as address and status:\n%s", logged.String())
		}
	}
}
