package daemon

import (
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// access is what a request wants to do with a mailbox.
type access int

const (
	accRead   access = iota // list, read, watch
	accWrite                // mark, move, send, hooks
	accManage               // delete the mailbox itself
)

// authorize is the one authorization decision of the control socket. Root may
// do anything. Any other uid may act only on mailboxes it owns; a mailbox it
// does not own answers exactly like one that does not exist, so names of other
// users' mailboxes are never revealed. Operator-declared mailboxes (and the
// catch-all) cannot be deleted by non-root callers.
func (d *Daemon) authorize(c *call, name string, acc access) (*mailboxInfo, error) {
	c.mailbox = name
	if err := store.ValidMailboxName(name); err != nil {
		c.decision = "deny"
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "mailbox name %q: %v", name, err)
	}
	m, ok := d.lookupMailbox(name)
	if !ok || (!c.caller.Root() && m.UID != c.caller.UID) {
		c.decision = "deny"
		return nil, notFoundMailbox(name)
	}
	if acc == accManage && !c.caller.Root() {
		if m.Source == "config" {
			c.decision = "deny"
			return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is declared by the operator in config.toml; only root can change it", name)
		}
		if name == d.cfg().CatchAll {
			c.decision = "deny"
			return nil, protocol.Errorf(protocol.CodeForbidden, "mailbox %q is the catch-all; only root can change it", name)
		}
	}
	c.decision = "allow"
	return m, nil
}

// visible reports whether the caller may see mailbox m at all.
func (c *call) visible(m *mailboxInfo) bool { return c.caller.Root() || m.UID == c.caller.UID }

func notFoundMailbox(name string) error {
	return protocol.Errorf(protocol.CodeNotFound, "no mailbox %q among yours: `mailctl mailboxes list` shows the ones you own", name)
}
