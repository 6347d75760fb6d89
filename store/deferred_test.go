package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// deferOne reserves an id in agent/sent and hands a message to
// CreateDeferred with a delay the test never reaches.
func deferOne(t *testing.T, s *Store, i int) string {
	t.Helper()
	m := testMessage(i)
	id, release, err := s.Reserve("agent", "sent", m)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := s.CreateDeferred("agent", "sent", id, m, "deferred body", []byte("raw\r\n"), nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	return id
}

func onDisk(s *Store, mailbox, folder, id string) bool {
	_, err := os.Lstat(filepath.Join(s.Root(), mailbox, folder, id+".md"))
	return err == nil
}

// Every way of reading a folder through the store sees a deferred message
// as written.
func TestDeferredMessageIsSeenByEveryRead(t *testing.T) {
	reads := map[string]func(s *Store, id string) error{
		"Get": func(s *Store, id string) error { _, _, err := s.Get("agent", "sent", id); return err },
		"List": func(s *Store, id string) error {
			p, err := s.List("agent", "sent", Query{Limit: 10})
			if err == nil && (len(p.Items) != 1 || p.Items[0].ID != id) {
				err = errors.New("not listed")
			}
			return err
		},
		"FindByMessageID": func(s *Store, id string) error {
			if got, ok := s.FindByMessageID("agent", "sent", "<m1@example.com>"); !ok || got != id {
				return errors.New("not found by Message-ID")
			}
			return nil
		},
		"Counts": func(s *Store, id string) error {
			c, err := s.Counts("agent")
			if err == nil && c.Sent != 1 {
				err = errors.New("not counted")
			}
			return err
		},
		"Move": func(s *Store, id string) error { return s.Move("agent", id, "sent", "trash") },
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			s := newTestStore(t)
			id := deferOne(t, s, 1)
			if onDisk(s, "agent", "sent", id) {
				t.Fatal("written before its delay or a read")
			}
			if !s.Has("agent", "sent", id) {
				t.Fatal("Has does not see it")
			}
			if err := read(s, id); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An update before the message is written changes what is written: the
// first file on disk already carries it.
func TestDeferredMessageUpdatedIsWrittenOnce(t *testing.T) {
	s := newTestStore(t)
	id := deferOne(t, s, 1)
	err := s.UpdateUnsynced("agent", "sent", id, func(m *Message) error { m.DeliveryStatus = "delivered"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.Root(), "agent", "sent", id+".md"))
	if err != nil {
		t.Fatal(err)
	}
	m, body, err := s.Get("agent", "sent", id)
	if err != nil || m.DeliveryStatus != "delivered" || body != "deferred body" {
		t.Fatalf("%+v %q %v\n%s", m, body, err, data)
	}
	if s.deferredHas("agent", "sent", id) {
		t.Fatal("still deferred after it was written")
	}
}

// Two creators of one id can both pass their checks: CreateDeferred looks
// on disk, then holds the message, while a CreateUnsynced that looked
// before it was held writes the file (a sent copy's Recorder writing it
// from the queue's journal as the send is answered). The file on disk
// stands, and a later change is made to it, not to the held copy that can
// no longer be written.
func TestDeferredMessageLosingARaceLetsChangesReachTheFile(t *testing.T) {
	s := newTestStore(t)
	id := deferOne(t, s, 1)
	other := testMessage(1)
	other.DeliveryStatus = "deferred"
	if err := s.createUnsynced("", "agent", "sent", id, other, "journal body", rawOf([]byte("raw\r\n")), nil); err != nil {
		t.Fatal(err)
	}
	err := s.UpdateUnsynced("agent", "sent", id, func(m *Message) error { m.DeliveryStatus = "failed"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	m, body, err := s.Get("agent", "sent", id)
	if err != nil || m.DeliveryStatus != "failed" || body != "journal body" {
		t.Fatalf("status %q body %q err %v: the change did not reach the file on disk", m.DeliveryStatus, body, err)
	}
	if s.deferredHas("agent", "sent", id) {
		t.Fatal("the held copy is still held")
	}
}

// Unread, a deferred message is written when its delay ends, and by Close
// at once; Sync leaves it held.
func TestDeferredMessageIsWrittenByItsTimerSyncAndClose(t *testing.T) {
	t.Run("timer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newTestStore(t)
			m := testMessage(1)
			id, release, err := s.Reserve("agent", "sent", m)
			if err != nil {
				t.Fatal(err)
			}
			release()
			if err := s.CreateDeferred("agent", "sent", id, m, "b", []byte("raw\r\n"), nil, time.Second); err != nil {
				t.Fatal(err)
			}
			time.Sleep(999 * time.Millisecond)
			synctest.Wait()
			if onDisk(s, "agent", "sent", id) {
				t.Fatal("written before its delay")
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if !onDisk(s, "agent", "sent", id) {
				t.Fatal("not written when its delay ended")
			}
		})
	})
	t.Run("Sync", func(t *testing.T) {
		// Sync makes writes durable; it does not write what is held.
		s := newTestStore(t)
		id := deferOne(t, s, 1)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if onDisk(s, "agent", "sent", id) || !s.deferredHas("agent", "sent", id) {
			t.Fatal("Sync wrote a deferred message")
		}
	})
	t.Run("Close", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "mailboxes")
		s, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
			t.Fatal(err)
		}
		id := deferOne(t, s, 1)
		s.Close()
		if _, err := os.Lstat(filepath.Join(root, "agent", "sent", id+".md")); err != nil {
			t.Fatal("Close did not write it:", err)
		}
	})
}

