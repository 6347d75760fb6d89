package control

import (
	"context"
	"slices"
	"strings"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/protocol"
)

// hooksOf lists the hooks bound to mailbox m.
func (s *Server) hooksOf(m *registry.Mailbox) []protocol.Hook { return m.Hooks(s.b.Hooks()) }

// hookVisible reports whether the caller may see (and, if not
// operator-declared, change) h: the hook is bound to a mailbox that exists
// now and is the caller's.
func (s *Server) hookVisible(c *call, h protocol.Hook) bool {
	if c.caller.Root() {
		return true
	}
	m, ok := s.b.Mailbox(h.Mailbox)
	return ok && m.ID == h.MailboxID && c.visible(m)
}

// stillCurrent, called under s.mu, refuses a request whose mailbox was
// deleted (and perhaps created again by someone else) after its access
// check.
func (s *Server) stillCurrent(c *call) error {
	want := c.box()
	if m, ok := s.b.Mailbox(want.Name); !ok || m.ID != want.ID {
		return notFoundMailbox(want.Name)
	}
	return nil
}

// hookCreateTarget is the mailbox the hook goes on; a hook that fires on
// untrusted mail is the operator's to create unless the operator allowed it.
func hookCreateTarget(s *Server, _ *call, a *protocol.HookCreateArgs) (target, error) {
	t := mailboxTarget(a.Mailbox)
	if a.FireOnUntrusted && !s.cfg().HookRules.AllowUntrustedForUsers {
		fix := "ask root, who can set hook_rules.allow_untrusted_for_users"
		if s.opts.Dev {
			// The dev user is the operator, but the gate is the point:
			// trust the sender instead of opening the hook to anyone.
			fix = "in mailctl dev, mark the sender trusted instead: restart dev with --trust PATTERN (mail between dev mailboxes stays trusted)"
		}
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden,
			"fire_on_untrusted is reserved to the operator on this host (a hook that runs on unauthenticated mail can be triggered by anyone); %s", fix)
	}
	return t, nil
}

func handleHookCreate(_ context.Context, s *Server, c *call, a *protocol.HookCreateArgs) (any, error) {
	h := protocol.Hook{Name: a.Name, Mailbox: a.Mailbox, Event: a.Event, Cmd: a.Cmd, TimeoutSecs: a.TimeoutSecs,
		FireOnUntrusted: a.FireOnUntrusted, FireOnAuto: a.FireOnAuto, FireOnLists: a.FireOnLists}
	if err := hooks.Normalize(&h); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stillCurrent(c); err != nil {
		return nil, err
	}
	m := c.box()
	same := func(ex protocol.Hook) bool {
		return ex.Source == registry.SourceRegistry && ex.Event == h.Event && slices.Equal(ex.Cmd, h.Cmd) &&
			ex.TimeoutSecs == h.TimeoutSecs && ex.FireOnUntrusted == h.FireOnUntrusted && ex.FireOnAuto == h.FireOnAuto && ex.FireOnLists == h.FireOnLists
	}
	// Creating the same hook again is idempotent; a different hook under a
	// taken name is not. Without a name, the same definition is the same
	// hook whatever name it was given: one created before its flags were
	// part of the derived name has another.
	for _, ex := range s.hooksOf(m) {
		if (ex.Name == h.Name || a.Name == "") && same(ex) {
			return ex, nil
		}
	}
	for _, ex := range s.hooksOf(m) {
		if ex.Name == h.Name {
			return nil, protocol.Errorf(protocol.CodeConflict, "mailbox %q already has a hook named %q; pass another name", m.Name, h.Name)
		}
	}
	if max := s.cfg().HookRules.MaxPerMailbox; !c.caller.Root() {
		n := 0
		for _, ex := range s.hooksOf(m) {
			if ex.Source == registry.SourceRegistry {
				n++
			}
		}
		if n >= max {
			return nil, protocol.Errorf(protocol.CodePolicyBlocked,
				"mailbox %q has %d hooks, the most users may create on one mailbox on this host (hook_rules.max_per_mailbox = %d); delete one, or ask root", m.Name, n, max)
		}
	}
	h.ID, h.MailboxID = registry.NewID("h"), m.ID
	h.CreatedAt = s.now().UTC()
	if err := s.reg.AddHook(h); err != nil {
		return nil, err
	}
	h.Source = registry.SourceRegistry
	s.log.Info("hook created", "hook", h.Name, "mailbox", h.Mailbox, "event", h.Event, "by_uid", c.caller.UID)
	return h, nil
}

