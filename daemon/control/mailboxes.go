package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// reservedNames cannot be created over the socket.
var reservedNames = map[string]bool{"catchall": true}

func (s *Server) describe(m *registry.Mailbox) protocol.Mailbox {
	cfg := s.cfg()
	mb := protocol.Mailbox{
		Name:     m.Name,
		Address:  s.address(m.Name),
		Owner:    registry.UserName(m.UID),
		OwnerUID: m.UID,
		Source:   m.Source,
		Path:     s.store.Path(m.Name),
		CatchAll: cfg.CatchAll == m.Name,
	}
	mb.InboxPath = mb.Path + "/" + protocol.FolderInbox
	mb.SentPath = mb.Path + "/" + protocol.FolderSent
	mb.DisplayName = s.b.DisplayName(m.Name)
	senders, source := s.b.TrustedSenders(m.Name)
	if senders == nil {
		senders = []string{}
	}
	mb.Trust = &protocol.TrustPolicy{TrustedSenders: senders, Source: source}
	pol := cfg.EffectiveSend(m.Name)
	mb.Send = sendLimits(pol)
	if o := s.b.Outbound(); o != nil {
		mb.Send.Rate = o.RateUsage(m.Name, m.UID, pol)
	}
	u := s.b.Usage(m.Name)
	mb.Usage = &u
	if n, err := s.store.Counts(m.Name); err == nil {
		mb.Total, mb.Unread, mb.SentCount = n.Total, n.Unread, n.Sent
	} else {
		s.log.Warn("counting mailbox", "mailbox", m.Name, "err", err)
	}
	return mb
}

func handleMailboxList(_ context.Context, s *Server, c *call, _ *protocol.Empty) (any, error) {
	out := protocol.MailboxList{Mailboxes: []protocol.Mailbox{}}
	for _, m := range s.b.Mailboxes() {
		if c.visible(m) {
			out.Mailboxes = append(out.Mailboxes, s.describe(m))
		}
	}
	return out, nil
}

func handleMailboxShow(_ context.Context, s *Server, c *call, _ *protocol.NameArgs) (any, error) {
	m := c.box()
	mb := s.describe(m)
	mb.Hooks = s.hooksOf(m)
	return mb, nil
}

// sendLimits is the part of a send policy a mailbox's owner sees.
func sendLimits(p config.SendPolicy) *protocol.SendLimits {
	on := func(b *bool, def bool) bool {
		if b == nil {
			return def
		}
		return *b
	}
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return &protocol.SendLimits{Enabled: on(p.Enabled, true), DryRunOnly: on(p.DryRunOnly, false), Hold: on(p.Hold, false),
		AllowDomains: nonNil(p.AllowDomains), AllowAddresses: nonNil(p.AllowAddresses), MaxRecipients: p.MaxRecipients,
		MaxMessageBytes: p.MaxMessageBytes, MaxAttachmentBytes: p.MaxAttachmentBytes, MaxAttachments: p.MaxAttachments,
		PerMinute: p.PerMinute, PerHour: p.PerHour, PerDay: p.PerDay, Rate: []protocol.SendRate{}}
}

// mailboxCreateTarget names no existing mailbox: a new one is the caller's.
// Making one for another owner, for root, or without a passwd entry takes root.
func mailboxCreateTarget(s *Server, c *call, a *protocol.MailboxCreateArgs) (target, error) {
	if err := store.ValidMailboxName(a.Name); err != nil {
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
	}
	if strings.HasPrefix(a.Name, "-") {
		// An address that starts with a dash is an option to every
		// program that takes addresses as arguments (sendmail, a hook's
		// script); the SMTP server refuses such envelope addresses too.
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "mailbox name %q starts with '-', which programs that take addresses as arguments read as an option; pick another", a.Name)
	}
	if reservedNames[a.Name] || a.Name == s.cfg().CatchAll {
		return target{}, protocol.Errorf(protocol.CodeInvalidInput, "mailbox name %q is reserved; pick another", a.Name)
	}
	t := target{creates: a.Name}
	uid, _, err := newMailboxOwner(c, a)
	switch {
	case err != nil:
		return t, err
	case daemonUID() != 0 && uid != daemonUID():
		// Not "only root can": root cannot either, on a daemon that is
		// not root (mailctl dev).
		return t, devOwnerRefusal(uid, a.Name)
	case a.Owner != "" && uid != c.caller.UID:
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden, "only root can create a mailbox for another user; leave out the owner to create one for yourself")
	case uid == 0:
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden, "only root can create a mailbox owned by root")
	case config.IsRoleAddress(a.Name):
		t.rootOnly = protocol.Errorf(protocol.CodeForbidden,
			"%q is a role address (RFC 2142, CA/Browser Forum BR 3.2.2.4.4) that receives reports, complaints and certificate approvals for the whole domain; only the operator (root) can create it: pick another name", a.Name)
	}
	return t, nil
}

