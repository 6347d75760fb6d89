package control

import (
	"context"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// handleIndexRebuild throws the message index away and reads every
// mailbox's files back into it in the background (the files are the
// truth; the index is derived). Listings meanwhile read a folder's files
// when they need it. Root only.
func handleIndexRebuild(_ context.Context, s *Server, _ *call, _ *protocol.Empty) (any, error) {
	names, err := s.store.Mailboxes()
	if err != nil {
		return nil, storeFault(err)
	}
	if err := s.store.Reindex(); err != nil {
		return nil, storeFault(err)
	}
	s.log.Info("index thrown away; reading every mailbox back", "mailboxes", len(names))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		start := time.Now()
		n, err := s.store.IndexAll(ctx)
		took := time.Since(start)
		if err != nil {
			s.log.Error("index rebuild stopped", "messages", n, "err", err)
			return
		}
		s.log.Info("index rebuilt from the files", "mailboxes", len(names), "messages", n,
			"seconds", took.Seconds(), "per_second", float64(n)/max(took.Seconds(), 1e-3))
	}()
	return protocol.IndexRebuild{Mailboxes: len(names), Started: true}, nil
}
