package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// reservedNames cannot be created over the socket.
var reservedNames = map[string]bool{"catchall": true}

func init() {
	handle(protocol.VerbMailboxList, handleMailboxList)
	handle(protocol.VerbMailboxShow, handleMailboxShow)
	handle(protocol.VerbMailboxCreate, handleMailboxCreate)
	handle(protocol.VerbMailboxDelete, handleMailboxDelete)
}

func (d *Daemon) describe(m *mailboxInfo) protocol.Mailbox {
	cfg := d.cfg()
	mb := protocol.Mailbox{
		Name:     m.Name,
		Address:  m.Name + "@" + cfg.PrimaryDomain(),
		Owner:    userName(m.UID),
		OwnerUID: m.UID,
		Source:   m.Source,
		Path:     d.store.Path(m.Name),
		CatchAll: cfg.CatchAll == m.Name,
	}
	mb.InboxPath = mb.Path + "/" + protocol.FolderInbox
	mb.SentPath = mb.Path + "/" + protocol.FolderSent
	if n, err := d.store.Counts(m.Name); err == nil {
		mb.Total, mb.Unread, mb.SentCount = n.Total, n.Unread, n.Sent
	} else {
		d.log.Warn("counting mailbox", "mailbox", m.Name, "err", err)
	}
	return mb
}

func handleMailboxList(_ context.Context, d *Daemon, c *call) (any, error) {
	if err := c.decode(&protocol.Empty{}); err != nil {
		return nil, err
	}
	out := protocol.MailboxList{Mailboxes: []protocol.Mailbox{}}
	for _, m := range d.allMailboxes() {
		if c.visible(m) {
			out.Mailboxes = append(out.Mailboxes, d.describe(m))
		}
	}
	return out, nil
}

func handleMailboxShow(_ context.Context, d *Daemon, c *call) (any, error) {
	var a protocol.NameArgs
	if err := c.decode(&a); err != nil {
		return nil, err
	}
	m, err := d.authorize(c, a.Name, accRead)
	if err != nil {
		return nil, err
	}
	mb := d.describe(m)
	senders, source := d.cfg().TrustedSenders(m.Name)
	if senders == nil {
		senders = []string{}
	}
	mb.Trust = &protocol.TrustPolicy{TrustedSenders: senders, Source: source}
	mb.Hooks = d.hooksOf(m.Name)
	return mb, nil
}

func handleMailboxCreate(_ context.Context, d *Daemon, c *call) (any, error) {
	var a protocol.MailboxCreateArgs
	if err := c.decode(&a); err != nil {
		return nil, err
	}
	c.mailbox = a.Name
	if err := store.ValidMailboxName(a.Name); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "mailbox name %q: %v", a.Name, err)
	}
	if reservedNames[a.Name] || a.Name == d.cfg().CatchAll {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "mailbox name %q is reserved; pick another", a.Name)
	}
	uid, gid := c.caller.UID, c.caller.GID
	if a.Owner != "" {
		ouid, ogid, err := resolveUser(a.Owner)
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidInput, "owner %q: no such user on this host", a.Owner)
		}
		if !c.caller.Root() && ouid != c.caller.UID {
			c.decision = "deny"
			return nil, protocol.Errorf(protocol.CodeForbidden, "only root can create a mailbox for another user; leave out the owner to create one for yourself")
		}
		uid, gid = ouid, ogid
	} else {
		// The owner must be a real user: hooks run as it and files are owned by it.
		ruid, rgid, err := resolveUser(userName(c.caller.UID))
		if err != nil {
			c.decision = "deny"
			return nil, protocol.Errorf(protocol.CodeForbidden, "your uid %d has no passwd entry; mailboxes belong to real users", c.caller.UID)
		}
		uid, gid = ruid, rgid
	}
	if uid == 0 && !c.caller.Root() {
		return nil, protocol.Errorf(protocol.CodeForbidden, "only root can create a mailbox owned by root")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.lookupMailbox(a.Name); ok {
		if m.UID == uid {
			c.decision = "allow"
			return protocol.MailboxCreated{Mailbox: d.describe(m), Created: false}, nil
		}
		return nil, protocol.Errorf(protocol.CodeConflict, "the name %q is taken; pick another", a.Name)
	}
	created, err := d.store.Create(a.Name, int(uid), int(gid))
	if err != nil {
		if errors.Is(err, store.ErrOwnerMismatch) {
			return nil, protocol.Errorf(protocol.CodeConflict, "a folder for %q already exists with another owner; the operator should remove or adopt it (`mailctl doctor`)", a.Name)
		}
		return nil, err
	}
	rec := &registeredMailbox{Name: a.Name, OwnerUID: uid, OwnerGID: gid, CreatedAt: time.Now().UTC(), CreatedBy: c.caller.UID}
	if err := d.reg.AddMailbox(rec); err != nil {
		if created {
			d.store.Delete(a.Name, true)
		}
		return nil, err
	}
	c.decision = "allow"
	m, _ := d.lookupMailbox(a.Name)
	d.log.Info("mailbox created", "mailbox", a.Name, "owner_uid", uid, "by_uid", c.caller.UID)
	return protocol.MailboxCreated{Mailbox: d.describe(m), Created: true}, nil
}

func handleMailboxDelete(_ context.Context, d *Daemon, c *call) (any, error) {
	var a protocol.MailboxDeleteArgs
	if err := c.decode(&a); err != nil {
		return nil, err
	}
	m, err := d.authorize(c, a.Name, accManage)
	if err != nil {
		return nil, err
	}
	if m.Source == "config" {
		return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is declared in config.toml; remove it there and reload", a.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.store.Delete(a.Name, a.Force); err != nil {
		if errors.Is(err, store.ErrNotEmpty) {
			n, _ := d.store.Counts(a.Name)
			return nil, protocol.Errorf(protocol.CodeConflict, "mailbox %q is not empty (%d in inbox, %d sent); delete with force to remove its mail too", a.Name, n.Total, n.Sent)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	if err := d.reg.RemoveMailbox(a.Name); err != nil {
		return nil, err
	}
	d.log.Info("mailbox deleted", "mailbox", a.Name, "by_uid", c.caller.UID, "force", a.Force)
	return protocol.Deleted{Name: a.Name, Deleted: true}, nil
}
