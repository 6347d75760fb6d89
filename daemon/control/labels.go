package control

import (
	"context"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// maxLabelChanges bounds the labels one message.label request adds and
// removes.
const maxLabelChanges = 20

func handleMessageLabel(_ context.Context, s *Server, c *call, a *protocol.MessageLabelArgs) (any, error) {
	folder, err := folderOf(a.Folder)
	if err != nil {
		return nil, err
	}
	if err := checkMessageIDs(a.IDs); err != nil {
		return nil, err
	}
	if len(a.Add) == 0 && len(a.Remove) == 0 && a.Star == nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "nothing to change: give labels to add or remove, or star")
	}
	if len(a.Add)+len(a.Remove) > maxLabelChanges {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "add and remove name %d labels; at most %d per request", len(a.Add)+len(a.Remove), maxLabelChanges)
	}
	for _, l := range append(append([]string{}, a.Add...), a.Remove...) {
		if err := store.ValidLabel(l); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
		}
	}
	for _, l := range a.Add {
		if store.HasLabel(a.Remove, l) {
			return nil, protocol.Errorf(protocol.CodeInvalidInput, "label %q is both added and removed", l)
		}
	}
	changed, notFound, err := s.reads(c, 1).Relabel(a.Mailbox, folder, a.IDs, a.Add, a.Remove, a.Star)
	failed, err := s.batchFailures(a.Mailbox, folder, err)
	if err != nil {
		return nil, storeErr(err, "folder "+folder, noFolder(a.Mailbox, folder))
	}
	if err := batchAnswer(a.IDs, notFound, failed); err != nil {
		return nil, err
	}
	if noneFound(notFound, a.IDs) {
		return nil, notFoundIn(protocol.MissingMessage, notFound, a.Mailbox, folder)
	}
	return protocol.MessageLabeled{Changed: nonNil(changed), NotFound: notFound, Failed: failed}, nil
}

// maxMessageIDs bounds the message ids one request names.
const maxMessageIDs = 1000

func checkMessageIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > maxMessageIDs {
		return protocol.Errorf(protocol.CodeInvalidInput, "ids: give between 1 and %d message ids", maxMessageIDs)
	}
	for _, id := range ids {
		if err := store.ValidID(id); err != nil {
			return protocol.Errorf(protocol.CodeInvalidInput, "%v", err) // it names the id
		}
	}
	return nil
}

// noneFound reports whether a batch request found none of the ids it named:
// the store reports each missing id once, however often it was named.
func noneFound(notFound, ids []string) bool {
	distinct := make(map[string]bool, len(ids))
	for _, id := range ids {
		distinct[id] = true
	}
	return len(notFound) == len(distinct)
}

func handleMessagePurge(_ context.Context, s *Server, c *call, a *protocol.MessagePurgeArgs) (any, error) {
	if a.Folder != "" && a.Folder != protocol.FolderTrash {
		return nil, protocol.Errorf(protocol.CodeInvalidInput,
			"folder %q: only messages in trash can be purged; move them to trash first (message.move to trash)", a.Folder)
	}
	switch {
	case len(a.IDs) > 0 && a.Before != nil:
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "give ids or before, not both")
	case len(a.IDs) == 0 && a.Before == nil:
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "name what to purge: ids, or before (every message of trash received before that time)")
	}
	var out protocol.MessagePurged
	var err error
	if a.Before != nil {
		out.Purged, err = s.store.PurgeBefore(a.Mailbox, protocol.FolderTrash, *a.Before)
	} else {
		if err := checkMessageIDs(a.IDs); err != nil {
			return nil, err
		}
		out.Purged, out.NotFound, err = s.store.Purge(a.Mailbox, protocol.FolderTrash, a.IDs)
	}
	out.Failed, err = s.batchFailures(a.Mailbox, protocol.FolderTrash, err)
	if err != nil {
		return nil, storeErr(err, "folder trash", noFolder(a.Mailbox, protocol.FolderTrash))
	}
	if err := batchAnswer(a.IDs, out.NotFound, out.Failed); len(a.IDs) > 0 && err != nil {
		return nil, err
	}
	if len(a.IDs) > 0 && noneFound(out.NotFound, a.IDs) {
		e := notFoundIn(protocol.MissingMessage, out.NotFound, a.Mailbox, protocol.FolderTrash)
		e.Message += " (only messages in trash can be purged)"
		return nil, e
	}
	out.Purged = nonNil(out.Purged)
	if len(out.Purged) > 0 {
		s.log.Info("purged", "mailbox", a.Mailbox, "messages", len(out.Purged), "by_uid", c.caller.UID)
	}
	return out, nil
}
