package daemon

import (
	"context"
	"path/filepath"
	"sort"

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

// declaredHooks turns the config's hooks into validated hooks; invalid ones are
// reported and skipped.
func (d *Daemon) declaredHooks() []protocol.Hook {
	var out []protocol.Hook
	for _, hc := range d.cfg().Hooks {
		h := protocol.Hook{Name: hc.Name, Mailbox: hc.Mailbox, Event: hc.Event, Cmd: hc.Cmd, TimeoutSecs: hc.TimeoutSecs,
			FireOnUntrusted: hc.FireOnUntrusted, FireOnAuto: hc.FireOnAuto, FireOnLists: hc.FireOnLists, Source: "config"}
		if err := hooks.Normalize(&h); err != nil {
			d.log.Error("config hook skipped", "hook", hc.Name, "mailbox", hc.Mailbox, "err", err)
			continue
		}
		out = append(out, h)
	}
	return out
}

// allHooks lists operator and registry hooks, operator ones first by name.
func (d *Daemon) allHooks() []protocol.Hook {
	out := d.declaredHooks()
	taken := map[string]bool{}
	for _, h := range out {
		taken[h.Name] = true
	}
	for _, h := range d.reg.Hooks() {
		if !taken[h.Name] {
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Source != out[j].Source {
			return out[i].Source == "config"
		}
		return out[i].Name < out[j].Name
	})
	for i := range out {
		if d.hookLog != nil {
			out[i].LastRun = d.hookLog.Last(out[i].Name)
		}
	}
	return out
}

func (d *Daemon) hooksOf(mailbox string) []protocol.Hook {
	out := []protocol.Hook{}
	for _, h := range d.allHooks() {
		if h.Mailbox == mailbox {
			out = append(out, h)
		}
	}
	return out
}

// hookVisible reports whether the caller may see (and, if not operator-declared, change) h.
func (d *Daemon) hookVisible(c *call, h protocol.Hook) bool {
	if c.caller.Root() {
		return true
	}
	m, ok := d.lookupMailbox(h.Mailbox)
	return ok && m.UID == c.caller.UID
}

// hookCreateTarget is the mailbox the hook goes on; a hook that fires on
// untrusted mail is the operator's to create unless the operator allowed it.
func hookCreateTarget(d *Daemon, _ *call, a *protocol.HookCreateArgs) (target, error) {
	t := mailboxTarget(a.Mailbox)
	if a.FireOnUntrusted && !d.cfg().HookRules.AllowUntrustedForUsers {
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden,
			"fire_on_untrusted is reserved to the operator on this host (a hook that runs on unauthenticated mail can be triggered by anyone); ask root, who can set hook_rules.allow_untrusted_for_users")
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
	for _, ex := range d.allHooks() {
		if ex.Name != h.Name {
			continue
		}
		// Creating the same hook again is idempotent; a different hook under a taken name is not.
		if ex.Source == "registry" && ex.Mailbox == h.Mailbox && ex.Event == h.Event && equalStrings(ex.Cmd, h.Cmd) &&
			ex.TimeoutSecs == h.TimeoutSecs && ex.FireOnUntrusted == h.FireOnUntrusted && d.hookVisible(c, ex) {
			return ex, nil
		}
		return nil, protocol.Errorf(protocol.CodeConflict, "the hook name %q is taken; pass another name", h.Name)
	}
	h.CreatedAt = d.now().UTC()
	if err := d.reg.AddHook(h); err != nil {
		return nil, err
	}
	h.Source = "registry"
	d.log.Info("hook created", "hook", h.Name, "mailbox", h.Mailbox, "event", h.Event, "by_uid", c.caller.UID)
	return h, nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func handleHookList(_ context.Context, d *Daemon, c *call, a *protocol.HookListArgs) (any, error) {
	out := protocol.HookList{Hooks: []protocol.Hook{}}
	for _, h := range d.allHooks() {
		if (a.Mailbox == "" || h.Mailbox == a.Mailbox) && d.hookVisible(c, h) {
			out.Hooks = append(out.Hooks, h)
		}
	}
	return out, nil
}

func noHook(name string) error {
	return protocol.Errorf(protocol.CodeNotFound, "no hook %q on your mailboxes: `mailctl hooks list` shows them", name)
}

// hookDeleteTarget is the mailbox of the caller's hook of that name; a hook on
// someone else's mailbox reads as missing.
func hookDeleteTarget(d *Daemon, c *call, a *protocol.NameArgs) (target, error) {
	for _, h := range d.allHooks() {
		if h.Name == a.Name && d.hookVisible(c, h) {
			return target{mailboxes: []string{h.Mailbox}, missing: noHook(a.Name)}, nil
		}
	}
	return target{}, noHook(a.Name)
}

func handleHookDelete(_ context.Context, d *Daemon, c *call, a *protocol.NameArgs) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.allHooks() {
		if h.Name != a.Name || h.Mailbox != c.box().Name {
			continue
		}
		if h.Source == "config" {
			return nil, protocol.Errorf(protocol.CodeForbidden, "hook %q is declared by the operator in config.toml; only the operator can remove it there", a.Name)
		}
		if err := d.reg.RemoveHook(a.Name); err != nil {
			return nil, err
		}
		d.log.Info("hook deleted", "hook", a.Name, "mailbox", h.Mailbox, "by_uid", c.caller.UID)
		return protocol.Deleted{Name: a.Name, Deleted: true}, nil
	}
	return nil, noHook(a.Name)
}

func handleHookRuns(_ context.Context, d *Daemon, c *call, a *protocol.HookRunsArgs) (any, error) {
	if a.Limit <= 0 || a.Limit > 500 {
		a.Limit = 50
	}
	owned := map[string]bool{}
	for _, m := range d.allMailboxes() {
		if c.visible(m) {
			owned[m.Name] = true
		}
	}
	runs := d.hookLog.List(func(r protocol.HookRun) bool {
		return owned[r.Mailbox] && (a.Name == "" || r.Hook == a.Name)
	}, a.Limit)
	if runs == nil {
		runs = []protocol.HookRun{}
	}
	return protocol.HookRuns{Runs: runs}, nil
}

// fireHooks runs the hooks of mailbox for event whose gate opens, as the
// mailbox owner, asynchronously (never delaying SMTP or a sender).
func (d *Daemon) fireHooks(event, mailbox string, f hooks.Facts, stdin []byte) {
	m, ok := d.lookupMailbox(mailbox)
	if !ok || d.runner == nil {
		return
	}
	for _, h := range d.hooksOf(mailbox) {
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
			d.hookLog.Append(protocol.HookRun{Hook: h.Name, Mailbox: mailbox, Event: event, MessageID: f.ID,
				StartedAt: d.now().UTC(), ExitCode: -1, Error: "owner unusable: " + err.Error()})
			continue
		}
		d.metrics.hookRuns.WithLabelValues(event).Inc()
		d.runner.Go(h, owner, f, stdin)
	}
}