// The id of a deferred message is not given to another message, and a
// second create of it answers ErrExists.
func TestDeferredMessageKeepsItsID(t *testing.T) {
	s := newTestStore(t)
	id := deferOne(t, s, 1)
	other, _, err := s.Deliver("agent", "sent", testMessage(1), "b", []byte("raw\r\n"), nil)
	if err != nil || other == id {
		t.Fatalf("a delivery took the deferred id %s: %s %v", id, other, err)
	}
	if err := s.CreateUnsynced("agent", "sent", id, testMessage(1), "b", nil, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateUnsynced of a deferred id: %v", err)
	}
	if err := s.CreateDeferred("agent", "sent", id, testMessage(1), "b", nil, nil, time.Hour); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateDeferred of a deferred id: %v", err)
	}
}

// A mailbox holding only a deferred message is not empty, and deleting it
// takes the message with it: nothing reaches a mailbox created again under
// the name.
func TestDeferredMessageBelongsToItsMailbox(t *testing.T) {
	s := newTestStore(t)
	deferOne(t, s, 1)
	if err := s.Delete("agent", false); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete of a mailbox with a deferred message: %v", err)
	}
	if err := s.Delete("agent", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Counts("agent"); err != nil || c.Sent != 0 {
		t.Fatalf("the new mailbox: %+v %v", c, err)
	}
}

// A mailbox directory replaced behind the store's back (renamed away and
// made again) does not receive what was deferred for the old one.
func TestDeferredMessageIsDroppedWhenItsMailboxIsReplaced(t *testing.T) {
	s := newTestStore(t)
	id := deferOne(t, s, 1)
	dir := filepath.Join(s.Root(), "agent")
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get("agent", "sent", id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the old mailbox's message reached the new one: %v", err)
	}
	if s.deferredHas("agent", "sent", id) {
		t.Fatal("the dropped message is still held")
	}
}

// A mailbox directory made again with the inode of the one removed (which
// file systems give out again) is another mailbox: here for another owner,
// the same directory given to them, as the inode's reuse would look. What
// was deferred for the first owner is dropped, not written into the
// second's folder.
func TestDeferredMessageIsNotWrittenForTheInodesNextOwner(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t)
	id := deferOne(t, s, 1)
	dir := filepath.Join(s.Root(), "agent")
	other := os.Getuid() + 4242
	for _, p := range []string{dir, filepath.Join(dir, "sent")} {
		if err := os.Chown(p, other, other); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Get("agent", "sent", id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the first owner's message reached the next owner's folder: %v", err)
	}
	if onDisk(s, "agent", "sent", id) || s.deferredHas("agent", "sent", id) {
		t.Fatal("the dropped message is on disk or still held")
	}
}

// A call about one message writes that one only: another held message
// stays held until its own change comes, and is then written once.
func TestDeferredMessagesAreWrittenOneByOne(t *testing.T) {
	s := newTestStore(t)
	a, b := deferOne(t, s, 1), deferOne(t, s, 2)
	calls := map[string]func() error{
		"UpdateUnsynced": func() error {
			return s.UpdateUnsynced("agent", "sent", a, func(m *Message) error { m.DeliveryStatus = "delivered"; return nil })
		},
		"Get":       func() error { _, _, err := s.Get("agent", "sent", a); return err },
		"Raw":       func() error { _, err := s.Raw("agent", "sent", a, 1<<20); return err },
		"SetRead":   func() error { _, _, err := s.SetRead("agent", "sent", []string{a}, false, t0); return err },
		"Move back": func() error { return s.Move("agent", a, "trash", "sent") },
		"Move":      func() error { return s.Move("agent", a, "sent", "trash") },
	}
	for _, name := range []string{"UpdateUnsynced", "Get", "Raw", "SetRead", "Move", "Move back"} {
		if err := calls[name](); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if onDisk(s, "agent", "sent", b) || !s.deferredHas("agent", "sent", b) {
			t.Fatalf("%s of one message wrote another", name)
		}
	}
	if _, err := s.List("agent", "sent", Query{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if !onDisk(s, "agent", "sent", b) {
		t.Fatal("a listing did not write the held message")
	}
}
