package queue

import (
	"crypto/sha256"
	"encoding/hex"
)

// IdempotencyDir is the directory, in the queue directory, of the records
// of which sent message each idempotency key made: one file a key, named
// by IdempotencyFile. A backup carries them with the journal, whose items
// they name.
const IdempotencyDir = "idempotency"

// IdempotencyFile is the name of the record of key, used on mailbox, in
// IdempotencyDir. The key is scoped to the mailbox's identity (mailboxID,
// or its name when it has none), so that a mailbox created later under the
// same name never answers with an earlier owner's message.
func IdempotencyFile(mailbox, mailboxID, key string) string {
	scope := mailbox
	if mailboxID != "" {
		scope = "id:" + mailboxID
	}
	sum := sha256.Sum256([]byte(scope + "\x00" + key))
	return hex.EncodeToString(sum[:]) + ".json"
}
