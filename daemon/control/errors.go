package control

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// storeFault maps an error the store (or the file system under a mailbox)
// returned to a code and a message an agent can act on, or nil when err is
// not one: only bugs may answer "internal". The message keeps the store's
// words, which name the message or folder concerned.
func storeFault(err error) *protocol.Error {
	switch {
	case errors.Is(err, store.ErrInvalidCursor):
		return protocol.Errorf(protocol.CodeInvalidInput, "%v: %s", err, cursorAdvice)
	case errors.Is(err, store.ErrNoFrontmatter), errors.Is(err, store.ErrBadFrontmatter):
		return protocol.Errorf(protocol.CodeConflict, "%v: this message's Markdown file in your mailbox is damaged (edited by hand?); "+
			"the raw .eml beside it holds the original. Restore or remove the .md file, then retry", err)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, store.ErrNotRegular):
		return protocol.Errorf(protocol.CodeConflict, "%v: something in your mailbox folder is not what mailctl expects (a folder replaced by a file?); "+
			"move it away (mailctl recreates the folder when it next writes there; the operator's `mailctl doctor` names what is wrong), then retry", err)
	case errors.Is(err, store.ErrTooLarge):
		return protocol.Errorf(protocol.CodeTooLarge, "%v: read it in windows (offset, max_chars)", err)
	case errors.Is(err, store.ErrOtherMount):
		return protocol.Errorf(protocol.CodeConflict, "%v: mailctl uses only the store's own file system; unmount it (or move your files into the mailbox), then retry", err)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		// A handler that knows what it looked for answers notFound; this
		// is the rest. The store's cause (a symlink, a file of another
		// owner) is left out: it must read as a missing one.
		what, _, ok := strings.Cut(err.Error(), ": "+store.ErrNotFound.Error())
		if !ok || what == "" {
			what = "what you asked for"
		}
		return protocol.Errorf(protocol.CodeNotFound, "%s not found", what)
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotEmpty), errors.Is(err, store.ErrOwnerMismatch):
		return protocol.Errorf(protocol.CodeConflict, "%v", err)
	case errors.Is(err, fs.ErrPermission):
		return protocol.Errorf(protocol.CodeForbidden, "%v: check the modes of your mailbox folder, or ask the operator (`mailctl doctor` names what is wrong)", err)
	}
	return nil
}

// storeErr maps store errors to protocol errors: what names the object for
// the other errors, and missing is what the request answers when the store
// did not find it.
func storeErr(err error, what string, missing *protocol.Error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return storeFault(err) // there, but not a folder: "not found" would mislead
	case errors.Is(err, store.ErrNotFound):
		return missing
	case errors.Is(err, store.ErrTooLarge):
		// The error names the file; the limits are the store's.
		return protocol.Errorf(protocol.CodeTooLarge, "%s: %v (a message file may have %d MiB, its frontmatter %d MiB): move it out of the folder, or cut it down",
			what, err, store.MaxMessageFile>>20, store.MaxFrontmatter>>20)
	}
	if pe := storeFault(err); pe != nil {
		return pe
	}
	return err
}

// notFound is the one wording of every not_found the daemon answers: what
// was asked for, by the names it was asked for by, where it was looked for,
// and how to see what is there instead, modelled on the queue's "list the
// queue to see yours". The words name no client's command or tool, since the
// protocol does not say who asks: the CLI and the MCP shim add their own
// next step by Missing. Nothing in it tells an object of another user from
// one that does not exist (the store's cause is never quoted), since both
// must answer alike.
func notFound(missing string, names []string, where string) *protocol.Error {
	return &protocol.Error{Code: protocol.CodeNotFound, Missing: missing,
		Message: fmt.Sprintf("no %s %s %s: %s", missingNoun[missing], quoteNames(names), where, listAdvice[missing])}
}

var missingNoun = map[string]string{
	protocol.MissingMailbox: "mailbox", protocol.MissingMessage: "message", protocol.MissingDraft: "draft",
	protocol.MissingHook: "hook", protocol.MissingQueueItem: "queue item", protocol.MissingFolder: "folder",
}

// listAdvice is how to see the objects of each kind a caller has.
var listAdvice = map[string]string{
	protocol.MissingMailbox:   "list your mailboxes to see the ones you own",
	protocol.MissingMessage:   "list the folder to see its messages",
	protocol.MissingDraft:     "list the drafts folder to see its drafts",
	protocol.MissingHook:      "list your hooks to see their names",
	protocol.MissingQueueItem: "list the queue to see yours",
	protocol.MissingFolder:    "list your mailboxes to see their folders",
}

// noFolder is the not_found of a mailbox folder.
func noFolder(mailbox, folder string) *protocol.Error {
	return notFound(protocol.MissingFolder, []string{folder}, "in mailbox "+mailbox)
}

// notFoundIn is notFound for messages or drafts of a mailbox folder.
func notFoundIn(missing string, ids []string, mailbox, folder string) *protocol.Error {
	return notFound(missing, ids, "in "+mailbox+"/"+folder)
}

// quoteNames quotes the names a request gave, at most three of them.
func quoteNames(names []string) string {
	const shown = 3
	q := make([]string, 0, shown+1)
	for i, n := range names {
		if i == shown {
			q = append(q, fmt.Sprintf("%d more", len(names)-shown))
			break
		}
		q = append(q, fmt.Sprintf("%q", n))
	}
	switch len(q) {
	case 0:
		return ""
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
