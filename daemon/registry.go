package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Registry holds the mailboxes and hooks created over the socket, one JSON file
// each under the registry directory, written atomically. config.toml is never
// rewritten by the daemon; operator declarations live there.
type Registry struct {
	dir       string
	mu        sync.RWMutex
	mailboxes map[string]*registeredMailbox
	hooks     map[string]*protocol.Hook
}

type registeredMailbox struct {
	Name      string    `json:"name"`
	OwnerUID  uint32    `json:"owner_uid"`
	OwnerGID  uint32    `json:"owner_gid"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy uint32    `json:"created_by"`
}

// OpenRegistry loads the registry at dir, creating it (0700) if needed.
// Unreadable entries are reported and skipped so one bad file never hides the rest.
func OpenRegistry(dir string) (*Registry, []error, error) {
	r := &Registry{dir: dir, mailboxes: map[string]*registeredMailbox{}, hooks: map[string]*protocol.Hook{}}
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
			if strings.HasPrefix(n, ".tmp-") {
				os.Remove(filepath.Join(dir, sub, n))
				continue
			}
			if !strings.HasSuffix(n, ".json") || !e.Type().IsRegular() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, sub, n))
			if err == nil {
				err = each(strings.TrimSuffix(n, ".json"), data)
			}
			if err != nil {
				problems = append(problems, fmt.Errorf("registry %s/%s: %w", sub, n, err))
			}
		}
	}
	load("mailboxes", func(name string, data []byte) error {
		var m registeredMailbox
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		if m.Name != name {
			return errors.New("file name and mailbox name differ")
		}
		r.mailboxes[name] = &m
		return nil
	})
	load("hooks", func(name string, data []byte) error {
		var h protocol.Hook
		if err := json.Unmarshal(data, &h); err != nil {
			return err
		}
		if h.Name != name {
			return errors.New("file name and hook name differ")
		}
		h.Source = "registry"
		r.hooks[name] = &h
		return nil
	})
	return r, problems, nil
}

func (r *Registry) write(sub, name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return store.WriteFileAtomic(filepath.Join(r.dir, sub, name+".json"), append(data, '\n'), 0o600)
}

func (r *Registry) remove(sub, name string) error {
	err := os.Remove(filepath.Join(r.dir, sub, name+".json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if d, err := os.Open(filepath.Join(r.dir, sub)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Mailbox returns a registered mailbox.
func (r *Registry) Mailbox(name string) (*registeredMailbox, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.mailboxes[name]
	return m, ok
}

// Mailboxes lists registered mailboxes by name.
func (r *Registry) Mailboxes() []*registeredMailbox {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*registeredMailbox, 0, len(r.mailboxes))
	for _, m := range r.mailboxes {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// AddMailbox records a mailbox durably.
func (r *Registry) AddMailbox(m *registeredMailbox) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.write("mailboxes", m.Name, m); err != nil {
		return err
	}
	r.mailboxes[m.Name] = m
	return nil
}

// RemoveMailbox forgets a mailbox and its hooks.
func (r *Registry) RemoveMailbox(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for hn, h := range r.hooks {
		if h.Mailbox == name {
			if err := r.remove("hooks", hn); err != nil {
				return err
			}
			delete(r.hooks, hn)
		}
	}
	if err := r.remove("mailboxes", name); err != nil {
		return err
	}
	delete(r.mailboxes, name)
	return nil
}

// Hooks lists registered hooks.
func (r *Registry) Hooks() []protocol.Hook {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]protocol.Hook, 0, len(r.hooks))
	for _, h := range r.hooks {
		out = append(out, *h)
	}
	return out
}

// AddHook records a hook durably; a name already taken is a conflict.
func (r *Registry) AddHook(h protocol.Hook) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, taken := r.hooks[h.Name]; taken {
		return protocol.Errorf(protocol.CodeConflict, "a hook named %q already exists: pick another name or delete it first", h.Name)
	}
	h.Source = "registry"
	if err := r.write("hooks", h.Name, h); err != nil {
		return err
	}
	r.hooks[h.Name] = &h
	return nil
}

// RemoveHook deletes a registered hook.
func (r *Registry) RemoveHook(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.remove("hooks", name); err != nil {
		return err
	}
	delete(r.hooks, name)
	return nil
}
