package control

import (
	"errors"
	"fmt"
	"sync"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// reads is the store for request c: what it reads of a mailbox's files
// (their owner's to replace, and to grow) is charged to the caller's memory
// budget before it is read, factor times the bytes the store reads (for the
// copies the request makes of them), and given back when the store is done
// with them or, for what the request keeps, when the request ends.
func (s *Server) reads(c *call, factor int64) store.Charged {
	return s.store.Charged(func(n int64) (func(), error) {
		n *= factor
		if err := s.mem.take(c.caller, n, s.cfg().Control); err != nil {
			return nil, err
		}
		var once sync.Once
		return func() { once.Do(func() { s.mem.give(c.caller, n) }) }, nil
	})
}

// batchFailures takes the messages a batch could not change out of its
// error, each named with its file; any other error is returned as it is.
func (s *Server) batchFailures(mailbox, folder string, err error) ([]protocol.ItemFailure, error) {
	var be *store.BatchError
	if !errors.As(err, &be) {
		return nil, err
	}
	out := make([]protocol.ItemFailure, 0, len(be.Failed))
	for _, f := range be.Failed {
		out = append(out, s.itemFailure(mailbox, folder, f.ID, f.Err))
	}
	return out, nil
}

// itemFailure says why one message of a batch was not changed, naming its
// file and what to do.
func (s *Server) itemFailure(mailbox, folder, id string, err error) protocol.ItemFailure {
	file := s.store.Path(mailbox) + "/" + folder + "/" + id + ".md"
	fail := func(code, format string, args ...any) protocol.ItemFailure {
		return protocol.ItemFailure{ID: id, Code: code, Message: fmt.Sprintf(format, args...)}
	}
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe): // the caller's memory budget
		return fail(pe.Code, "%s: %s", file, pe.Message)
	case errors.Is(err, store.ErrTooManyLabels):
		return fail(protocol.CodeTooLarge, "%s: %v: remove some first", file, err)
	case errors.Is(err, store.ErrTooLarge):
		return fail(protocol.CodeTooLarge, "%s is larger than the daemon reads (%d MiB) or its frontmatter is (%d MiB): move it out of the folder, or cut it down",
			file, store.MaxMessageFile>>20, store.MaxFrontmatter>>20)
	case errors.Is(err, store.ErrNoFrontmatter), errors.Is(err, store.ErrBadFrontmatter):
		return fail(protocol.CodeConflict, "%s is damaged (%v; edited by hand?): the raw .eml beside it holds the original; restore or remove the .md file, then retry",
			file, errors.Unwrap(err))
	}
	if pe := storeFault(err); pe != nil {
		return fail(pe.Code, "%s: %s", file, pe.Message)
	}
	s.log.Error("a message of a batch failed", "mailbox", mailbox, "folder", folder, "id", id, "err", err)
	return fail(protocol.CodeInternal, "%s: internal error; the daemon log has details", file)
}

// batchAnswer is the error of a batch that did nothing: every id it named
// was missing or failed. One that failed is the error, so a request naming
// one bad message gets an error as before; otherwise the batch answers
// with what it did and what failed.
func batchAnswer(ids, notFound []string, failed []protocol.ItemFailure) error {
	distinct := map[string]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	if len(failed) == 0 || len(notFound)+len(failed) < len(distinct) {
		return nil
	}
	f := failed[0]
	if len(failed) > 1 {
		return protocol.Errorf(f.Code, "%s (and %d more messages failed)", f.Message, len(failed)-1)
	}
	return protocol.Errorf(f.Code, "%s", f.Message)
}
