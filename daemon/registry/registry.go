// Package registry keeps the mailboxes and hooks created over the control
// socket, one JSON file each under the root-owned registry directory, and
// the identities that bind what the daemon keeps about a mailbox or hook to
// it rather than to its name.
package registry

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// Registry holds the mailboxes and hooks created over the socket, one JSON file
// each under the registry directory, written atomically. config.toml is never
// rewritten by the daemon; operator declarations live there.
type Registry struct {
	dir       string
	mu        sync.RWMutex
	mailboxes map[string]*Record
	hooks     map[string]*protocol.Hook // by hook id
	hookFiles map[string]string         // hook id -> the file's name without .json
}

// Record is a mailbox created over the socket, as its registry file holds it.
type Record struct {
	// ID is minted when the mailbox is created and never reused: what is
	// kept about the mailbox is bound to it, not to the name.
	ID        string    `json:"id,omitempty"`
	Name      string    `json:"name"`
	OwnerUID  uint32    `json:"owner_uid"`
	OwnerGID  uint32    `json:"owner_gid"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy uint32    `json:"created_by"`
	// What the owner set with mailbox.update. DisplayName is the name
	// outgoing From carries; TrustedSenders, when not nil, replaces the
	// global [trust] list (empty: trust no one).
	DisplayName    string    `json:"display_name,omitempty"`
	TrustedSenders *[]string `json:"trusted_senders,omitempty"`
	// What root set with mailbox.update: the mailbox's own quota, in
	// place of [storage]'s default (0: none). Nil: the default.
	QuotaBytes    *int64 `json:"quota_bytes,omitempty"`
	QuotaMessages *int64 `json:"quota_messages,omitempty"`
}

// MaxEntry bounds a registry file: a hook's command line (hooks.MaxArgs
// elements of hooks.MaxArgBytes) written as JSON is at most about 1.5 MiB,
// a mailbox's record a few KiB. A larger file is an error naming it.
const MaxEntry = 4 << 20

// Open loads the registry at dir, creating it (0700) if needed.
// Unreadable entries are reported and skipped so one bad file never hides the rest.
func Open(dir string) (*Registry, []error, error) {
	r := &Registry{dir: dir, mailboxes: map[string]*Record{}, hooks: map[string]*protocol.Hook{}, hookFiles: map[string]string{}}
	var problems []error
	for _, sub := range []string{"mailboxes", "hooks"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, nil, fmt.Errorf("creating registry: %w", err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, nil, err
	}
	load := func(sub string, each func(name string, data []byte) error) {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			problems = append(problems, err)
			return
		}
		for _, e := range entries {
			n := e.Name()
			if safeio.IsTemp(n) { // a crash's leftover: the registry is loaded before it is written
				os.Remove(filepath.Join(dir, sub, n))
				continue
			}
			if !strings.HasSuffix(n, ".json") || !e.Type().IsRegular() {
				continue
			}
			data, err := readEntry(filepath.Join(dir, sub, n))
			if err == nil {
				err = each(strings.TrimSuffix(n, ".json"), data)
			}
			if err != nil {
				problems = append(problems, fmt.Errorf("registry %s/%s: %w", sub, n, err))
			}
		}
	}
	load("mailboxes", func(name string, data []byte) error {
		var m Record
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		if m.Name != name {
			return errors.New("file name and mailbox name differ")
		}
		if m.ID == "" {
			m.ID = legacyMailboxID(&m)
		}
		r.mailboxes[name] = &m
		return nil
	})
	load("hooks", func(name string, data []byte) error {
		var h protocol.Hook
		if err := json.Unmarshal(data, &h); err != nil {
			return err
		}
		switch {
		case h.ID == "" && h.Name == name:
			// Written before hooks had ids: one derived from what
			// identified it then.
			h.ID = legacyHookID(&h)
		case h.ID != name:
			return errors.New("file name and hook id differ")
		}
		if _, dup := r.hooks[h.ID]; dup {
			return errors.New("a hook with the same id is loaded already")
		}
		h.Source = SourceRegistry
		r.hooks[h.ID] = &h
		r.hookFiles[h.ID] = name
		return nil
	})
	return r, problems, nil
}

// readEntry reads a registry file that was listed as a regular file: it is
// read by name after, so a link or a FIFO put in its place meanwhile is
// refused, never followed nor waited on.
func readEntry(path string) ([]byte, error) { return safeio.ReadRegular(path, MaxEntry) }

func (r *Registry) write(sub, name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return safeio.WriteFile(filepath.Join(r.dir, sub, name+".json"), append(data, '\n'))
}

func (r *Registry) remove(sub, name string) error {
	return safeio.Remove(filepath.Join(r.dir, sub, name+".json"))
}

// Mailbox returns a registered mailbox.
func (r *Registry) Mailbox(name string) (*Record, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.mailboxes[name]
	return m, ok
}

// Mailboxes lists registered mailboxes by name.
func (r *Registry) Mailboxes() []*Record {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.SortedFunc(maps.Values(r.mailboxes), func(a, b *Record) int { return strings.Compare(a.Name, b.Name) })
}

// AddMailbox records a mailbox durably, minting its id when it has none.
func (r *Registry) AddMailbox(m *Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.ID == "" {
		m.ID = NewID("m")
	}
	if err := r.write("mailboxes", m.Name, m); err != nil {
		return err
	}
	r.mailboxes[m.Name] = m
	return nil
}

// UpdateMailbox changes the registered mailbox with that id durably: change
// edits a copy, which replaces the entry once written, so readers holding
// the old entry never see it change under them.
func (r *Registry) UpdateMailbox(name, id string, change func(*Record)) (*Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.mailboxes[name]
	if !ok || old.ID != id {
		return nil, ErrNoSuchMailbox
	}
	m := *old
	change(&m)
	if err := r.write("mailboxes", m.Name, &m); err != nil {
		return nil, err
	}
	r.mailboxes[name] = &m
	return &m, nil
}

// ErrNoSuchMailbox answers UpdateMailbox for a name that no longer has the
// mailbox of that id.
var ErrNoSuchMailbox = errors.New("registry: no such mailbox")

// RemoveMailbox forgets a mailbox and the hooks bound to it.
func (r *Registry) RemoveMailbox(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mailboxes[name]
	for id, h := range r.hooks {
		if (m != nil && h.MailboxID == m.ID) || (h.MailboxID == "" && h.Mailbox == name) {
			if err := r.removeHook(id); err != nil {
				return err
			}
		}
	}
	if err := r.remove("mailboxes", name); err != nil {
		return err
	}
	delete(r.mailboxes, name)
	return nil
}

// Hooks lists registered hooks, by id.
func (r *Registry) Hooks() []protocol.Hook {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]protocol.Hook, 0, len(r.hooks))
	for _, h := range r.hooks {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// AddHook records a hook durably. h.ID must be fresh; a name already taken
// on the same mailbox is a conflict. Names are scoped to their mailbox.
func (r *Registry) AddHook(h protocol.Hook) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.ID == "" || h.MailboxID == "" {
		return errors.New("registry: a hook needs an id and its mailbox's id")
	}
	if _, taken := r.hooks[h.ID]; taken {
		return fmt.Errorf("registry: hook id %s is taken", h.ID)
	}
	for _, ex := range r.hooks {
		if ex.Name == h.Name && (ex.MailboxID == h.MailboxID || (ex.MailboxID == "" && ex.Mailbox == h.Mailbox)) {
			return protocol.Errorf(protocol.CodeConflict, "mailbox %q already has a hook named %q: pick another name or delete it first", h.Mailbox, h.Name)
		}
	}
	h.Source = SourceRegistry
	h.LastRun = nil
	if err := r.write("hooks", h.ID, h); err != nil {
		return err
	}
	r.hooks[h.ID] = &h
	r.hookFiles[h.ID] = h.ID
	return nil
}

// RemoveHook deletes a registered hook by id.
func (r *Registry) RemoveHook(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.hookFiles[id]; !ok {
		return nil
	}
	return r.removeHook(id)
}

// removeHook, called with r.mu held, deletes the hook's file and forgets it.
func (r *Registry) removeHook(id string) error {
	if err := r.remove("hooks", r.hookFiles[id]); err != nil {
		return err
	}
	delete(r.hooks, id)
	delete(r.hookFiles, id)
	return nil
}

// NewID mints an identity that is never reused: prefix and 16 random hex
// digits.
func NewID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// MintedMailboxID reports whether id is the identity of a mailbox of the
// registry (minted by AddMailbox, or derived for one that predates minted
// ids), not of one declared in config.toml (ConfigMailboxID).
func MintedMailboxID(id string) bool { return strings.HasPrefix(id, "m") }

// DerivedID is a stable identity for what predates minted ids, or is
// declared in the config: prefix and 16 hex digits of a hash of the parts.
func DerivedID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s,", len(p), p)
	}
	return prefix + hex.EncodeToString(h.Sum(nil)[:8])
}

func legacyMailboxID(m *Record) string {
	return DerivedID("m", "registry", m.Name, strconv.FormatUint(uint64(m.OwnerUID), 10), m.CreatedAt.UTC().Format(time.RFC3339Nano))
}

func legacyHookID(h *protocol.Hook) string {
	return DerivedID("h", "registry", h.Mailbox, h.Name, h.CreatedAt.UTC().Format(time.RFC3339Nano))
}

// ConfigMailboxID is the identity of an operator-declared mailbox: its name
// and owner, so the same declaration keeps it and another owner does not.
func ConfigMailboxID(name string, uid uint32) string {
	return DerivedID("c", "config", name, strconv.FormatUint(uint64(uid), 10))
}
