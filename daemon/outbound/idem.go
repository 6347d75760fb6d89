package outbound

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// idemRecord remembers which message an idempotency key produced.
type idemRecord struct {
	SentID    string    `json:"sent_id"`
	MessageID string    `json:"message_id"`
	Created   time.Time `json:"created"`
}

// idemPath is where the record of req's idempotency key is kept. The key
// is scoped to the mailbox's identity, so that a mailbox created later
// under the same name never answers with an earlier owner's message.
func (s *Service) idemPath(req SendRequest) string {
	owner := req.Mailbox
	if req.MailboxID != "" {
		owner = "id:" + req.MailboxID
	}
	sum := sha256.Sum256([]byte(owner + "\x00" + req.Args.IdempotencyKey))
	return filepath.Join(s.Queue.Dir(), "idempotency", hex.EncodeToString(sum[:])+".json")
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
