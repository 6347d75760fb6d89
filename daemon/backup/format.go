// Package backup reads and writes mailctl's backup archives: a tar file
// (gzip-compressed or not) holding a manifest, the config, the DKIM keys,
// the registry, the queue journal and its idempotency records, the send
// rate limiter's log, the bounce key and every mailbox's messages, and restores one on another host, mapping mailbox owners by
// user name. An archive is input like any other: every entry is checked
// (names, types, sizes) before anything of it is written.
package backup

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailctl/mailctl/store"
)

// Format and Version name the archive layout the manifest declares. A
// reader refuses a newer version, naming both. Version 2 added the
// manifest's formats; version 3 the idempotency records and the send log
// (an archive of an earlier version has neither, and restores without
// them).
const (
	Format  = "mailctl-backup"
	Version = 3
)

// prefix starts every entry name, so that unpacking an archive by hand
// puts everything in one directory.
const prefix = "mailctl-backup/"

// Entry names below prefix.
const (
	nameManifest  = "manifest.json"
	nameConfig    = "config.toml"
	nameBounceKey = "state/bounce.key"
	nameJournal   = "state/queue/journal"
	nameRateLog   = "state/ratelimit.log"
	dirIdem       = "state/queue/idempotency/"
	dirDKIM       = "dkim/"
	dirRegMboxes  = "state/registry/mailboxes/"
	dirRegHooks   = "state/registry/hooks/"
	dirMailboxes  = "state/mailboxes/"
)

// Limits on what an archive may hold. A restore refuses an archive past
// any of them before writing the entry concerned.
const (
	MaxManifest   = 16 << 20
	MaxConfig     = 1 << 20
	MaxKey        = 64 << 10
	MaxKeys       = 64
	MaxRegistry   = 1 << 20
	MaxJournal    = 64 << 30
	MaxIdemRecord = 64 << 10  // one idempotency record
	MaxRateLog    = 256 << 20 // the send log: a day of sends
	MaxFile       = 1 << 30   // one message, raw copy or attachment
	MaxEntries    = 10_000_000
	MaxNameLen    = 1024 // a whole entry name
	// MaxListed bounds the names a restore's result lists of what it left
	// out; its counts are whole.
	MaxListed     = 100
	maxComponent  = 255
	maxAttachPart = 2 // folder/id.attachments/name: components below a folder at most
)

// Manifest is the archive's first entry: what it holds and whose it is.
type Manifest struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// CreatedAt is when the archive was written; CutAt when the daemon's
	// snapshot began (every message acknowledged before it is inside).
	CreatedAt time.Time `json:"created_at"`
	CutAt     time.Time `json:"cut_at"`
	Host      string    `json:"host"`
	Mailctl   string    `json:"mailctl_version"`
	// Mailboxes are every mailbox in the archive with its owner's user
	// name, by which a restore finds the owner on the new host.
	Mailboxes []MailboxOwner `json:"mailboxes"`
	// Users names every uid the registry's files and the send log mention
	// (owners, creators, senders), so that a restore can renumber them.
	Users      map[string]string `json:"users"`
	QueueItems int               `json:"queue_items"`
	QueueBytes int64             `json:"queue_bytes"`
	// Formats are the format stamps of the state the archive's files were
	// in, by kind (formats.KindRegistry, formats.KindMailboxes), as the
	// daemon that took the snapshot had them. A restore stamps the files
	// so. Missing (a version 1 archive, or a daemon that did not put its
	// stamps in the snapshot): version 1, see Restore.
	Formats map[string]FormatStamp `json:"formats,omitempty"`
}

// FormatStamp is one stamp of Manifest.Formats.
type FormatStamp struct {
	Version int `json:"version"`
	// WrittenBy is the release that wrote the stamp, when known.
	WrittenBy string `json:"written_by,omitempty"`
}

// MailboxOwner is one mailbox of the archive and its owner on the host it
// was backed up on. Owner is empty when that uid had no user name there.
type MailboxOwner struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	UID      uint32 `json:"uid"`
	GID      uint32 `json:"gid"`
	Messages int    `json:"messages"`
}

// ownerKey is how --map-owner names an owner: its user name, or #uid for
// one that had none.
func (m MailboxOwner) ownerKey() string {
	if m.Owner != "" {
		return m.Owner
	}
	return "#" + strconv.FormatUint(uint64(m.UID), 10)
}

// Kind says what an archive entry is.
type Kind int

// The kinds of entries.
const (
	KindManifest Kind = iota
	KindConfig
	KindDKIM
	KindBounceKey
	KindRegistryMailbox
	KindRegistryHook
	KindJournal
	KindMailboxFile
	KindIdempotency
	KindRateLog
)