// devOwnerRefusal refuses a mailbox for uid on a daemon that is not root
// (mailctl dev), which cannot give a folder to another user.
func devOwnerRefusal(uid uint32, name string) error {
	self := daemonUID()
	return protocol.Errorf(protocol.CodeForbidden,
		"this daemon runs as %s (uid %d), not as root (a mailctl dev instance), so its mailboxes can only belong to that user, not to %s: create %q as that user, naming no other owner",
		registry.UserName(self), self, registry.UserName(uid), name)
}

// daemonUID is the daemon's own uid (a variable so that a test can make a
// root daemon stand for an unprivileged one).
var daemonUID = func() uint32 { return uint32(os.Geteuid()) }

// newMailboxOwner resolves who will own a new mailbox: the named owner, or
// the caller, who must then be a real user (hooks run as the owner and files
// belong to it).
func newMailboxOwner(c *call, a *protocol.MailboxCreateArgs) (uint32, uint32, error) {
	if a.Owner != "" {
		uid, gid, err := registry.ResolveUser(a.Owner)
		if err != nil {
			return 0, 0, protocol.Errorf(protocol.CodeInvalidInput, "owner %q: no such user on this host", a.Owner)
		}
		return uid, gid, nil
	}
	uid, gid, err := registry.ResolveUser(registry.UserName(c.caller.UID))
	if err != nil {
		return 0, 0, protocol.Errorf(protocol.CodeForbidden, "your uid %d has no passwd entry; mailboxes belong to real users", c.caller.UID)
	}
	return uid, gid, nil
}

func handleMailboxCreate(_ context.Context, s *Server, c *call, a *protocol.MailboxCreateArgs) (any, error) {
	uid, gid, err := newMailboxOwner(c, a)
	if err != nil {
		return nil, err
	}
	// A daemon that is not root (mailctl dev) cannot give a folder to
	// another user: say so before anything is made, rather than leave a
	// folder behind and answer with the failed chown.
	if self := daemonUID(); self != 0 && uid != self {
		return nil, devOwnerRefusal(uid, a.Name)
	}
	// A name another owner holds is refused before the name is held
	// alone: waiting to hold it would hold up every request on that
	// owner's mailbox, and every delivery into it, behind the wait.
	if err := s.nameTaken(a.Name, uid); err != nil {
		return nil, err
	}
	// A request of the name's earlier owner, checked before that mailbox
	// was deleted, ends before the new mailbox is made.
	defer s.names.exclusive(a.Name)()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.b.Mailbox(a.Name); ok {
		if m.UID == uid {
			// Creating it again repairs it: folders removed by hand come
			// back, with the owner's ownership and mode (doctor's fix for
			// mailbox.folder_missing).
			if _, err := s.store.Create(a.Name, int(uid), int(gid)); err != nil {
				if errors.Is(err, store.ErrOwnerMismatch) {
					return nil, protocol.Errorf(protocol.CodeConflict, "the folder of %q has another owner than the mailbox; `mailctl doctor` shows it", a.Name)
				}
				return nil, err
			}
			return protocol.MailboxCreated{Mailbox: s.describe(m), Created: false}, nil
		}
	}
	if err := s.nameTaken(a.Name, uid); err != nil {
		return nil, err
	}
	if max := s.cfg().MailboxRules.MaxPerOwner; !c.caller.Root() {
		if n := s.ownedMailboxes(uid); n >= max {
			return nil, protocol.Errorf(protocol.CodePolicyBlocked,
				"you own %d mailboxes, the most a user may create on this host (mailbox_rules.max_per_owner = %d); delete one you no longer use, or ask root", n, max)
		}
	}
	created, err := s.store.Create(a.Name, int(uid), int(gid))
	if err != nil {
		if errors.Is(err, store.ErrOwnerMismatch) {
			return nil, protocol.Errorf(protocol.CodeConflict, "a folder for %q already exists with another owner; pick another name, or ask the operator to remove or adopt it (`mailctl doctor` shows it)", a.Name)
		}
		return nil, err
	}
	rec := &registry.Record{ID: registry.NewID("m"), Name: a.Name, OwnerUID: uid, OwnerGID: gid, CreatedAt: time.Now().UTC(), CreatedBy: c.caller.UID}
	if err := s.reg.AddMailbox(rec); err != nil {
		if created {
			s.store.Delete(a.Name, true)
		}
		return nil, err
	}
	m, _ := s.b.Mailbox(a.Name)
	s.log.Info("mailbox created", "mailbox", a.Name, "owner_uid", uid, "by_uid", c.caller.UID)
	return protocol.MailboxCreated{Mailbox: s.describe(m), Created: true}, nil
}

// nameTaken refuses a create of name for uid when the name is another
// owner's mailbox, or an alias of a declared mailbox: mail to the address
// goes to the mailbox the alias belongs to, so a mailbox of this name would
// never get it, and replies to its mail would reach that mailbox's owner.
func (s *Server) nameTaken(name string, uid uint32) error {
	if m, ok := s.b.Mailbox(name); (ok && m.UID != uid) || s.isDeclaredAlias(name) {
		return protocol.Errorf(protocol.CodeConflict, "the name %q is taken; pick another", name)
	}
	return nil
}

