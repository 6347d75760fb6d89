package control

import (
	"context"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// handleIndexRebuild throws the message index away and reads every
// mailbox's files back into it in the background (the files are the
// truth; the index is derived). Root only.
func handleIndexRebuild(_ context.Context, s *Server, _ *call, _ *protocol.Empty) (any, error) {
	names, err := s.store.Mailboxes()
	if err != nil {
		return nil, storeFault(err)
	}
	if err := s.store.Reindex(); err != nil {
		return nil, storeFault(err)
	}
	s.IndexInBackground("reindex")
	return protocol.IndexRebuild{Mailboxes: len(names), Started: true}, nil
}

// IndexInBackground brings the index of every folder up to date with the
// files, one folder at a time, until the daemon closes: at start (a first
// start, or files changed while the daemon was stopped, are read now rather
// than by the first listing) and after a reindex. A listing of a folder
// being read meanwhile answers unavailable, saying so.
func (s *Server) IndexInBackground(why string) {
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
			if ctx.Err() != nil {
				// The daemon is closing: the next start goes on from the files.
				s.log.Info("indexing the mailboxes stopped: the daemon is closing", "why", why, "messages", n)
			} else {
				s.log.Error("indexing the mailboxes stopped", "why", why, "messages", n, "err", err)
			}
			return
		}
		s.log.Info("index up to date with the mailboxes' files", "why", why, "messages", n,
			"seconds", took.Seconds(), "per_second", float64(n)/max(took.Seconds(), 1e-3))
	}()
}
