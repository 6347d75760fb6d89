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
	"syscall"

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

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Key signs and checks return paths.
type Key struct{ k []byte }

// LoadKey reads the key at path, creating it (root-only, 0600) with fresh
// random bytes when it does not exist. The same key must survive restarts,
// or bounces of mail sent before one would be taken for ordinary mail.
func LoadKey(path string) (*Key, error) {
	data, err := readKey(path)
	if errors.Is(err, os.ErrNotExist) {
		k := make([]byte, keyLen)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		if err := writeKey(path, k); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("bounce key %s: %w", path, err)
		}
		data, err = readKey(path) // another process may have won the race
	}
	if err != nil {
		return nil, fmt.Errorf("bounce key %s: %w", path, err)
	}
	if len(data) != keyLen {
		return nil, fmt.Errorf("bounce key %s: %d bytes, want %d; remove it to make a new one (bounces of mail already sent are then ordinary mail)", path, len(data), keyLen)
	}
	return &Key{k: data}, nil
}

func readKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > 1024 {
		return nil, errors.New("not a small regular file")
	}
	b := make([]byte, st.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

func writeKey(path string, k []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	// A link, unlike a rename, never replaces a key another process wrote.
	return safeio.WriteFile(path, k, safeio.Options{NoReplace: true})
}

// tag is the MAC of one sent message: its mailbox's identity and its id.
func (k *Key) tag(mailboxID, sentID string) string {
	m := hmac.New(sha256.New, k.k)
	fmt.Fprintf(m, "mailctl-bounce\x00%s\x00%s", mailboxID, sentID)
	return TagPrefix + enc.EncodeToString(m.Sum(nil)[:macLen])
}

// ReturnPath is the envelope sender of a sent message: the mailbox's
// address with the message's tag after a '+'.
func (k *Key) ReturnPath(address, mailboxID, sentID string) string {
	return withTag(address, k.tag(mailboxID, sentID))
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
	return hmac.Equal([]byte(strings.ToLower(tag)), []byte(k.tag(mailboxID, sentID)))
}
