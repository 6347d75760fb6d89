package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/protocol"
)

// openHookRunner prepares the hook runner and its run log under the state dir.
func (d *Daemon) openHookRunner() error {
	cfg := d.cfg()
	log, err := hooks.OpenRunLog(filepath.Join(cfg.Paths.StateDir, "hook-runs.jsonl"), 1000)
	if err != nil {
		return err
	}
	d.hookLog = log
	d.runner = &hooks.Runner{MaxConcurrent: cfg.HookRules.MaxConcurrent, Log: log, Logger: d.log.With("part", "hooks"),
		OnRun: func(run protocol.HookRun) { d.metrics.hookRun(run) }, // d.metrics is made after the runner
		Check: d.hookStillCurrent}
	return nil
}

// hookStillCurrent reports why the run of h as owner, chosen when its event
// came, must not start now that it has a slot: its mailbox is gone or is
// another one under the same name (a new identity, perhaps another owner),
// or the hook is gone or no longer the same (deleted, or a declared hook
// changed or removed by a reload). Names are not enough: a hook or mailbox
// made again under the same name is another one.
func (d *Daemon) hookStillCurrent(h protocol.Hook, owner hooks.Owner, _ hooks.Facts) error {
	m, ok := d.lookupMailbox(h.Mailbox)
	if !ok || m.ID != h.MailboxID || m.UID != owner.UID {
		return errors.New("its mailbox was deleted while the run waited")
	}
	for _, cur := range m.Hooks(d.currentHooks()) {
		if cur.ID != h.ID {
			continue
		}
		if cur.Event != h.Event || !slices.Equal(cur.Cmd, h.Cmd) || cur.TimeoutSecs != h.TimeoutSecs ||
			cur.FireOnUntrusted != h.FireOnUntrusted || cur.FireOnAuto != h.FireOnAuto || cur.FireOnLists != h.FireOnLists {
			return errors.New("the hook was changed while the run waited")
		}
		return nil
	}
	return errors.New("the hook was deleted while the run waited")
}

