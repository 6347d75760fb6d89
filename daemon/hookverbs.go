package daemon

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"strings"

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
	d.runner = &hooks.Runner{MaxConcurrent: cfg.HookRules.MaxConcurrent, Log: log, Logger: d.log.With("part", "hooks")}
	return nil
}

// declaredHooks turns the config's hooks into validated hooks bound to the
// declared mailbox of their name; invalid ones are reported and skipped.
func (d *Daemon) declaredHooks() []protocol.Hook {
	var out []protocol.Hook
	for _, hc := range d.cfg().Hooks {
		h := protocol.Hook{Name: hc.Name, Mailbox: hc.Mailbox, Event: hc.Event, Cmd: hc.Cmd, TimeoutSecs: hc.TimeoutSecs,
			FireOnUntrusted: hc.FireOnUntrusted, FireOnAuto: hc.FireOnAuto, FireOnLists: hc.FireOnLists, Source: registry.SourceConfig}
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
// mailbox and name. A hook's name is unique on its mailbox only.
func (d *Daemon) allHooks() []protocol.Hook {
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
	for i := range out {
		if d.hookLog != nil {
			out[i].LastRun = d.hookLog.LastOf(out[i].ID)
		}
	}
	return out
}

// hooksOf lists the hooks bound to mailbox m.
func (d *Daemon) hooksOf(m *registry.Mailbox) []protocol.Hook {
	out := []protocol.Hook{}
	for _, h := range d.allHooks() {
		if h.MailboxID == m.ID && h.Mailbox == m.Name {
			out = append(out, h)
		}
	}
	return out
}

// hookVisible reports whether the caller may see (and, if not
// operator-declared, change) h: the hook is bound to a mailbox that exists
// now and is the caller's.
func (d *Daemon) hookVisible(c *call, h protocol.Hook) bool {
	if c.caller.Root() {
		return true
	}
	m, ok := d.lookupMailbox(h.Mailbox)
	return ok && m.ID == h.MailboxID && c.visible(m)
}

// stillCurrent, called under d.mu, refuses a request whose mailbox was
// deleted (and perhaps created again by someone else) after its access
// check.
func (d *Daemon) stillCurrent(c *call) error {
	want := c.box()
	if m, ok := d.lookupMailbox(want.Name); !ok || m.ID != want.ID {
		return notFoundMailbox(want.Name)
	}
	return nil
}

// hookCreateTarget is the mailbox the hook goes on; a hook that fires on
// untrusted mail is the operator's to create unless the operator allowed it.
func hookCreateTarget(d *Daemon, _ *call, a *protocol.HookCreateArgs) (target, error) {
	t := mailboxTarget(a.Mailbox)
	if a.FireOnUntrusted && !d.cfg().HookRules.AllowUntrustedForUsers {
		fix := "ask root, who can set hook_rules.allow_untrusted_for_users"
		if d.opts.Dev {
			// The dev user is the operator, but the gate is the point:
			// trust the sender instead of opening the hook to anyone.
			fix = "in mailctl dev, mark the sender trusted instead: restart dev with --trust PATTERN (mail between dev mailboxes is trusted by default)"
		}
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden,
			"fire_on_untrusted is reserved to the operator on this host (a hook that runs on unauthenticated mail can be triggered by anyone); %s", fix)
	}
	return t, nil
}

func handleHookCreate(_ context.Context, d *Daemon, c *call, a *protocol.HookCreateArgs) (any, error) {
	h := protocol.Hook{Name: a.Name, Mailbox: a.Mailbox, Event: a.Event, Cmd: a.Cmd, TimeoutSecs: a.TimeoutSecs,
		FireOnUntrusted: a.FireOnUntrusted, FireOnAuto: a.FireOnAuto, FireOnLists: a.FireOnLists}
	if err := hooks.Normalize(&h); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.stillCurrent(c); err != nil {
		return nil, err
	}
	m := c.box()
	for _, ex := range d.hooksOf(m) {
		if ex.Name != h.Name {
			continue
		}
		// Creating the same hook again is idempotent; a different hook under a taken name is not.
		if ex.Source == registry.SourceRegistry && ex.Event == h.Event && slices.Equal(ex.Cmd, h.Cmd) &&
			ex.TimeoutSecs == h.TimeoutSecs && ex.FireOnUntrusted == h.FireOnUntrusted {
			return ex, nil
		}
		return nil, protocol.Errorf(protocol.CodeConflict, "mailbox %q already has a hook named %q; pass another name", m.Name, h.Name)
	}
	h.ID, h.MailboxID = registry.NewID("h"), m.ID
	h.CreatedAt = d.now().UTC()
	if err := d.reg.AddHook(h); err != nil {
		return nil, err
	}
	h.Source = registry.SourceRegistry
	d.log.Info("hook created", "hook", h.Name, "mailbox", h.Mailbox, "event", h.Event, "by_uid", c.caller.UID)
	return h, nil
}

func handleHookList(_ context.Context, d *Daemon, c *call, a *protocol.HookListArgs) (any, error) {
	out := protocol.HookList{Hooks: []protocol.Hook{}}
	for _, h := range d.allHooks() {
		if (c.box() == nil || h.MailboxID == c.box().ID) && d.hookVisible(c, h) {
			out.Hooks = append(out.Hooks, h)
		}
	}
	return out, nil
}

func noHook(name string) error {
	return protocol.Errorf(protocol.CodeNotFound, "no hook %q on your mailboxes: list your hooks to see their names", name)
}

// hookDeleteTarget is the mailbox of the caller's hook of that name (on the
// mailbox named, if any); a hook on someone else's mailbox reads as missing.
func hookDeleteTarget(d *Daemon, c *call, a *protocol.HookDeleteArgs) (target, error) {
	var found []protocol.Hook
	for _, h := range d.allHooks() {
		if h.Name == a.Name && (a.Mailbox == "" || h.Mailbox == a.Mailbox) && d.hookVisible(c, h) {
			found = append(found, h)
		}
	}
	switch len(found) {
	case 0:
		return target{}, noHook(a.Name)
	case 1:
		return target{mailboxes: []string{found[0].Mailbox}, missing: noHook(a.Name)}, nil
	}
	var on []string
	for _, h := range found {
		on = append(on, h.Mailbox)
	}
	return target{}, protocol.Errorf(protocol.CodeInvalidInput, "hooks named %q are on several of your mailboxes (%s): name the mailbox too", a.Name, strings.Join(on, ", "))
}

func handleHookDelete(_ context.Context, d *Daemon, c *call, a *protocol.HookDeleteArgs) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.stillCurrent(c); err != nil {
		return nil, err
	}
	for _, h := range d.hooksOf(c.box()) {
		if h.Name != a.Name {
			continue
		}
		if h.Source == registry.SourceConfig {
			return nil, protocol.Errorf(protocol.CodeForbidden, "hook %q is declared by the operator in config.toml; only the operator can remove it there", a.Name)
		}
		if err := d.reg.RemoveHook(h.ID); err != nil {
			return nil, err
		}
		d.log.Info("hook deleted", "hook", a.Name, "mailbox", h.Mailbox, "by_uid", c.caller.UID)
		return protocol.Deleted{Name: a.Name, Deleted: true}, nil
	}
	return nil, noHook(a.Name)
}

