// Package formats holds the version of each on-disk format mailctl writes
// and the one way they are checked: a format older than this build's is
// migrated at start by its owner, a newer one is refused with a NewerError
// that names both versions and what to run instead, and a stamp that cannot
// be read is a DamagedError. Neither refusal changes anything on disk.
//
// Formats whose files have no room for a version of their own (a directory
// of files: the registry, the mailbox tree) carry a stamp file, written with
// WriteStamp and read with ReadStamp:
//
//	mailctl <kind> format <version>
//	written by mailctl <release>
//
// The queue journal's first line and the index databases' user_version are
// their stamps.
package formats

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mailctl/mailctl/internal/safeio"
)

// The versions this build writes. A format that a release before stamps
// wrote without one is version 1.
const (
	// Config is config.toml's `format` key.
	Config = 1
	// Mailboxes is the layout of state_dir/mailboxes (folders, Markdown
	// and .eml files, attachments directories), stamped in StampName
	// there. Releases before it also kept a per-folder index file in
	// each mailbox, which the daemon removes.
	Mailboxes = 1
	// Registry is the layout of state_dir/registry (one JSON file per
	// mailbox and per hook), stamped in StampName there.
	Registry = 1
	// QueueJournal is the first line of state_dir/queue/journal. Releases
	// before the journal kept one <id>.json and <id>.eml per item, which
	// the daemon moves into the journal.
	QueueJournal = 1
	// InboundJournal is the first line of each segment of
	// state_dir/inbound (the copies accepted and not yet synced).
	InboundJournal = 1
	// RateLimitLog is the first line of state_dir/ratelimit.log, whose
	// lines name each send's mailbox and its owner's uid. Version 1 had no
	// first line and named the mailbox only; the daemon counts its sends
	// for each name's owner at start.
	RateLimitLog = 2
	// Index is the user_version of state_dir/index/index.db (derived
	// data: an older one is rebuilt from the mail). Version 2 keys labels
	// by store.LabelKey (the case folding strings.EqualFold compares by);
	// version 1 lowered them, which for some letters (σ and ς, the Kelvin
	// sign, the long s, İ) filtered otherwise than labels compare.
	Index = 2
	// Deliveries is the user_version of state_dir/index/deliveries.db,
	// beside the index: which deliveries of the last hour were answered.
	// An older one is started again empty. It was the index's version
	// until the two were separated, both 1.
	Deliveries = 1
)

// StampName is the stamp file's name in a directory it describes. It
// starts with a dot, so no mailbox can be named so.
const StampName = ".format"

// The kinds of stamp files: the registry's (at Registry) and the mailbox
// tree's (at Mailboxes). Each is also the name of the directory it stamps
// under the state directory, and in a backup's snapshot.
const (
	KindRegistry  = "registry"
	KindMailboxes = "mailboxes"
)

// maxStamp bounds what ReadStamp reads.
const maxStamp = 4096

// ErrNewer is what errors.Is finds in a NewerError.
var ErrNewer = errors.New("format is newer than this mailctl reads")

// ErrDamaged is what errors.Is finds in a DamagedError.
var ErrDamaged = errors.New("format stamp is damaged")

// Stamp is what a stamp file says.
type Stamp struct {
	Kind    string
	Version int
	// WrittenBy is the release that wrote the stamp; empty if unknown.
	WrittenBy string
}

// NewerError refuses a format newer than this build reads.
type NewerError struct {
	What string // "the registry"
	Path string
	// Found is the version on disk; Reads the newest this build reads.
	Found, Reads int
	// WrittenBy is the release that wrote it, when known.
	WrittenBy string
	// Else is another way out, when there is one ("remove it: the index is
	// rebuilt from the mail").
	Else string
}

// Release is the running build's release, which the errors name; the
// binary sets it at start. Empty: "this mailctl".
var Release string

func (e *NewerError) Error() string {
	release := "this mailctl"
	if Release != "" {
		release = "mailctl " + Release
	}
	what := e.What
	if e.Path != "" {
		what += " " + e.Path
	}
	use := "the newer mailctl that wrote it"
	if e.WrittenBy != "" {
		use = "mailctl " + e.WrittenBy + " (which wrote it) or later"
	}
	msg := fmt.Sprintf("%s is format version %d, and %s reads versions up to %d: run %s, or restore the backup taken before the upgrade to go back to %s",
		what, e.Found, release, e.Reads, use, release)
	if e.Else != "" {
		msg += ", or " + e.Else
	}
	return msg + "; nothing was changed"
}

// Is makes errors.Is(err, ErrNewer) true.
func (e *NewerError) Is(target error) bool { return target == ErrNewer }

