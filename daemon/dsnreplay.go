package daemon

import (
	"sync"

	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/outbound"
)

// reportHandler applies the delivery reports that reach one of our return
// paths to the sent copies they name. A report is applied once: its key
// (outbound.Report.Key: what it says, not who sent it) is recorded on the
// sent copy, and the same report again, from any sender, is neither stored
// nor applied nor announced.
type reportHandler struct {
	// mu makes the check, the store and the apply of one report one step,
	// so a replay that arrives with the first sees it recorded.
	mu      sync.Mutex
	apply   func(mailbox, tag string, rep outbound.Report) bool
	applied func(mailbox, tag string, rep outbound.Report) bool
}

// begin starts handling rep: replay reports that it is applied already. The
// caller calls done once it has stored and applied it (or given up).
func (h *reportHandler) begin(mailbox, tag string, rep outbound.Report) (done func(), replay bool) {
	h.mu.Lock()
	return h.mu.Unlock, h.applied(mailbox, tag, rep)
}

// reportOf is the delivery report p carries, or nil.
func reportOf(p *ingest.Parsed) *outbound.Report {
	if p.DSN == nil {
		return nil
	}
	rep := &outbound.Report{MessageID: p.Msg.MessageID, OriginalMessageID: p.DSN.OriginalMessageID}
	for _, r := range p.DSN.Recipients {
		rep.Recipients = append(rep.Recipients, outbound.DSNRecipient{Address: r.Address, Action: r.Action, Status: r.Status, Diagnostic: r.Diagnostic})
	}
	return rep
}
