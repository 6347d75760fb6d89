package outbound

import (
	"strings"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
)

// answers remembers what send calls told their callers, so that a failure
// the caller already learned from the send's answer is not reported to it a
// second time by a delivery status notification. It lives in memory: after
// a restart every failure of an item still queued is reported.
type answers struct {
	waiting map[string]int             // queue id → send calls waiting for its first attempt
	told    map[string]map[string]bool // queue id → recipients whose failure an answer carried
}

// answering notes that a send call will answer for queue item id. It must
// be called before the item is queued: the first attempt may settle the
// item before the call starts waiting. The returned func records what the
// answer carried.
func (s *Service) answering(id string) func(protocol.SendResult) {
	s.mu.Lock()
	if s.answers.waiting == nil {
		s.answers.waiting, s.answers.told = map[string]int{}, map[string]map[string]bool{}
	}
	s.answers.waiting[id]++
	s.mu.Unlock()
	return func(res protocol.SendResult) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.answers.waiting[id]--; s.answers.waiting[id] <= 0 {
			delete(s.answers.waiting, id)
		}
		// An item every recipient of which is final has settled already
		// (waiters wake after the notifier): Unanswered has run for it, and
		// nothing may be left behind.
		settled := true
		for _, r := range res.Recipients {
			settled = settled && queue.Final(r.Status)
		}
		if settled {
			delete(s.answers.told, id)
			return
		}
		for _, r := range res.Recipients {
			if r.Status == queue.StatusFailed {
				if s.answers.told[id] == nil {
					s.answers.told[id] = map[string]bool{}
				}
				s.answers.told[id][strings.ToLower(r.Address)] = true
			}
		}
	}
}

// Unanswered returns the recipients of a settled item whose failure no send
// call's answer carried and that the operator did not drop: those its
// sender learns of only from a delivery status notification. It forgets
// the item. A send call still waiting when the item settles answers with
// the settled state (waiters wake after the notifier has run), so then
// nothing is unanswered.
func (s *Service) Unanswered(id string, res protocol.SendResult) []protocol.RecipientStatus {
	s.mu.Lock()
	waiting := s.answers.waiting[id] > 0
	told := s.answers.told[id]
	delete(s.answers.told, id)
	s.mu.Unlock()
	if waiting {
		return nil
	}
	var out []protocol.RecipientStatus
	for _, r := range res.Recipients {
		if r.Status != queue.StatusFailed || r.Detail == queue.DetailDropped || told[strings.ToLower(r.Address)] {
			continue
		}
		out = append(out, r)
	}
	return out
}
