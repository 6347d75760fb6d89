package control

import (
	"context"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
)

// hub fans events out to watch streams. A subscriber that does not keep up
// loses events rather than slowing delivery.
type hub struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

type subscriber struct {
	caller    Caller
	mailboxes map[string]string // name -> identity; nil: every mailbox the caller may see
	ch        chan protocol.Event
	// gone is closed when every mailbox the watch names is deleted
	// (ended says it is, under the hub's lock): the watch then ends.
	gone  chan struct{}
	ended bool
}

func newHub() *hub { return &hub{subs: map[*subscriber]struct{}{}} }

// publish sends ev about mailbox m to every subscriber allowed to see it.
// A subscriber that named its mailboxes gets events of those very mailboxes
// only, not of one created later under the same name.
func (h *hub) publish(ev protocol.Event, m *registry.Mailbox) {
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.hears(m) {
			s.offer(ev)
		}
	}
}

// hears reports whether s is told of mailbox m: its caller may see m, and
// it watches every mailbox of its caller or names that very mailbox.
func (s *subscriber) hears(m *registry.Mailbox) bool {
	return (s.caller.Root() || s.caller.UID == m.UID) && (s.mailboxes == nil || s.mailboxes[m.Name] == m.ID)
}

// offer queues ev for s, or drops it when s does not keep up.
func (s *subscriber) offer(ev protocol.Event) {
	select {
	case s.ch <- ev:
	default:
	}
}

// deleted tells every subscriber allowed to see m that it was deleted. A
// watch that named it hears nothing more of that name (a mailbox made
// later under it is another one), and ends when it named no other mailbox
// still there; a watch of every mailbox of its caller goes on.
func (h *hub) deleted(m *registry.Mailbox, at time.Time) {
	ev := protocol.Event{Type: protocol.EventMailboxDeleted, Mailbox: m.Name, At: at.UTC()}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if !s.hears(m) {
			continue
		}
		s.offer(ev)
		if s.mailboxes == nil {
			continue
		}
		delete(s.mailboxes, m.Name)
		if len(s.mailboxes) == 0 && !s.ended {
			s.ended = true
			close(s.gone)
		}
	}
}

// MailboxGone tells the watches of m that it is gone, as a delete does: the
// daemon's reload calls it for a declared mailbox it stops serving (taken
// out of config.toml, or given another owner).
func (s *Server) MailboxGone(m *registry.Mailbox) { s.events.deleted(m, s.now()) }

func (h *hub) add(s *subscriber)    { h.mu.Lock(); h.subs[s] = struct{}{}; h.mu.Unlock() }
func (h *hub) remove(s *subscriber) { h.mu.Lock(); delete(h.subs, s); h.mu.Unlock() }

// Emit publishes an event about the mailbox with identity id (empty: the
// mailbox of that name now). An event about a mailbox since deleted is
// dropped, whoever holds its name now.
func (s *Server) Emit(ev protocol.Event, id string) {
	m, ok := s.b.Mailbox(ev.Mailbox)
	if !ok || (id != "" && m.ID != id) {
		return
	}
	s.events.publish(ev, m)
}

// handleWatch acknowledges the watch, then streams events on the request's id
// until the connection ends or the daemon stops.
func handleWatch(ctx context.Context, s *Server, c *call, a *protocol.WatchArgs) (any, error) {
	sub := &subscriber{caller: c.caller, ch: make(chan protocol.Event, 256), gone: make(chan struct{})}
	if len(c.boxes) > 0 {
		sub.mailboxes = map[string]string{}
		for _, m := range c.boxes {
			sub.mailboxes[m.Name] = m.ID
		}
	}
	s.events.add(sub)
	defer s.events.remove(sub)
	if err := c.w.send(protocol.Response{ID: c.id, Data: []byte(`{"watching":true}`)}); err != nil {
		return nil, nil
	}
	for {
		select {
		case ev := <-sub.ch:
			if err := c.w.send(protocol.Response{ID: c.id, Event: &ev}); err != nil {
				return nil, nil
			}
		case <-sub.gone:
			// What came before, the deletion last; then the watch ends.
			for {
				select {
				case ev := <-sub.ch:
					if err := c.w.send(protocol.Response{ID: c.id, Event: &ev}); err != nil {
						return nil, nil
					}
				default:
					return nil, protocol.Errorf(protocol.CodeNotFound, "every mailbox this watch named was deleted")
				}
			}
		case <-ctx.Done():
			return nil, nil
		case <-s.closing:
			return nil, errClosing
		}
	}
}

// Watchers is the number of watch streams open now; tests of clients wait
// for it before causing the event they expect a stream to carry.
func (s *Server) Watchers() int {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	return len(s.events.subs)
}
