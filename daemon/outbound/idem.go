package outbound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// idemRecord remembers which message an idempotency key produced. Mailbox,
// MailboxID and Key say whose key it is (a record of an older release has
// none), so that a restore that gives a mailbox another identity (an
// operator-declared mailbox's includes its owner's uid) can file the record
// under it.
type idemRecord struct {
	SentID    string    `json:"sent_id"`
	MessageID string    `json:"message_id"`
	Created   time.Time `json:"created"`
	Mailbox   string    `json:"mailbox,omitempty"`
	MailboxID string    `json:"mailbox_id,omitempty"`
	Key       string    `json:"key,omitempty"`
	// Draft, DraftVersion and DraftDigest name the draft the message was
	// sent from (SendRequest.Draft): the record outlives the window while
	// that draft is still in drafts/ with that content. A record of an
	// older release has no digest: its draft's version must be the same.
	Draft        string `json:"draft,omitempty"`
	DraftVersion string `json:"draft_version,omitempty"`
	DraftDigest  string `json:"draft_digest,omitempty"`
}

// DefaultKeyWindow is how long an idempotency key is remembered when
// Service.KeyWindow is not set.
const DefaultKeyWindow = 30 * 24 * time.Hour

// maxIdemRecord bounds what is read of one record: a record is a few
// hundred bytes, and the backup takes none over 64 KiB.
const maxIdemRecord = 64 << 10

// idemPath is where the record of req's idempotency key is kept, scoped to
// the mailbox's identity (queue.IdempotencyFile).
func (s *Service) idemPath(req SendRequest) string {
	return filepath.Join(s.idemDir(), queue.IdempotencyFile(req.Mailbox, req.MailboxID, req.Args.IdempotencyKey))
}

func (s *Service) idemDir() string { return filepath.Join(s.Queue.Dir(), queue.IdempotencyDir) }

func (s *Service) keyWindow() time.Duration {
	if s.KeyWindow > 0 {
		return s.KeyWindow
	}
	return DefaultKeyWindow
}

// claim serializes sends with the same key: a concurrent retry waits for the
// first call to finish and then sees its record. A record past the window
// (expired) answers nothing: the key makes a new send, whose record
// replaces it.
func (s *Service) claim(ctx context.Context, req SendRequest) (release func(), rec *idemRecord, err error) {
	key := req.Args.IdempotencyKey
	if len(key) > 200 || strings.ContainsAny(key, "\r\n\x00") {
		return nil, nil, protocol.Errorf(protocol.CodeInvalidInput, "idempotency_key must be at most 200 characters on one line")
	}
	path := s.idemPath(req)
	release, err = s.hold(ctx, path)
	if err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeTimeout, "an earlier send with this idempotency key is still running")
	}
	r, _, err := readIdem(path)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, errNotRecord):
		r = nil
	case err != nil:
		release()
		return nil, nil, fmt.Errorf("reading idempotency record: %w", err)
	case s.expired(req.Mailbox, r, s.now()):
		r = nil
	}
	if r == nil {
		r = s.versionKeyed(req)
	}
	if r == nil {
		return release, nil, nil
	}
	release()
	return func() {}, r, nil
}

// versionKeyed is the record an earlier release made of this draft's send
// under the key it made from the draft file's version (DraftSource.
// VersionKey), when there is one that still answers: a draft it queued
// and left in drafts/ (the daemon stopped, to be upgraded) must not go
// out again either. That key named the file's version, so it answers only
// while the file is at that version, as it did.
func (s *Service) versionKeyed(req SendRequest) *idemRecord {
	if req.Draft == nil || req.Draft.VersionKey == "" {
		return nil
	}
	old := req
	old.Args.IdempotencyKey = req.Draft.VersionKey
	r, _, err := readIdem(s.idemPath(old))
	if err != nil || r.DraftDigest != "" || s.expired(req.Mailbox, r, s.now()) {
		return nil
	}
	return r
}

