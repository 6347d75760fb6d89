// Package bounce gives every outbound message an envelope sender that only
// this daemon can produce and check, in the manner of VERP and BATV: the
// mailbox's address with a tag that is a keyed MAC of the sent message's
// identity. A delivery status notification is applied to a sent message
// only when it comes back to that message's tag; a DSN sent to the plain
// address, or to a tag that does not verify, is ordinary mail.
package bounce

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailctl/mailctl/internal/safeio"
)

// TagPrefix starts the +tag of a return path.
const TagPrefix = "bounce-"

// keyLen is the size of the MAC key; macLen how many bytes of the MAC the
// tag carries (80 bits: guessing one takes 2^80 tries).
const (
	keyLen = 32
	macLen = 10
)

// maxKeyFile bounds what is read of the key file: more than a key, so
// that a wrong one is refused with its length.
const maxKeyFile = 1024

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Key signs and checks return paths.
type Key struct{ k []byte }

// LoadKey reads the key at path, creating it (root-only, 0600) with fresh
// random bytes when it does not exist. The same key must survive restarts,
// or bounces of mail sent before one would be taken for ordinary mail.
func LoadKey(path string) (*Key, error) {
	data, err := safeio.ReadRegular(path, maxKeyFile)
	if errors.Is(err, os.ErrNotExist) {
		k := make([]byte, keyLen)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		if err := writeKey(path, k); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("bounce key %s: %w", path, err)
		}
		data, err = safeio.ReadRegular(path, maxKeyFile) // another process may have won the race
	}
	if err != nil {
		return nil, fmt.Errorf("bounce key %s: %w", path, err)
	}
	if len(data) != keyLen {
		return nil, fmt.Errorf("bounce key %s: %d bytes, want %d; remove it to make a new one (bounces of mail already sent are then ordinary mail)", path, len(data), keyLen)
	}
	return &Key{k: data}, nil
}

func writeKey(path string, k []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	// A link, unlike a rename, never replaces a key another process wrote.
	return safeio.WriteFile(path, k, safeio.Options{NoReplace: true})
}

// boxLen is how many letters of a tag name the mailbox it was made for:
// 20 bits of a MAC of the mailbox's identity, enough that a tag of a
// mailbox deleted since is refused for one made again under the name
// (one in a million passes, and is then ordinary mail, as before).
const boxLen = 4

// tagLen and legacyTagLen are the lengths of a tag after TagPrefix: the
// mailbox's letters and the message's MAC, or (return paths given before
// the mailbox's letters were) the MAC alone.
const (
	tagLen       = boxLen + 16
	legacyTagLen = 16
)

// mac is the MAC of one sent message: its mailbox's identity and its id.
func (k *Key) mac(mailboxID, sentID string) string {
	m := hmac.New(sha256.New, k.k)
	fmt.Fprintf(m, "mailctl-bounce\x00%s\x00%s", mailboxID, sentID)
	return enc.EncodeToString(m.Sum(nil)[:macLen])
}

// box is the letters that name a mailbox's identity in its tags.
func (k *Key) box(mailboxID string) string {
	m := hmac.New(sha256.New, k.k)
	fmt.Fprintf(m, "mailctl-bounce-mailbox\x00%s", mailboxID)
	return enc.EncodeToString(m.Sum(nil)[:3])[:boxLen]
}

// tag is one sent message's tag: its mailbox's letters, then its MAC.
func (k *Key) tag(mailboxID, sentID string) string {
	return TagPrefix + k.box(mailboxID) + k.mac(mailboxID, sentID)
}

// ReturnPath is the envelope sender of a sent message: the mailbox's
// address with the message's tag after a '+'.
func (k *Key) ReturnPath(address, mailboxID, sentID string) string {
	return withTag(address, k.tag(mailboxID, sentID))
}

// LegacyReturnPath is the return path releases before tags named their
// mailbox gave the message: what a sent copy of theirs, which does not
// record its envelope, went out with.
func (k *Key) LegacyReturnPath(address, mailboxID, sentID string) string {
	return withTag(address, TagPrefix+k.mac(mailboxID, sentID))
}

// PendingReturnPath is the form of address's return paths with mac in
// place of a message's MAC: what a dry run reports, since the MAC is of
// the sent id, which is given only when the message is stored.
func PendingReturnPath(address, mac string) string {
	return withTag(address, TagPrefix+mac)
}

// withTag is address with tag after a '+'.
func withTag(address, tag string) string {
	at := strings.LastIndexByte(address, '@')
	if at < 0 {
		return address
	}
	return address[:at] + "+" + tag + address[at:]
}

// Valid reports whether tag (the +tag of the address a DSN came to) is
// the one this daemon gave the sent message sentID of the mailbox with
// identity mailboxID.
func (k *Key) Valid(tag, mailboxID, sentID string) bool {
	tag = strings.ToLower(tag)
	if len(tag) == len(TagPrefix)+legacyTagLen {
		return hmac.Equal([]byte(tag), []byte(TagPrefix+k.mac(mailboxID, sentID)))
	}
	return hmac.Equal([]byte(tag), []byte(k.tag(mailboxID, sentID)))
}

// OtherMailbox reports whether tag is a return path's tag made for another
// mailbox than the one with identity mailboxID: one deleted since, whose
// name someone has made again. Mail to it is refused, so that what comes
// back for the first owner's messages (bounces, auto-replies, which quote
// them) never reaches the second. A tag of another shape, or one given
// before tags named their mailbox, is not known to be another's.
func (k *Key) OtherMailbox(tag, mailboxID string) bool {
	tag = strings.ToLower(tag)
	rest, ok := strings.CutPrefix(tag, TagPrefix)
	if !ok || len(rest) != tagLen {
		return false
	}
	return !hmac.Equal([]byte(rest[:boxLen]), []byte(k.box(mailboxID)))
}
