package control

import (
	"context"
	"fmt"
	"strings"
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
	findings := s.b.Health(cctx)
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
			Fix:     "sudo systemctl restart mailctl"})
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
