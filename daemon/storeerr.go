package daemon

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
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
	case errors.Is(err, store.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return protocol.Errorf(protocol.CodeNotFound, "%v", err)
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrNotEmpty), errors.Is(err, store.ErrOwnerMismatch):
		return protocol.Errorf(protocol.CodeConflict, "%v", err)
	case errors.Is(err, fs.ErrPermission):
		return protocol.Errorf(protocol.CodeForbidden, "%v: check the modes of your mailbox folder, or ask the operator (`mailctl doctor` names what is wrong)", err)
	}
	return nil
}

const cursorAdvice = "a cursor is good only for the listing that returned it (same mailbox, folder and filters) on this daemon run: " +
	"list again without cursor, or pass that listing's next_cursor with the same filters"

// cursorKey seals the cursors this daemon run hands out.
var cursorKey = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

// cursorTag binds a store cursor to the listing it came from, so that a
// cursor reused with other filters (which would silently page through
// other results) or one never issued is refused.
func cursorTag(storeCursor, mailbox, folder string, a *protocol.MessageListArgs) string {
	filters, _ := json.Marshal([]any{mailbox, folder, a.Unread, a.Trusted, a.From, a.Subject, a.Text, a.ThreadID, a.Since, a.Until, a.Label, a.Starred})
	m := hmac.New(sha256.New, cursorKey)
	m.Write([]byte(storeCursor))
	m.Write([]byte{0})
	m.Write(filters)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:12])
}

// sealCursor returns the cursor given to clients.
func sealCursor(storeCursor, mailbox, folder string, a *protocol.MessageListArgs) string {
	if storeCursor == "" {
		return ""
	}
	return storeCursor + "." + cursorTag(storeCursor, mailbox, folder, a)
}

// openCursor checks a client's cursor and returns the store's.
func openCursor(c, mailbox, folder string, a *protocol.MessageListArgs) (string, error) {
	if c == "" {
		return "", nil
	}
	i := strings.LastIndexByte(c, '.')
	if i < 0 || !hmac.Equal([]byte(c[i+1:]), []byte(cursorTag(c[:i], mailbox, folder, a))) {
		return "", protocol.Errorf(protocol.CodeInvalidInput, "cursor %.40q was not issued for this listing: %s", c, cursorAdvice)
	}
	return c[:i], nil
}
