package daemon

import (
	"context"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/doctor"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/protocol"
)

// backend is the daemon as the control API sees it (control.Backend).
type backend struct{ d *Daemon }

var _ control.Backend = backend{}

func (b backend) Config() *config.Config         { return b.d.cfg() }
func (b backend) RestartPending() []string       { return b.d.state.Load().pending }
func (b backend) Mailboxes() []*registry.Mailbox { return b.d.allMailboxes() }
func (b backend) Hooks() []protocol.Hook         { return b.d.allHooks() }
func (b backend) DisplayName(name string) string { return b.d.displayName(name) }
func (b backend) Listeners() []string            { return b.d.SMTPAddrs() }

func (b backend) Mailbox(name string) (*registry.Mailbox, bool) { return b.d.lookupMailbox(name) }

func (b backend) LastReload() *protocol.ReloadStatus { return b.d.lastReload.Load() }

func (b backend) TrustedSenders(name string) ([]string, string) { return b.d.trustedSenders(name) }
func (b backend) Usage(name string) protocol.MailboxUsage       { return b.d.mailboxUsage(name, 0) }
func (b backend) Prune(mailbox string, dryRun bool) (protocol.PruneResult, error) {
	return b.d.prune(mailbox, dryRun)
}

func (b backend) HookRuns(keep func(protocol.HookRun) bool, limit int) []protocol.HookRun {
	return b.d.hookLog.List(keep, limit)
}

// Outbound is nil, as an interface, when the daemon cannot send.
func (b backend) Outbound() control.Outbound {
	if b.d.out == nil {
		return nil
	}
	return b.d.out
}

func (b backend) Health(ctx context.Context) []protocol.Finding {
	d := b.d
	env := doctor.Env{Resolver: d.resolver, Root: true, Dev: d.opts.Dev, ClientVersion: d.Version(),
		Port25Listening: func() bool { return len(d.SMTPAddrs()) > 0 }, Now: d.now, ServedCertificate: d.servedCertificate}
	if d.opts.Resolver == nil { // a test's in-memory resolver has no DNSSEC
		env.DNSSEC = resolver.NewExchanger(d.cfg().DNS.Resolver, 5*time.Second)
	}
	return doctor.Check(ctx, d.cfg(), env)
}

// trustedSenders is the effective trusted-sender list of a mailbox and where
// it is set: the config's declaration, else what its owner set in the
// registry, else the global [trust] list.
func (d *Daemon) trustedSenders(name string) ([]string, string) {
	cfg := d.cfg()
	if cfg.Mailbox(name) == nil {
		if r, ok := d.reg.Mailbox(name); ok && r.TrustedSenders != nil {
			return *r.TrustedSenders, "mailbox"
		}
	}
	return cfg.TrustedSenders(name)
}

// displayName is the name outgoing From carries for a mailbox: the
// config's, else the registry's; empty for none. A registry name the
// current check refuses (one set before the check grew) is not used.
func (d *Daemon) displayName(name string) string {
	if m := d.cfg().Mailbox(name); m != nil {
		return m.DisplayName
	}
	if r, ok := d.reg.Mailbox(name); ok && config.ValidDisplayName(r.DisplayName) == nil {
		return r.DisplayName
	}
	return ""
}
