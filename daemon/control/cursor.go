package control

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/mailctl/mailctl/protocol"
)

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
	filters, _ := json.Marshal([]any{mailbox, folder, a.Unread, a.Trusted, a.From, a.Subject, a.Text, a.ThreadID, a.Since, a.Until, a.Label, a.Starred, a.Query})
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