// handleHookRuns lists runs of hooks bound to the caller's mailboxes as they
// are now: runs of a deleted mailbox or hook are never shown through a new
// one of the same name. Root sees every run.
func handleHookRuns(_ context.Context, d *Daemon, c *call, a *protocol.HookRunsArgs) (any, error) {
	if a.Limit <= 0 || a.Limit > 500 {
		a.Limit = 50
	}
	mine := map[string]bool{}
	for _, m := range d.allMailboxes() {
		if c.visible(m) {
			mine[m.ID+"/"+m.Name] = true
		}
	}
	runs := d.hookLog.List(func(r protocol.HookRun) bool {
		return (c.caller.Root() || mine[r.MailboxID+"/"+r.Mailbox]) && (a.Name == "" || r.Hook == a.Name)
	}, a.Limit)
	if runs == nil {
		runs = []protocol.HookRun{}
	}
	return protocol.HookRuns{Runs: runs}, nil
}

// hasHooks reports whether the mailbox named mailbox has a hook for event.
func (d *Daemon) hasHooks(event, mailbox string) bool {
	m, ok := d.lookupMailbox(mailbox)
	if !ok || d.runner == nil {
		return false
	}
	for _, h := range d.hooksOf(m) {
		if h.Event == event {
			return true
		}
	}
	return false
}

// fireHooks runs the hooks of mailbox for event whose gate opens, as the
// mailbox owner, asynchronously (never delaying SMTP or a sender).
func (d *Daemon) fireHooks(event, mailbox string, f hooks.Facts, render func() []byte) {
	m, ok := d.lookupMailbox(mailbox)
	if !ok || d.runner == nil {
		return
	}
	// The hook's stdin is the whole message file: made once, and only when
	// a hook runs (most messages have none, and a large one would be
	// rendered a second time for nothing).
	var stdin []byte
	for _, h := range d.hooksOf(m) {
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
			continue
		}
		d.metrics.hookRuns.WithLabelValues(event).Inc()
		if stdin == nil {
			stdin = render()
		}
		d.runner.Go(h, owner, f, stdin)
	}
}