// hold takes path for the caller alone, waiting while a send or the sweep
// has it: a record is read, written or removed only under its hold.
func (s *Service) hold(ctx context.Context, path string) (release func(), err error) {
	s.mu.Lock()
	for ch, busy := s.inflight[path]; busy; ch, busy = s.inflight[path] {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	ch := s.take(path)
	s.mu.Unlock()
	return s.releaser(path, ch), nil
}

// tryHold is hold without waiting: false when path is held.
func (s *Service) tryHold(path string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.inflight[path]; busy {
		return nil, false
	}
	return s.releaser(path, s.take(path)), true
}

// take marks path held; s.mu is held.
func (s *Service) take(path string) chan struct{} {
	if s.inflight == nil {
		s.inflight = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.inflight[path] = ch
	return ch
}

func (s *Service) releaser(path string, ch chan struct{}) func() {
	return func() {
		s.mu.Lock()
		delete(s.inflight, path)
		close(ch)
		s.mu.Unlock()
	}
}

// errNotRecord is a file in the records' directory that is no record this
// release reads: it answers no key.
var errNotRecord = errors.New("not an idempotency record")

// readIdem reads the record at path, a regular file of the daemon's own
// (never through a link), at most maxIdemRecord bytes of it. mtime is the
// file's modification time, which dates a record that does not say when
// it was made, and a file that is no record.
func readIdem(path string) (rec *idemRecord, mtime time.Time, err error) {
	f, fi, err := safeio.OpenRegular(path, maxIdemRecord)
	if errors.Is(err, safeio.ErrNotRegular) || errors.Is(err, safeio.ErrTooLarge) {
		// Refused unopened or unread: dated by the name's own inode.
		if fi, err := os.Lstat(path); err == nil {
			mtime = fi.ModTime()
		}
		return nil, mtime, errNotRecord
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	data, err := safeio.ReadOpened(f, fi, maxIdemRecord)
	var r idemRecord
	switch {
	case errors.Is(err, safeio.ErrTooLarge):
		return nil, fi.ModTime(), errNotRecord
	case err != nil:
		return nil, fi.ModTime(), err
	case json.Unmarshal(data, &r) != nil || r.SentID == "":
		return nil, fi.ModTime(), errNotRecord
	}
	return &r, fi.ModTime(), nil
}

// expired reports whether rec, a record of a key used on mailbox, is past
// the window at now. The window counts from the send; a message still in
// the queue (scheduled, held or being retried) keeps its key remembered
// however long that takes, so that no retry of a call can make a second
// message while the first may still go out. So does a draft still in
// drafts/ as it was sent (draftLeft): a retry of its draft.send, whenever
// it comes, answers the first send and takes the draft out.
func (s *Service) expired(mailbox string, rec *idemRecord, now time.Time) bool {
	if now.Sub(rec.Created) < s.keyWindow() {
		return false
	}
	if rec.Mailbox != "" {
		mailbox = rec.Mailbox
	}
	if mailbox != "" {
		if it, err := s.Queue.Get(QueueID(mailbox, rec.SentID)); err == nil && !it.Settled() && it.MailboxID == rec.MailboxID {
			return false
		}
		if s.draftLeft(mailbox, rec) {
			return false
		}
	}
	return true
}

// draftLeft reports whether the draft rec's message was sent from is still
// in mailbox's drafts/ with the content that was sent, or may be: only a
// draft found gone, or changed (new content is a new message), lets the
// record go. The file at the version that was sent is that content,
// unread; a file at another version (rewritten unchanged, or restored on
// another host, which makes new files) is read to see.
func (s *Service) draftLeft(mailbox string, rec *idemRecord) bool {
	if rec.Draft == "" || store.ValidID(rec.Draft) != nil || s.Sent == nil || s.Sent.Store == nil {
		return false
	}
	if s.Deleted != nil && s.Deleted(mailbox, rec.MailboxID) {
		return false
	}
	v, err := s.Sent.Store.Version(mailbox, protocol.FolderDrafts, rec.Draft)
	switch {
	case err == nil && v == rec.DraftVersion:
		return true
	case err == nil && rec.DraftDigest == "":
		return false
	case err == nil:
		d, err := s.Sent.Store.DraftDigest(mailbox, protocol.FolderDrafts, rec.Draft)
		if err == nil {
			return d == rec.DraftDigest
		}
		return !gone(err)
	}
	return !gone(err)
}

// gone reports whether err says the draft is not there.
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, store.ErrNotFound)
}

func (s *Service) remember(req SendRequest, rec idemRecord) error {
	path := s.idemPath(req)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return safeio.WriteFile(path, data)
}