// checkDeclaredHooks refuses a config whose [[hooks]] a run would refuse
// (an unknown event, a timeout out of range, a cmd that is not an absolute
// path): such a hook was only logged as skipped, at every delivery, and
// never ran, while the daemon started or the reload succeeded as if it would.
func checkDeclaredHooks(cfg *config.Config) error {
	var errs []string
	for i, hc := range cfg.Hooks {
		h := protocol.Hook{Name: hc.Name, Mailbox: hc.Mailbox, Event: hc.Event, Cmd: hc.Cmd, TimeoutSecs: hc.TimeoutSecs,
			FireOnUntrusted: hc.FireOnUntrusted, FireOnAuto: hc.FireOnAuto, FireOnLists: hc.FireOnLists}
		hooks.DropUngatedFlags(&h)
		if err := hooks.Normalize(&h); err != nil {
			errs = append(errs, fmt.Sprintf("hooks[%d] %q on mailbox %q: %v", i, hc.Name, hc.Mailbox, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// declaredHooks turns the config's hooks into validated hooks bound to the
// declared mailbox of their name; invalid ones are reported and skipped.
func (d *Daemon) declaredHooks() []protocol.Hook {
	var out []protocol.Hook
	for _, hc := range d.cfg().Hooks {
		h := protocol.Hook{Name: hc.Name, Mailbox: hc.Mailbox, Event: hc.Event, Cmd: hc.Cmd, TimeoutSecs: hc.TimeoutSecs,
			FireOnUntrusted: hc.FireOnUntrusted, FireOnAuto: hc.FireOnAuto, FireOnLists: hc.FireOnLists, Source: registry.SourceConfig}
		hooks.DropUngatedFlags(&h)
		if err := hooks.Normalize(&h); err != nil {
			d.log.Error("config hook skipped", "hook", hc.Name, "mailbox", hc.Mailbox, "err", err)
			continue
		}
		if m, ok := d.lookupMailbox(h.Mailbox); ok {
			h.MailboxID = m.ID
		}
		h.ID = registry.DerivedID("c", "hook", h.MailboxID, h.Mailbox, h.Name)
		out = append(out, h)
	}
	return out
}

// allHooks lists operator and registry hooks, operator ones first, then by
// mailbox and name, each with its last run. A hook's name is unique on its
// mailbox only.
func (d *Daemon) allHooks() []protocol.Hook {
	out := d.currentHooks()
	for i := range out {
		if d.hookLog != nil {
			out[i].LastRun = d.hookLog.LastOf(out[i].ID)
		}
	}
	return out
}

// currentHooks is allHooks without the last runs.
func (d *Daemon) currentHooks() []protocol.Hook {
	out := d.declaredHooks()
	type key struct{ mailbox, name string }
	taken := map[key]bool{}
	for _, h := range out {
		taken[key{h.Mailbox, h.Name}] = true
	}
	for _, h := range d.reg.Hooks() {
		if h.MailboxID == "" {
			// Created before hooks were bound to an identity: bound to
			// the mailbox of its name (deleting that mailbox deletes it).
			if m, ok := d.lookupMailbox(h.Mailbox); ok {
				h.MailboxID = m.ID
			}
		}
		if !taken[key{h.Mailbox, h.Name}] {
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Source != out[j].Source {
			return out[i].Source == registry.SourceConfig
		}
		if out[i].Mailbox != out[j].Mailbox {
			return out[i].Mailbox < out[j].Mailbox
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// hasHooks reports whether the mailbox named mailbox has a hook for event.
func (d *Daemon) hasHooks(event, mailbox string) bool {
	m, ok := d.lookupMailbox(mailbox)
	if !ok || d.runner == nil {
		return false
	}
	for _, h := range m.Hooks(d.allHooks()) {
		if h.Event == event {
			return true
		}
	}
	return false
}

// fireHooks runs the hooks of mailbox for event whose gate opens, as the
// mailbox owner, asynchronously (never delaying SMTP or a sender).
func (d *Daemon) fireHooks(event, mailbox, mailboxID string, f hooks.Facts, render func() []byte) {
	m, ok := d.lookupMailbox(mailbox)
	if !ok || d.runner == nil {
		return
	}
	if mailboxID != "" && m.ID != mailboxID {
		// Deleted and made again under the name (perhaps by another user)
		// since the message was routed: its hooks are not this message's.
		d.log.Info("hooks not run: the mailbox was made again while the message was delivered", "mailbox", mailbox, "id", f.ID)
		return
	}
	// The hook's stdin is the whole message file: made once, and only when
	// a hook runs (most messages have none, and a large one would be
	// rendered a second time for nothing).
	var stdin []byte
	for _, h := range m.Hooks(d.allHooks()) {
		if h.Event != event {
			continue
		}
		if fire, why := hooks.ShouldFire(h, f); !fire {
			d.log.Debug("hook gated", "hook", h.Name, "mailbox", mailbox, "reason", why)
			continue
		}
		owner, err := hooks.LookupOwner(m.UID)
		if err != nil {
			d.log.Error("hook not run: owner unusable", "hook", h.Name, "mailbox", mailbox, "err", err)
			d.hookLog.Append(protocol.HookRun{Hook: h.Name, HookID: h.ID, Mailbox: mailbox, MailboxID: h.MailboxID, Event: event, MessageID: f.ID,
				StartedAt: d.now().UTC(), ExitCode: -1, Error: "owner unusable: " + err.Error()})
			d.metrics.ops.hookFailures.WithLabelValues(event, "error").Inc()
			continue
		}
		d.metrics.hookRuns.WithLabelValues(event).Inc()
		if stdin == nil {
			stdin = render()
		}
		d.runner.Go(h, owner, f, stdin)
	}
}
