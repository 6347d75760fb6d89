package daemon

import (
	"errors"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// Mailbox quotas. The daemon keeps a usage counter per mailbox: built from
// the files the first time it is asked (so at start, lazily), counted up as
// mail is stored, and built again from the files every usageRescan, since
// the owner may remove files with ordinary tools. It does not depend on the
// store's index.

// usageRescan is how long a mailbox's counted usage is trusted before it is
// counted again from the files.
const usageRescan = 10 * time.Minute

type usageCounter struct {
	mu    sync.Mutex
	boxes map[string]*boxUsage // by mailbox identity
}

type boxUsage struct {
	bytes, messages int64
	counted         time.Time
}

// errMailboxFull is the SMTP and LMTP answer for a mailbox over its quota
// (RFC 3463 4.2.2, mailbox full): the sender retries, and the owner has
// days to make room before it gives up.
var errMailboxFull = &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 2, 2}, Message: "Mailbox full, try again later"}

// countUsage walks a mailbox's tree: every regular file's size, and every
// message file (folder/<id>.md). The owner may plant anything in it, deep
// trees and FIFOs swapped in for directories included: the store's walk
// never follows a link, never opens anything but a directory, and does a
// constant amount of work per entry however deep the tree.
func countUsage(dir string) (bytes, messages int64, err error) {
	d, err := store.OpenDir(dir)
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	return countUsageOf(d)
}

// countUsageOf is countUsage of the open mailbox directory d. What is
// mounted inside it is not the mailbox's, and not counted (the walk never
// crosses a mount).
func countUsageOf(d *store.Dir) (bytes, messages int64, err error) {
	err = d.Walk(func(depth int, name string, st *unix.Stat_t) {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return
		}
		bytes += st.Size
		if depth == 1 && strings.HasSuffix(name, ".md") && !strings.HasPrefix(name, ".") {
			messages++
		}
	})
	return bytes, messages, err
}

// usage is a mailbox's counted usage, counted again when older than
// usageRescan.
func (d *Daemon) usage(name string) (bytes, messages int64) {
	m, ok := d.lookupMailbox(name)
	if !ok {
		return 0, 0
	}
	now := d.now()
	u := &d.usageCount
	u.mu.Lock()
	if u.boxes == nil {
		u.boxes = map[string]*boxUsage{}
	}
	b := u.boxes[m.ID]
	if b != nil && now.Sub(b.counted) < usageRescan && !now.Before(b.counted) {
		defer u.mu.Unlock()
		return b.bytes, b.messages
	}
	u.mu.Unlock()
	// Counted outside the lock: a large mailbox does not hold up others.
	mb, err := d.store.OpenMailboxDir(name)
	if err == nil {
		bytes, messages, err = countUsageOf(mb)
		mb.Close()
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, store.ErrNotFound) {
		d.log.Warn("counting a mailbox's usage", "mailbox", name, "err", err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.boxes[m.ID] = &boxUsage{bytes: bytes, messages: messages, counted: now}
	return bytes, messages
}

// addUsage counts what was just stored in a mailbox, until the next count
// from the files.
func (d *Daemon) addUsage(name string, bytes, messages int64) {
	m, ok := d.lookupMailbox(name)
	if !ok {
		return
	}
	u := &d.usageCount
	u.mu.Lock()
	defer u.mu.Unlock()
	if b := u.boxes[m.ID]; b != nil {
		b.bytes += bytes
		b.messages += messages
	}
}

// quota is a mailbox's quota and where it is set: root's setting in the
// registry, else the mailbox's table in the config, else [storage].
func (d *Daemon) quota(name string) (bytes, messages int64, source string) {
	cfg := d.cfg()
	bytes, messages, source = cfg.Storage.QuotaBytes, cfg.Storage.QuotaMessages, "default"
	if mc := cfg.Mailbox(name); mc != nil {
		if mc.QuotaBytes != nil || mc.QuotaMessages != nil {
			source = "config"
		}
		if mc.QuotaBytes != nil {
			bytes = *mc.QuotaBytes
		}
		if mc.QuotaMessages != nil {
			messages = *mc.QuotaMessages
		}
		return bytes, messages, source
	}
	if r, ok := d.reg.Mailbox(name); ok && (r.QuotaBytes != nil || r.QuotaMessages != nil) {
		source = "mailbox"
		if r.QuotaBytes != nil {
			bytes = *r.QuotaBytes
		}
		if r.QuotaMessages != nil {
			messages = *r.QuotaMessages
		}
	}
	return bytes, messages, source
}

// mailboxUsage is a mailbox's usage against its quota. adding is what a
// new message would add: a mailbox is over quota when it is at or past a
// limit, or the new message would take it past.
func (d *Daemon) mailboxUsage(name string, adding int64) protocol.MailboxUsage {
	qb, qm, source := d.quota(name)
	u := protocol.MailboxUsage{QuotaBytes: qb, QuotaMessages: qm, QuotaSource: source}
	u.Bytes, u.Messages = d.usage(name)
	u.OverQuota = qb > 0 && u.Bytes+adding > qb || qm > 0 && u.Messages >= qm
	return u
}

// checkQuota is nil when mailbox may take a message of size bytes (0: not
// known yet, at RCPT), else the SMTP answer, logged.
func (d *Daemon) checkQuota(mailbox string, size int64) error {
	if qb, qm, _ := d.quota(mailbox); qb == 0 && qm == 0 {
		return nil // no quota: no need to count (the default)
	}
	u := d.mailboxUsage(mailbox, size)
	if !u.OverQuota {
		return nil
	}
	d.log.Info("mailbox over quota: mail deferred", "mailbox", mailbox, "bytes", u.Bytes, "messages", u.Messages,
		"quota_bytes", u.QuotaBytes, "quota_messages", u.QuotaMessages, "size", size)
	return errMailboxFull
}

// sendQuotaError is the error a send from an over-quota mailbox gets: its
// sent copy would add to what is already too much.
func (d *Daemon) sendQuotaError(mailbox string) error {
	if qb, qm, _ := d.quota(mailbox); qb == 0 && qm == 0 {
		return nil
	}
	u := d.mailboxUsage(mailbox, 0)
	if !u.OverQuota {
		return nil
	}
	return protocol.Errorf(protocol.CodeUnavailable, "mailbox %q is over its quota (%s of %s, %d of %d messages; 0 is no limit): "+
		"remove mail (move it to trash, then purge), or ask the operator to raise the quota", mailbox,
		humanBytes(uint64(u.Bytes)), humanBytes(uint64(u.QuotaBytes)), u.Messages, u.QuotaMessages)
}
