package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// A deferred message is one CreateDeferred has taken but not yet written.
// It exists so that a message whose state changes soon after it is made (a
// sent copy, whose first delivery attempt usually ends milliseconds after
// the send is answered) is written once, with its new state, instead of
// written and then replaced: on a filesystem each replacement frees an
// inode, and creating files slows while freed inodes wait to be reused.
//
// Through the store a deferred message is as good as written: any call that
// opens its folder (reads, listings, changes, Detach, Counts) writes the
// folder's deferred messages first, Has sees it, its id is never given
// twice, and Close writes every one of them. Only a reader of the files
// themselves sees it late, by at most the delay its creator chose. Sync
// leaves it alone: it is not written yet, and its creator keeps its own
// durable record of it (the queue's journal for a sent copy) until then.

// maxDeferred and maxDeferredBytes bound the messages held in memory:
// past either, CreateDeferred writes at once.
const (
	maxDeferred      = 1024
	maxDeferredBytes = 32 << 20
)

type deferredMsg struct {
	id      string
	m       *Message
	body    string
	raw     []byte
	atts    []AttachmentData
	mailbox mailboxIdentity // the mailbox directory it was made for: owner, device, inode, birth
}

// deferredFolder is one folder's deferred messages. A message stays in
// msgs until it is on disk, so that its id is never given again; writing
// is held while they are written, so a caller that finds msgs not empty
// and then holds writing finds each one either still in msgs or on disk.
type deferredFolder struct {
	writing sync.Mutex
	msgs    map[string]*deferredMsg
}

type deferredSet struct {
	mu      sync.Mutex
	folders map[string]*deferredFolder // by "mailbox/folder"
	total   int                        // messages held
	bytes   int                        // their raw messages and bodies
}

func (ds *deferredSet) folder(key string, create bool) *deferredFolder {
	f := ds.folders[key]
	if f == nil && create {
		if ds.folders == nil {
			ds.folders = map[string]*deferredFolder{}
		}
		f = &deferredFolder{msgs: map[string]*deferredMsg{}}
		ds.folders[key] = f
	}
	return f
}

// deferredHas reports whether id is deferred (or being written) in mailbox/folder.
func (s *Store) deferredHas(mailbox, folder, id string) bool {
	ds := &s.deferred
	ds.mu.Lock()
	defer ds.mu.Unlock()
	f := ds.folder(mailbox+"/"+folder, false)
	return f != nil && f.msgs[id] != nil
}

// CreateDeferred is CreateUnsynced, later: the message is written within
// the delay, or as soon as anything opens its folder through the store, or
// by Close, whichever comes first. An UpdateUnsynced before then
// changes what is written, and the message is written once. It answers
// ErrExists as CreateUnsynced does.
func (s *Store) CreateDeferred(mailbox, folder, id string, m *Message, body string, raw []byte, atts []AttachmentData, within time.Duration) error {
	return s.CreateDeferredIn("", mailbox, folder, id, m, body, raw, atts, within)
}

// CreateDeferredIn is CreateDeferred into the mailbox of identity in only,
// as CreateUnsyncedIn is.
func (s *Store) CreateDeferredIn(in, mailbox, folder, id string, m *Message, body string, raw []byte, atts []AttachmentData, within time.Duration) error {
	if err := ValidID(id); err != nil {
		return err
	}
	mb, d, done, err := s.openFolderIn(in, mailbox, folder, true)
	if err != nil {
		return err
	}
	_, err = mb.dir.Stat()
	ident := identityOf(mb)
	exists := taken(d, id)
	done()
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("create %s/%s/%s: %w", mailbox, folder, id, ErrExists)
	}
	ds := &s.deferred
	ds.mu.Lock()
	f := ds.folder(mailbox+"/"+folder, true)
	if _, dup := f.msgs[id]; dup {
		ds.mu.Unlock()
		return fmt.Errorf("create %s/%s/%s: %w", mailbox, folder, id, ErrExists)
	}
	size := len(raw) + len(body)
	if ds.total >= maxDeferred || ds.bytes+size > maxDeferredBytes {
		ds.mu.Unlock()
		return s.CreateUnsyncedIn(ident.String(), mailbox, folder, id, m, body, raw, atts)
	}
	f.msgs[id] = &deferredMsg{id: id, m: m, body: body, raw: raw, atts: atts, mailbox: ident}
	ds.total++
	ds.bytes += size
	ds.mu.Unlock()
	time.AfterFunc(within, func() { _, _ = s.settleSome(mailbox, folder, is(id), "", nil) })
	return nil
}

