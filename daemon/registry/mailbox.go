package registry

import "github.com/mailctl/mailctl/protocol"

// Where a mailbox is declared.
const (
	SourceConfig   = "config"   // config.toml: only root changes or deletes it
	SourceRegistry = "registry" // created over the socket; its owner may manage it
)

// Mailbox is a mailbox as the daemon knows it, from either source.
type Mailbox struct {
	// ID is the mailbox's identity, never reused by another mailbox of the
	// same name: hooks, their runs and events are bound to it.
	ID       string
	Name     string
	UID, GID uint32
	Source   string // SourceConfig or SourceRegistry
	Aliases  []string
}

// Mailbox is the registered mailbox r as the daemon knows it.
func (r *Record) Mailbox() *Mailbox {
	return &Mailbox{ID: r.ID, Name: r.Name, UID: r.OwnerUID, GID: r.OwnerGID, Source: SourceRegistry}
}

// Hooks are the hooks of all that are bound to m: to this very mailbox, not
// to an earlier one of its name.
func (m *Mailbox) Hooks(all []protocol.Hook) []protocol.Hook {
	out := []protocol.Hook{}
	for _, h := range all {
		if h.MailboxID == m.ID && h.Mailbox == m.Name {
			out = append(out, h)
		}
	}
	return out
}
