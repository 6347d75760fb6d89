package store

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// ThreadID derives the thread identifier: the first 16 hex characters of the
// SHA-256 of the thread's root Message-ID, which is the first References
// entry, else In-Reply-To, else the message's own Message-ID. A message with
// none of them hashes from, date and subject so that it still gets a stable
// id of its own.
func ThreadID(messageID string, references []string, inReplyTo, from string, date time.Time, subject string) string {
	var firstRef string
	if len(references) > 0 {
		firstRef = references[0]
	}
	root := cmp.Or(firstRef, inReplyTo, messageID)
	if root == "" {
		inner := sha256.Sum256([]byte(from + "\x00" + date.UTC().Format(time.RFC3339) + "\x00" + subject))
		root = hex.EncodeToString(inner[:])
	}
	sum := sha256.Sum256([]byte(root))
	return hex.EncodeToString(sum[:])[:16]
}
