package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// handleStatus runs the health checks inside the daemon, which may read
// root-only files, and returns the findings the caller may see: everything
// for root; for others the host-wide findings and those about their own
// mailboxes, never other users' mailbox names. This is how `mailctl doctor`
// works without sudo.
func handleStatus(ctx context.Context, s *Server, c *call, _ *protocol.Empty) (any, error) {
	cfg := s.cfg()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var findings []protocol.Finding
	if c.caller.Root() {
		findings = s.b.Health(cctx) // the operator checking a fix sees it
	} else {
		findings = s.health.get(s.now(), func() ([]protocol.Finding, bool) {
			f := s.b.Health(cctx)
			return f, cctx.Err() == nil // checks cut short are this call's alone
		})
	}
	var mine, others []string
	for _, m := range s.b.Mailboxes() {
		if c.visible(m) {
			mine = append(mine, m.Name)
		} else {
			others = append(others, m.Name)
		}
	}
	out := protocol.Status{Server: s.version(), StartedAt: s.opts.Started.UTC(), Domains: cfg.Domains, Hostname: cfg.Hostname,
		Listeners: append([]string{"control:" + cfg.Paths.Socket}, s.b.Listeners()...), Findings: []protocol.Finding{}}
	if o := s.b.Outbound(); o != nil {
		for _, it := range o.Queue().List() {
			if s.ownsItem(c, it) {
				out.QueueDepth++
			}
		}
	}
	if p := s.b.RestartPending(); len(p) > 0 {
		findings = append(findings, protocol.Finding{ID: "config.restart_pending", Severity: "warn",
			Message: fmt.Sprintf("the config file changes %s, which the running daemon applies only at a restart (a reload applied the rest)", strings.Join(p, ", ")),
			Fix:     protocol.RestartLine()})
	}
	for _, f := range findings {
		if c.caller.Root() || visibleFinding(f, mine, others) {
			out.Findings = append(out.Findings, f)
		}
	}
	for _, name := range mine {
		if f, ok := quotaFinding(name, s.b.Usage(name)); ok {
			out.Findings = append(out.Findings, f)
		}
	}
	return out, nil
}

// quotaFinding says when a mailbox of the caller's is over its quota (mail
// to it deferred, its sends refused) or past 90% of it.
func quotaFinding(name string, u protocol.MailboxUsage) (protocol.Finding, bool) {
	share := func(n, q int64) float64 {
		if q <= 0 {
			return 0
		}
		return float64(n) / float64(q)
	}
	used := max(share(u.Bytes, u.QuotaBytes), share(u.Messages, u.QuotaMessages))
	fix := "remove mail from " + name + " (move it to trash, then purge), or ask the operator to raise its quota (mailctl mailboxes set " + name + " --quota-bytes N)"
	switch {
	case u.OverQuota:
		return protocol.Finding{ID: "mailbox.over_quota", Severity: "warn", Fix: fix,
			Message: fmt.Sprintf("mailbox %s is at its quota (%d bytes of %d, %d messages of %d; 0 is no limit): mail to it is deferred and its sends are refused", name, u.Bytes, u.QuotaBytes, u.Messages, u.QuotaMessages)}, true
	case used >= 0.9:
		return protocol.Finding{ID: "mailbox.near_quota", Severity: "info", Fix: fix,
			Message: fmt.Sprintf("mailbox %s uses %.0f%% of its quota", name, used*100)}, true
	}
	return protocol.Finding{}, false
}

// visibleFinding keeps a finding from a non-root caller when it concerns
// another user's mailbox or paths inside it.
func visibleFinding(f protocol.Finding, mine, others []string) bool {
	text := f.Message + " " + f.Fix
	for _, name := range others {
		if mentions(text, name) {
			return false
		}
	}
	if strings.HasPrefix(f.ID, "mailbox.") {
		for _, name := range mine {
			if mentions(text, name) {
				return true
			}
		}
		return false
	}
	return true
}

// mentions reports whether text names mailbox as a whole word or path part.
func mentions(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		before := start == 0 || !isNameChar(text[start-1])
		after := end == len(text) || !isNameChar(text[end])
		if before && after {
			return true
		}
		i = end
	}
}

func isNameChar(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.'
}

// healthTTL is how long the findings of the host checks one user's status ran answer the
// status calls of users after it.
const healthTTL = 10 * time.Second

// healthCache shares the host checks among users' status calls: they read
// files, probe listeners and ask DNS (for up to 20 seconds), and status takes
// no turn (turns.go), so a user calling it in a loop would otherwise run
// them as often as it liked. At most one run is under way at a time, and
// its findings answer the calls of the next healthTTL; root's calls run
// the checks afresh.
type healthCache struct {
	mu       sync.Mutex
	at       time.Time
	findings []protocol.Finding
}

func (h *healthCache) get(now time.Time, run func() (findings []protocol.Finding, keep bool)) []protocol.Finding {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && now.Sub(h.at) < healthTTL && !now.Before(h.at) {
		return slices.Clone(h.findings)
	}
	f, keep := run()
	if keep {
		h.findings, h.at = f, now
	} else {
		h.at = time.Time{}
	}
	return slices.Clone(f)
}
