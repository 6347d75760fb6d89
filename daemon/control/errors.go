package control

import (
	"errors"
	"io/fs"
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
	case errors.Is(err, store.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return protocol.Errorf(protocol.CodeNotFound, "%v", err)
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotEmpty), errors.Is(err, store.ErrOwnerMismatch):
		return protocol.Errorf(protocol.CodeConflict, "%v", err)
	case errors.Is(err, fs.ErrPermission):
		return protocol.Errorf(protocol.CodeForbidden, "%v: check the modes of your mailbox folder, or ask the operator (`mailctl doctor` names what is wrong)", err)
	}
	return nil
}

// storeErr maps store errors to protocol errors.
func storeErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return storeFault(err) // there, but not a folder: "not found" would mislead
	case errors.Is(err, store.ErrNotFound):
		return protocol.Errorf(protocol.CodeNotFound, "%s not found", what)
	case errors.Is(err, store.ErrTooLarge):
		return protocol.Errorf(protocol.CodeTooLarge, "%s is too large to return", what)
	}
	if pe := storeFault(err); pe != nil {
		return pe
	}
	return err
}