// ownedMailboxes counts the mailboxes uid owns in the registry (the
// config's are the operator's choice, not counted).
func (s *Server) ownedMailboxes(uid uint32) int {
	n := 0
	for _, m := range s.b.Mailboxes() {
		if m.Source == registry.SourceRegistry && m.UID == uid {
			n++
		}
	}
	return n
}

func handleMailboxDelete(_ context.Context, s *Server, c *call, a *protocol.MailboxDeleteArgs) (any, error) {
	if m := c.box(); m.Source == registry.SourceConfig {
		return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is declared in config.toml; remove it there and reload", a.Name)
	}
	detached, err := s.detachMailbox(c, a)
	if err != nil {
		return nil, err
	}
	// Removing the files is not under s.mu: a mailbox its owner filled
	// with many files would hold every other user's mailbox and hook
	// changes until the last one is gone.
	if detached != nil {
		if err := removeDetached(detached); err != nil {
			// The mailbox is gone; what is left of its files carries the
			// store's temporary prefix and the next start-up sweeps it.
			s.log.Error("mailbox deleted, its files not all removed yet", "mailbox", a.Name, "err", err)
		}
	}
	s.log.Info("mailbox deleted", "mailbox", a.Name, "by_uid", c.caller.UID, "force", a.Force)
	return protocol.Deleted{Name: a.Name, Deleted: true}, nil
}

// detachMailbox takes the mailbox a delete names out of the store and the
// registry, and drops its queued mail. The store's detach is the commit
// point: until the registry has forgotten the mailbox too it can be put
// back exactly as it was, and after both, removing its files (the
// Detached it returns, nil when there were none) cannot undo the delete.
func (s *Server) detachMailbox(c *call, a *protocol.MailboxDeleteArgs) (*store.Detached, error) {
	defer s.names.exclusive(a.Name)()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.b.Mailbox(a.Name); !ok || m.ID != c.box().ID {
		return nil, notFoundMailbox(a.Name) // deleted, and perhaps created again, since the access check
	}
	detached, err := s.store.Detach(a.Name, a.Force)
	if err != nil {
		if errors.Is(err, store.ErrNotEmpty) {
			n, _ := s.store.Counts(a.Name)
			return nil, protocol.Errorf(protocol.CodeConflict, "mailbox %q is not empty (%d in inbox, %d sent); force the delete to delete its mail too", a.Name, n.Total, n.Sent)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	if err := s.reg.RemoveMailbox(a.Name); err != nil {
		if detached != nil {
			if rerr := detached.Restore(); rerr != nil {
				s.log.Error("mailbox delete: restoring the folder failed", "mailbox", a.Name, "err", rerr)
			}
		}
		return nil, err
	}
	s.dropQueued(c.box().ID)
	s.events.deleted(c.box(), s.now())
	return detached, nil
}

// removeDetached deletes the files of a deleted mailbox (a variable so
// that a test can hold the removal while it makes other requests).
var removeDetached = (*store.Detached).Remove

// isDeclaredAlias reports whether an operator-declared mailbox has name as
// an alias, bare or at one of our domains: routing gives such an address to
// that mailbox before any mailbox of the name.
func (s *Server) isDeclaredAlias(name string) bool {
	cfg := s.cfg()
	for _, m := range cfg.Mailboxes {
		for _, a := range m.Aliases {
			if local, ours := cfg.AliasLocal(a); ours && local == name {
				return true
			}
		}
	}
	return false
}

// EnsureMailbox creates a registry mailbox for uid if it does not exist yet
// (`mailctl dev` makes the current user's mailbox with it).
func (s *Server) EnsureMailbox(name string, uid, gid uint32) error {
	defer s.names.exclusive(name)()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.b.Mailbox(name); ok {
		if m.UID != uid {
			return fmt.Errorf("mailbox %q exists with another owner (uid %d)", name, m.UID)
		}
		_, err := s.store.Create(name, int(uid), int(gid))
		return err
	}
	if err := store.ValidMailboxName(name); err != nil {
		return err
	}
	if _, err := s.store.Create(name, int(uid), int(gid)); err != nil {
		return err
	}
	return s.reg.AddMailbox(&registry.Record{Name: name, OwnerUID: uid, OwnerGID: gid, CreatedAt: time.Now().UTC(), CreatedBy: uid})
}

// handleMailboxPrune applies the operator's retention now (root only: it is
// the operator's policy, run on the operator's say).
func handleMailboxPrune(_ context.Context, s *Server, c *call, a *protocol.MailboxPruneArgs) (any, error) {
	res, err := s.b.Prune(a.Mailbox, a.DryRun)
	if err != nil && len(res.Rows) == 0 {
		return nil, protocol.Errorf(protocol.CodeInternal, "retention stopped: %v", err)
	}
	s.log.Info("retention run", "by_uid", c.caller.UID, "mailbox", a.Mailbox, "dry_run", a.DryRun, "moved", res.Moved, "purged", res.Purged)
	return res, nil
}
