package control

import (
	"maps"
	"slices"
	"strings"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Access is what a verb asks of its caller. Every verb declares one in the
// verb table below; dispatch checks it, in one place, before the handler
// runs, and records the decision on the audit line.
type Access int

const (
	// AccessAny lets any caller in. The verb touches nothing another user owns
	// and shows only what the caller owns (lists, version, status).
	AccessAny Access = iota
	// AccessRead: every mailbox the request names must be the caller's.
	AccessRead
	// AccessWrite: as AccessRead, for verbs that change mail or hooks, or send.
	AccessWrite
	// AccessManage: as AccessWrite; an operator-declared mailbox or the catch-all
	// also needs root.
	AccessManage
	// AccessRoot: root only.
	AccessRoot
)

var accessNames = map[Access]string{AccessAny: "any", AccessRead: "read", AccessWrite: "write", AccessManage: "manage", AccessRoot: "root"}

func (a Access) String() string { return accessNames[a] }

// The verb table: every verb of the control socket, the access it needs,
// what its request acts on, and the handler. A verb missing here does not
// exist; the real-uid matrix test (TestAuthorizationMatrix) has a row for
// each entry.
func init() {
	handle(protocol.VerbVersion, on(AccessAny, nil, handleVersion))
	handle(protocol.VerbStatus, unpacedRoute(on(AccessAny, nil, handleStatus)))

	handle(protocol.VerbMailboxList, on(AccessAny, nil, handleMailboxList))
	handle(protocol.VerbMailboxShow, on(AccessRead, named(func(a *protocol.NameArgs) string { return a.Name }), handleMailboxShow))
	handle(protocol.VerbMailboxCreate, unpacedRoute(on(AccessAny, mailboxCreateTarget, handleMailboxCreate)))
	handle(protocol.VerbMailboxUpdate, on(AccessManage, mailboxUpdateTarget, handleMailboxUpdate))
	handle(protocol.VerbMailboxPrune, on(AccessRoot, func(_ *Server, _ *call, a *protocol.MailboxPruneArgs) (target, error) {
		return optionalMailbox(a.Mailbox), nil
	}, handleMailboxPrune))
	handle(protocol.VerbMailboxDelete, unpacedRoute(holding(namesOwn, on(AccessManage, named(func(a *protocol.MailboxDeleteArgs) string { return a.Name }), handleMailboxDelete))))

	handle(protocol.VerbMessageList, on(AccessRead, named(func(a *protocol.MessageListArgs) string { return a.Mailbox }), handleMessageList))
	handle(protocol.VerbMessageRead, on(AccessRead, named(func(a *protocol.MessageReadArgs) string { return a.Mailbox }), handleMessageRead))
	handle(protocol.VerbMessageMark, on(AccessWrite, named(func(a *protocol.MessageMarkArgs) string { return a.Mailbox }), handleMessageMark))
	handle(protocol.VerbMessageMove, on(AccessWrite, named(func(a *protocol.MessageMoveArgs) string { return a.Mailbox }), handleMessageMove))
	handle(protocol.VerbMessageLabel, on(AccessWrite, named(func(a *protocol.MessageLabelArgs) string { return a.Mailbox }), handleMessageLabel))
	handle(protocol.VerbMessagePurge, on(AccessWrite, named(func(a *protocol.MessagePurgeArgs) string { return a.Mailbox }), handleMessagePurge))

	handle(protocol.VerbSend, unpacedUnless(func(a *protocol.SendArgs) bool { return a.DryRun },
		on(AccessWrite, named(func(a *protocol.SendArgs) string { return a.FromMailbox }), handleSend)))
	handle(protocol.VerbSendStatus, on(AccessRead, named(func(a *protocol.SendStatusArgs) string { return a.Mailbox }), handleSendStatus))

	handle(protocol.VerbHookCreate, on(AccessWrite, hookCreateTarget, handleHookCreate))
	handle(protocol.VerbHookList, on(AccessRead, func(_ *Server, _ *call, a *protocol.HookListArgs) (target, error) {
		return optionalMailbox(a.Mailbox), nil
	}, handleHookList))
	handle(protocol.VerbHookDelete, on(AccessWrite, hookDeleteTarget, handleHookDelete))
	handle(protocol.VerbHookRuns, on(AccessAny, nil, handleHookRuns))

	handle(protocol.VerbQueueList, on(AccessAny, nil, handleQueueList))
	handle(protocol.VerbQueueShow, on(AccessRead, queueTarget, handleQueueShow))
	handle(protocol.VerbQueueRetry, on(AccessWrite, queueTarget, handleQueueRetry))
	handle(protocol.VerbQueueDrop, on(AccessWrite, queueTarget, handleQueueDrop))
	handle(protocol.VerbQueueApprove, on(AccessRoot, queueTarget, handleQueueApprove))
	handle(protocol.VerbIndexRebuild, on(AccessRoot, nil, handleIndexRebuild))
	handle(protocol.VerbBackupSnapshot, on(AccessRoot, nil, handleBackupSnapshot))
	handle(protocol.VerbQueueReschedule, on(AccessWrite, queueRescheduleTarget, handleQueueReschedule))
	handle(protocol.VerbQueueFlush, on(AccessWrite, queueFilterTarget[protocol.QueueFilter], handleQueueFlush))
	handle(protocol.VerbQueueDropMatching, on(AccessWrite, queueFilterTarget[protocol.QueueFilter], handleQueueDropMatching))
	handle(protocol.VerbQueueSummary, on(AccessRead, queueFilterTarget[protocol.QueueSummaryArgs], handleQueueSummary))
	handle(protocol.VerbDraftCreate, on(AccessWrite, named(func(a *protocol.DraftArgs) string { return a.Mailbox }), handleDraftCreate))
	handle(protocol.VerbDraftUpdate, on(AccessWrite, named(func(a *protocol.DraftUpdateArgs) string { return a.Mailbox }), handleDraftUpdate))
	handle(protocol.VerbDraftSend, unpacedUnless(func(a *protocol.DraftSendArgs) bool { return a.DryRun },
		on(AccessWrite, named(func(a *protocol.DraftSendArgs) string { return a.Mailbox }), handleDraftSend)))
	handle(protocol.VerbDraftDelete, on(AccessWrite, named(func(a *protocol.DraftIDArgs) string { return a.Mailbox }), handleDraftDelete))

	handle(protocol.VerbWatch, unpacedRoute(holding(namesUnheld, on(AccessRead, func(_ *Server, _ *call, a *protocol.WatchArgs) (target, error) {
		return target{mailboxes: a.Mailboxes}, nil
	}, handleWatch))))
}

// named targets the one mailbox the request's arguments name.
func named[A any](mailbox func(*A) string) func(*Server, *call, *A) (target, error) {
	return func(_ *Server, _ *call, a *A) (target, error) { return mailboxTarget(mailbox(a)), nil }
}

// target is what one request acts on, named by its arguments and resolved
// before the access check.
type target struct {
	// mailboxes the request reads or changes; each must exist and be the
	// caller's (root: any).
	mailboxes []string
	// rootOnly, when set, refuses the request to every caller but root and
	// says why (another owner named, fire_on_untrusted, ...).
	rootOnly error
	// missing answers a caller for whom a mailbox does not exist or is not
	// theirs; nil means the mailbox's own not-found message. A queue item or
	// a hook sets its own so the answer names what was asked for.
	missing error
	// creates is the name of a mailbox the request would create, for the
	// audit line.
	creates string
	// goneOK lets root act although the mailbox no longer exists (queued
	// mail of a deleted mailbox).
	goneOK bool
	// boundID, when set, is the identity the first mailbox must have: what
	// the request acts on (a queue item) belongs to that very mailbox, not
	// to one created later under its name.
	boundID string
}

// concerns names the mailboxes of the target for the audit line.
func (t target) concerns() string {
	names := append([]string(nil), t.mailboxes...)
	if t.creates != "" {
		names = append(names, t.creates)
	}
	return strings.Join(names, ",")
}

func mailboxTarget(name string) target { return target{mailboxes: []string{name}} }

// optionalMailbox is the target of a verb whose mailbox filter may be left
// out; without it the handler shows only what the caller owns.
func optionalMailbox(name string) target {
	if name == "" {
		return target{}
	}
	return mailboxTarget(name)
}

// authorize is the one authorization decision of the control socket. Root may
// do anything the verb allows. Any other uid may act only on mailboxes it
// owns; a mailbox it does not own answers exactly like one that does not
// exist, so names of other users' mailboxes are never revealed.
// Operator-declared mailboxes (and the catch-all) cannot be managed by
// non-root callers. It returns the mailboxes in the order the target named
// them.
func (s *Server) authorize(c *call, acc Access, t target) ([]*registry.Mailbox, error) {
	root := c.caller.Root()
	if acc == AccessRoot && !root {
		return nil, errRootOnly()
	}
	var boxes []*registry.Mailbox
	for _, name := range t.mailboxes {
		m, err := s.authorizeMailbox(c, acc, t, name, len(boxes) == 0)
		if err != nil {
			return nil, err
		}
		if m != nil {
			boxes = append(boxes, m)
		}
	}
	if t.rootOnly != nil && !root {
		return nil, t.rootOnly
	}
	return boxes, nil
}

// authorizeMailbox decides about one mailbox a request names (first: the
// one a bound identity applies to). A nil mailbox with a nil error is one
// root may name although it is gone.
func (s *Server) authorizeMailbox(c *call, acc Access, t target, name string, first bool) (*registry.Mailbox, error) {
	if err := store.ValidMailboxName(name); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
	}
	root := c.caller.Root()
	m, ok := s.b.Mailbox(name)
	if ok && first && t.boundID != "" && m.ID != t.boundID {
		ok = false // the name now belongs to another mailbox
	}
	switch {
	case !ok && root && t.goneOK:
		return nil, nil
	case (!ok || !c.visible(m)) && t.missing != nil:
		return nil, t.missing
	case !ok || !c.visible(m):
		return nil, notFoundMailbox(name)
	case acc != AccessManage || root:
		return m, nil
	case m.Source == registry.SourceConfig:
		return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is declared by the operator in config.toml; only root can change it", name)
	case name == s.cfg().CatchAll:
		return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is the catch-all; only root can change it", name)
	}
	return m, nil
}

// errRootOnly refuses a root-only verb to anyone else; it names nothing the
// request named.
func errRootOnly() error {
	return protocol.Errorf(protocol.CodeForbidden, "only the operator (root) can do this")
}

// visible reports whether the caller may see mailbox m at all.
func (c *call) visible(m *registry.Mailbox) bool { return c.caller.Root() || m.UID == c.caller.UID }

// notFoundMailbox is the answer for a mailbox the caller may not see,
// whether it exists or not (notFound's wording).
func notFoundMailbox(name string) error {
	return notFound(protocol.MissingMailbox, []string{name}, "among yours")
}

// VerbAccess is the access verb needs, and whether the daemon has the verb:
// what the authorization tests and docs check against.
func VerbAccess(verb string) (Access, bool) {
	r, ok := verbTable[verb]
	return r.access, ok
}

// Verbs lists every verb of the control socket, sorted.
func Verbs() []string { return slices.Sorted(maps.Keys(verbTable)) }