func handleHookList(_ context.Context, s *Server, c *call, a *protocol.HookListArgs) (any, error) {
	out := protocol.HookList{Hooks: []protocol.Hook{}}
	for _, h := range s.b.Hooks() {
		if (c.box() == nil || h.MailboxID == c.box().ID) && s.hookVisible(c, h) {
			out.Hooks = append(out.Hooks, h)
		}
	}
	return out, nil
}

func noHook(name string) error {
	return notFound(protocol.MissingHook, []string{name}, "on your mailboxes")
}

// hookDeleteTarget is the mailbox of the caller's hook of that name (on the
// mailbox named, if any); a hook on someone else's mailbox reads as missing.
func hookDeleteTarget(s *Server, c *call, a *protocol.HookDeleteArgs) (target, error) {
	var found []protocol.Hook
	for _, h := range s.b.Hooks() {
		if h.Name == a.Name && (a.Mailbox == "" || h.Mailbox == a.Mailbox) && s.hookVisible(c, h) {
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

func handleHookDelete(_ context.Context, s *Server, c *call, a *protocol.HookDeleteArgs) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stillCurrent(c); err != nil {
		return nil, err
	}
	for _, h := range s.hooksOf(c.box()) {
		if h.Name != a.Name {
			continue
		}
		if h.Source == registry.SourceConfig {
			return nil, protocol.Errorf(protocol.CodeForbidden, "hook %q is declared by the operator in config.toml; only the operator can remove it there", a.Name)
		}
		if err := s.reg.RemoveHook(h.ID); err != nil {
			return nil, err
		}
		s.log.Info("hook deleted", "hook", a.Name, "mailbox", h.Mailbox, "by_uid", c.caller.UID)
		return protocol.Deleted{Name: a.Name, Deleted: true}, nil
	}
	return nil, noHook(a.Name)
}

// MaxHookRuns is the most runs one hook.runs answers with.
const MaxHookRuns = 500

// handleHookRuns lists runs of hooks bound to the caller's mailboxes as they
// are now: runs of a deleted mailbox or hook are never shown through a new
// one of the same name. Root sees every run.
func handleHookRuns(_ context.Context, s *Server, c *call, a *protocol.HookRunsArgs) (any, error) {
	switch {
	case a.Limit < 0:
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "limit must not be negative")
	case a.Limit == 0:
		a.Limit = 50
	case a.Limit > MaxHookRuns:
		a.Limit = MaxHookRuns // as message.list caps its limit: the most there is, not the default
	}
	mine := map[string]bool{}
	for _, m := range s.b.Mailboxes() {
		if c.visible(m) {
			mine[m.ID+"/"+m.Name] = true
		}
	}
	// A hook made again under a name is another hook: the runs of the one
	// before it are not shown to its owner as its runs. Runs of a deleted
	// hook that nothing replaced stay listed.
	now := map[string]string{} // mailbox identity and hook name -> hook identity
	for _, h := range s.b.Hooks() {
		now[h.MailboxID+"/"+h.Name] = h.ID
	}
	replaced := func(r protocol.HookRun) bool {
		id, ok := now[r.MailboxID+"/"+r.Hook]
		return ok && r.HookID != "" && id != r.HookID
	}
	runs := s.b.HookRuns(func(r protocol.HookRun) bool {
		return (c.caller.Root() || mine[r.MailboxID+"/"+r.Mailbox] && !replaced(r)) && (a.Name == "" || r.Hook == a.Name)
	}, a.Limit)
	if runs == nil {
		runs = []protocol.HookRun{}
	}
	return protocol.HookRuns{Runs: runs}, nil
}
