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
	return out, nil
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