// DamagedError refuses a stamp that cannot be read.
type DamagedError struct {
	What, Path string
	// Problem says what is wrong with it.
	Problem string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("the format stamp of %s, %s, is damaged (%s): restore it from the backup; if it is lost and the release you run wrote this state, remove it and start again (it is written anew); nothing was changed",
		e.What, e.Path, e.Problem)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// Check is nil when found is a version this build reads (current or older),
// and a NewerError otherwise.
func Check(what, path string, found, current int, writtenBy string) error {
	if found <= current {
		return nil
	}
	return &NewerError{What: what, Path: path, Found: found, Reads: current, WrittenBy: writtenBy}
}

// ReadStamp reads the stamp file at path, which must be about kind. A
// missing file is an error satisfying errors.Is(err, fs.ErrNotExist); one
// that is not a stamp of kind, a link, or larger than a stamp can be, is a
// DamagedError.
func ReadStamp(path, kind string) (Stamp, error) {
	what := "the " + kind
	data, err := safeio.ReadRegular(path, maxStamp)
	switch {
	case errors.Is(err, safeio.ErrSymlink):
		return Stamp{}, &DamagedError{What: what, Path: path, Problem: "it is a symbolic link"}
	case errors.Is(err, safeio.ErrNotRegular):
		return Stamp{}, &DamagedError{What: what, Path: path, Problem: "it is not a regular file"}
	case errors.Is(err, safeio.ErrTooLarge):
		return Stamp{}, &DamagedError{What: what, Path: path, Problem: fmt.Sprintf("it is larger than %d bytes", maxStamp)}
	case err != nil:
		return Stamp{}, err
	}
	s, problem := ParseStamp(data, kind)
	if problem != "" {
		return Stamp{}, &DamagedError{What: what, Path: path, Problem: problem}
	}
	return s, nil
}

// ParseStamp reads a stamp's text; problem is empty when it is one of kind.
func ParseStamp(data []byte, kind string) (s Stamp, problem string) {
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	prefix := "mailctl " + kind + " format "
	v, ok := strings.CutPrefix(lines[0], prefix)
	if !ok {
		return Stamp{}, fmt.Sprintf("its first line is %q, not %q and a version", clip(lines[0]), prefix)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || v != strconv.Itoa(n) {
		return Stamp{}, fmt.Sprintf("the version %q is not a whole number from 1", clip(v))
	}
	s = Stamp{Kind: kind, Version: n}
	for _, l := range lines[1:] {
		if by, ok := strings.CutPrefix(l, "written by mailctl "); ok && validRelease(by) {
			s.WrittenBy = by
			continue
		}
		// Lines a later release may add are skipped; a line no release
		// writes is damage.
		if l == "" || bytes.IndexFunc([]byte(l), func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
			return Stamp{}, fmt.Sprintf("a line %q no release writes", clip(l))
		}
	}
	return s, ""
}

// Text is a stamp's file content.
func (s Stamp) Text() []byte {
	t := fmt.Sprintf("mailctl %s format %d\n", s.Kind, s.Version)
	if validRelease(s.WrittenBy) {
		t += "written by mailctl " + s.WrittenBy + "\n"
	}
	return []byte(t)
}

// WriteStamp writes the stamp of kind at version, by release, durably.
func WriteStamp(path, kind string, version int, release string) error {
	return safeio.WriteFile(path, Stamp{Kind: kind, Version: version, WrittenBy: release}.Text())
}

// validRelease accepts what a build's version string looks like: a release
// number, a Debian version, "dev".
func validRelease(r string) bool {
	if r == "" || len(r) > 100 {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".+-~_:", c)) {
			return false
		}
	}
	return true
}

// clip shortens what a damaged stamp holds for an error message.
func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// CheckFirstLine looks at the first line of a journal file that does not
// start with its own magic (prefix followed by the version this build
// reads, then a newline). It is nil when the file is no such journal at
// all, or its first line is cut short (both are set aside by the caller),
// a NewerError when a later release wrote it, and a DamagedError when the
// line is the journal's but its version is not a number. Either error
// stops the caller, which changes nothing.
func CheckFirstLine(f io.ReaderAt, size int64, prefix string, reads int, what, path string) error {
	buf := make([]byte, min(size, 64))
	n, _ := f.ReadAt(buf, 0)
	line, _, whole := bytes.Cut(buf[:n], []byte("\n"))
	v, ok := bytes.CutPrefix(line, []byte(prefix))
	if !ok || !whole {
		return nil
	}
	version, err := strconv.Atoi(string(v))
	switch {
	case err != nil || version < 1 || string(v) != strconv.Itoa(version):
		return &DamagedError{What: what, Path: path, Problem: fmt.Sprintf("its first line is %q, not %q and a version", line, prefix)}
	case version > reads:
		return &NewerError{What: what, Path: path, Found: version, Reads: reads}
	}
	return nil
}
