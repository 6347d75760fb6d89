package outbound

import (
	"testing"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// Which failures a send's answer carried decides which a bounce reports;
// nothing is remembered once the item has settled.
func TestUnanswered(t *testing.T) {
	var s Service
	rs := func(st ...string) protocol.SendResult {
		var res protocol.SendResult
		for i, x := range st {
			r := protocol.RecipientStatus{Address: string(rune('a'+i)) + "@x.example", Status: x}
			if x == "dropped" {
				r.Status, r.Detail = queue.StatusFailed, queue.DetailDropped
			}
			res.Recipients = append(res.Recipients, r)
		}
		return res
	}
	// Settled while the send waited: the answer carries everything.
	done := s.answering("q1")
	if got := s.Unanswered("q1", rs("failed", "delivered")); got != nil {
		t.Errorf("settled during the wait: %+v", got)
	}
	done(rs("failed", "delivered"))
	// Answered with one failure and one deferral; the deferral fails later.
	done = s.answering("q2")
	done(rs("failed", "deferred"))
	if got := s.Unanswered("q2", rs("failed", "failed")); len(got) != 1 || got[0].Address != "b@x.example" {
		t.Errorf("later failure: %+v", got)
	}
	// Never waited for (held, scheduled, restarted): every failure but a drop.
	if got := s.Unanswered("q3", rs("failed", "dropped", "delivered")); len(got) != 1 || got[0].Address != "a@x.example" {
		t.Errorf("unanswered item: %+v", got)
	}
	if len(s.answers.told) != 0 || len(s.answers.waiting) != 0 {
		t.Errorf("left behind: told %v, waiting %v", s.answers.told, s.answers.waiting)
	}
}