// Entry is one checked archive entry.
type Entry struct {
	Kind Kind
	Name string // the whole entry name
	Size int64
	// For KindDKIM, KindIdempotency and the registry kinds: the file's name. For
	// KindMailboxFile: the mailbox, and the path below it (folder, then
	// the file or an attachment folder and its file).
	File    string
	Mailbox string
	Path    []string
}

// classify checks an entry's name and size and says what it is. Only the
// names this package writes are accepted: nothing can address a path
// outside the place its kind goes to.
func classify(name string, size int64) (*Entry, error) {
	if len(name) > MaxNameLen {
		return nil, fmt.Errorf("entry name is %d bytes long, the maximum is %d", len(name), MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return nil, fmt.Errorf("entry name %q is not valid UTF-8", name)
	}
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return nil, fmt.Errorf("entry %q is not under %s", name, prefix)
	}
	e := &Entry{Name: name, Size: size}
	limit := int64(0)
	switch {
	case rest == nameManifest:
		e.Kind, limit = KindManifest, MaxManifest
	case rest == nameConfig:
		e.Kind, limit = KindConfig, MaxConfig
	case rest == nameBounceKey:
		e.Kind, limit = KindBounceKey, MaxKey
	case rest == nameJournal:
		e.Kind, limit = KindJournal, MaxJournal
	case rest == nameRateLog:
		e.Kind, limit = KindRateLog, MaxRateLog
	case strings.HasPrefix(rest, dirIdem):
		e.Kind, limit, e.File = KindIdempotency, MaxIdemRecord, strings.TrimPrefix(rest, dirIdem)
		if !idemFileName(e.File) {
			return nil, fmt.Errorf("entry %q: not an idempotency record's name", name)
		}
	case strings.HasPrefix(rest, dirDKIM):
		e.Kind, limit, e.File = KindDKIM, MaxKey, strings.TrimPrefix(rest, dirDKIM)
		if err := fileName(e.File); err != nil {
			return nil, fmt.Errorf("entry %q: %w", name, err)
		}
	case strings.HasPrefix(rest, dirRegMboxes), strings.HasPrefix(rest, dirRegHooks):
		e.Kind, limit = KindRegistryMailbox, MaxRegistry
		e.File = strings.TrimPrefix(rest, dirRegMboxes)
		if strings.HasPrefix(rest, dirRegHooks) {
			e.Kind, e.File = KindRegistryHook, strings.TrimPrefix(rest, dirRegHooks)
		}
		if err := fileName(e.File); err != nil || !strings.HasSuffix(e.File, ".json") {
			return nil, fmt.Errorf("entry %q: not a registry file name", name)
		}
	case strings.HasPrefix(rest, dirMailboxes):
		e.Kind, limit = KindMailboxFile, MaxFile
		parts := strings.Split(strings.TrimPrefix(rest, dirMailboxes), "/")
		if len(parts) < 3 || len(parts) > 2+maxAttachPart {
			return nil, fmt.Errorf("entry %q: a mailbox file is mailbox/folder/file or mailbox/folder/id.attachments/file", name)
		}
		e.Mailbox, e.Path = parts[0], parts[1:]
		if err := store.ValidMailboxName(e.Mailbox); err != nil {
			return nil, fmt.Errorf("entry %q: %w", name, err)
		}
		if err := store.ValidFolder(e.Path[0]); err != nil {
			return nil, fmt.Errorf("entry %q: %w", name, err)
		}
		for _, p := range e.Path[1:] {
			if err := fileName(p); err != nil {
				return nil, fmt.Errorf("entry %q: %w", name, err)
			}
		}
		if len(e.Path) == 3 && !strings.HasSuffix(e.Path[1], ".attachments") {
			return nil, fmt.Errorf("entry %q: only a message's attachment folder may be inside a folder", name)
		}
	default:
		return nil, fmt.Errorf("entry %q is not part of a mailctl backup", name)
	}
	if size < 0 || size > limit {
		return nil, fmt.Errorf("entry %q is %d bytes, the maximum for it is %d", name, size, limit)
	}
	return e, nil
}

// idemFileName accepts the names queue.IdempotencyFile makes: 64 lower-case
// hex digits and ".json".
func idemFileName(n string) bool {
	hex, ok := strings.CutSuffix(n, ".json")
	if !ok || len(hex) != 64 {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}

// fileName accepts one path component that is not hidden, not a temporary
// file's, and holds no separator or NUL.
func fileName(n string) error {
	switch {
	case n == "" || n == "." || n == "..":
		return fmt.Errorf("file name %q is empty or a directory reference", n)
	case len(n) > maxComponent:
		return fmt.Errorf("file name is %d bytes long, the maximum is %d", len(n), maxComponent)
	case n[0] == '.':
		return fmt.Errorf("file name %q starts with a dot", n)
	case strings.ContainsAny(n, "/\\\x00"):
		return fmt.Errorf("file name %q contains a separator or NUL", n)
	}
	for _, r := range n {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("file name %q contains a control character", n)
		}
	}
	return nil
}
