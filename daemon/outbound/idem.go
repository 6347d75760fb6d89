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
}

// idemPath is where the record of req's idempotency key is kept, scoped to
// the mailbox's identity (queue.IdempotencyFile).
func (s *Service) idemPath(req SendRequest) string {
	return filepath.Join(s.Queue.Dir(), queue.IdempotencyDir, queue.IdempotencyFile(req.Mailbox, req.MailboxID, req.Args.IdempotencyKey))
}

// claim serializes sends with the same key: a concurrent retry waits for the
// first call to finish and then sees its record.
func (s *Service) claim(ctx context.Context, req SendRequest) (release func(), rec *idemRecord, err error) {
	key := req.Args.IdempotencyKey
	if len(key) > 200 || strings.ContainsAny(key, "\r\n\x00") {
		return nil, nil, protocol.Errorf(protocol.CodeInvalidInput, "idempotency_key must be at most 200 characters on one line")
	}
	path := s.idemPath(req)
	s.mu.Lock()
	for ch, busy := s.inflight[path]; busy; ch, busy = s.inflight[path] {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, protocol.Errorf(protocol.CodeTimeout, "an earlier send with this idempotency key is still running")
		}
		s.mu.Lock()
	}
	data, err := os.ReadFile(path)
	if err == nil {
		var r idemRecord
		if json.Unmarshal(data, &r) == nil && r.SentID != "" {
			s.mu.Unlock()
			return func() {}, &r, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("reading idempotency record: %w", err)
	}
	if s.inflight == nil {
		s.inflight = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.inflight[path] = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.inflight, path)
		close(ch)
		s.mu.Unlock()
	}, nil, nil
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
