package store

import (
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

// An id Reserve gave is not given to a delivery meanwhile, and is free
// again once released.
func TestReserveHoldsTheID(t *testing.T) {
	s := newTestStore(t)
	m := testMessage(1)
	id, release, err := s.Reserve("agent", "sent", m)
	if err != nil {
		t.Fatal(err)
	}
	same := testMessage(1)
	other, _, err := s.Deliver("agent", "sent", same, "b", nil, nil)
	if err != nil || other == id {
		t.Fatalf("a delivery took the reserved id %s: %s %v", id, other, err)
	}
	release()
	release() // a second call does nothing
	if err := s.CreateUnsynced("agent", "sent", id, m, "body", []byte("raw\r\n"), nil); err != nil {
		t.Fatal(err)
	}
	got, body, err := s.Get("agent", "sent", id)
	if err != nil || got.ID != id || body != "body" {
		t.Fatalf("created message: %+v %q %v", got, body, err)
	}
	if !s.Has("agent", "sent", id) {
		t.Fatal("Has does not see the created message")
	}
}

// Of writers racing to create one id, exactly one writes it; the others
// answer ErrExists only once it is whole, so an update that follows finds it.
func TestCreateUnsyncedOneWriterWins(t *testing.T) {
	s := newTestStore(t)
	id, release, err := s.Reserve("agent", "sent", testMessage(2))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.CreateUnsynced("agent", "sent", id, testMessage(2), "writer", []byte("raw\r\n"), nil)
			if errors.Is(err, ErrExists) {
				// The winner's message must be whole by now.
				err = s.Update("agent", "sent", id, func(m *Message) error { m.Labels = append(m.Labels, "seen"); return nil })
				if err == nil {
					err = ErrExists
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, ErrExists):
		default:
			t.Fatal(err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers created the message, want 1", won)
	}
	m, _, err := s.Get("agent", "sent", id)
	if err != nil || len(m.Labels) != n-1 {
		t.Fatalf("after the race: %+v %v (want %d updates applied)", m, err, n-1)
	}
}

// A write bound to a mailbox's identity goes into that mailbox only: once
// the name is another mailbox's (deleted and made again), the write is
// refused as not found, leaving the new mailbox as it was; in the mailbox
// of that identity they are done.
func TestCreateInWritesOnlyIntoThatMailbox(t *testing.T) {
	s := newTestStore(t)
	first, err := s.MailboxIdentity("agent")
	if err != nil {
		t.Fatal(err)
	}
	m := testMessage(1)
	id, release, err := s.Reserve("agent", "sent", m)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := s.Delete("agent", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	now, _ := s.MailboxIdentity("agent")
	if now == first {
		t.Fatalf("the mailbox made again has the first one's identity %q", now)
	}
	if err := s.CreateUnsyncedIn(first, "agent", "sent", id, m, "body", []byte("raw\r\n"), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("a write for the deleted mailbox: %v, want ErrNotFound", err)
	}
	if err := s.CreateDeferredIn(first, "agent", "sent", id, m, "body", []byte("raw\r\n"), nil, time.Hour); !errors.Is(err, ErrNotFound) {
		t.Errorf("a deferred write for the deleted mailbox: %v, want ErrNotFound", err)
	}
	if s.Has("agent", "sent", id) {
		t.Fatal("the new mailbox has the deleted one's message")
	}
	if err := s.CreateDeferredIn(now, "agent", "sent", id, m, "body", []byte("raw\r\n"), nil, time.Hour); err != nil {
		t.Fatalf("a deferred write into the mailbox of that identity: %v", err)
	}
	if !s.Has("agent", "sent", id) {
		t.Fatal("the write into the mailbox of that identity is not there")
	}
	mark := func(m *Message) error { m.DeliveryStatus = "delivered"; return nil }
	if err := s.UpdateUnsyncedIn(first, "agent", "sent", id, mark); !errors.Is(err, ErrNotFound) {
		t.Errorf("an update for the deleted mailbox: %v, want ErrNotFound", err)
	}
	if got, _, err := s.Get("agent", "sent", id); err != nil || got.DeliveryStatus == "delivered" {
		t.Errorf("an update for the deleted mailbox changed the new one's message: %+v %v", got, err)
	}
	if err := s.UpdateUnsyncedIn(now, "agent", "sent", id, mark); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Get("agent", "sent", id); err != nil || got.DeliveryStatus != "delivered" {
		t.Errorf("an update in the mailbox of that identity: %+v %v", got, err)
	}
}