// settleSome writes the deferred messages of mailbox/folder that want
// picks (nil: all), and only those: a message written early for no reason
// is one replaced when its own change comes. When one of them is id, fn
// changes it first and settleSome reports that it did, with fn's error
// (the message is then written unchanged).
func (s *Store) settleSome(mailbox, folder string, want func(id string) bool, id string, fn func(*Message) error) (bool, error) {
	return s.settleSomeIn("", mailbox, folder, want, id, fn)
}

// settleSomeIn is settleSome that changes id with fn only if it was made
// for the mailbox of identity in (empty: for any).
func (s *Store) settleSomeIn(in, mailbox, folder string, want func(id string) bool, id string, fn func(*Message) error) (bool, error) {
	ds := &s.deferred
	key := mailbox + "/" + folder
	ds.mu.Lock()
	f := ds.folder(key, false)
	ds.mu.Unlock()
	if f == nil {
		return false, nil
	}
	f.writing.Lock()
	defer f.writing.Unlock()
	ds.mu.Lock()
	msgs := make([]*deferredMsg, 0, len(f.msgs))
	for _, dm := range f.msgs {
		if want == nil || want(dm.id) {
			msgs = append(msgs, dm)
		}
	}
	ds.mu.Unlock()
	if len(msgs) == 0 {
		return false, nil
	}
	applied, ferr := false, error(nil)
	for _, dm := range msgs {
		if dm.id == id && fn != nil && (in == "" || dm.mailbox.String() == in) {
			applied = true
			ferr = fn(dm.m)
		}
		// Written only into the mailbox directory it was made for: one
		// made for a mailbox since replaced (deleted, perhaps created
		// again by someone else) is dropped (ErrNotFound). The owner and
		// birth time count as well as the inode, which a file system
		// gives again to the next directory made once one is removed.
		// A failure has no one to report to: the creator keeps its own
		// record (the queue's journal for a sent copy) and writes it
		// again from there. ErrExists means another creator wrote the id
		// between CreateDeferred's check and now (a sent copy's Recorder,
		// writing it from the journal with a state as new or newer): that
		// copy stands, and a change meant for this id is for it, so the
		// caller makes it on disk.
		err := s.createUnsynced(dm.mailbox.String(), mailbox, folder, dm.id, dm.m, dm.body, rawOf(dm.raw), dm.atts)
		if errors.Is(err, ErrExists) && dm.id == id {
			applied, ferr = false, nil
		}
		ds.mu.Lock()
		delete(f.msgs, dm.id)
		ds.total--
		ds.bytes -= len(dm.raw) + len(dm.body)
		if len(f.msgs) == 0 && ds.folders[key] == f {
			delete(ds.folders, key)
		}
		ds.mu.Unlock()
	}
	return applied, ferr
}

// settleMailbox writes the deferred messages of every folder of mailbox;
// with mailbox "", of every mailbox.
func (s *Store) settleMailbox(mailbox string) {
	ds := &s.deferred
	ds.mu.Lock()
	var keys []string
	for k := range ds.folders {
		if mailbox == "" || strings.HasPrefix(k, mailbox+"/") {
			keys = append(keys, k)
		}
	}
	ds.mu.Unlock()
	for _, k := range keys {
		mbox, folder, _ := strings.Cut(k, "/")
		_, _ = s.settleSome(mbox, folder, nil, "", nil)
	}
}

// is picks one id.
func is(id string) func(string) bool { return func(x string) bool { return x == id } }

// among picks the ids listed.
func among(ids []string) func(string) bool {
	return func(x string) bool { return slices.Contains(ids, x) }
}
