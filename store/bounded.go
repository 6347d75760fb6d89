package store

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// A mailbox's files are its owner's: any of them may be swapped for a
// huge (sparse) file at any time. Every read of one is bounded before it
// starts: the file is opened without following a symlink, its fstat says
// what it is (a regular file of the owner) and how large, a file past the
// bound is refused, and what the read will hold is charged (Charge) before
// a byte is read. Changing a message's frontmatter reads the frontmatter
// only and copies the body from the old file to the new one.

// Charge is asked, before a read of a mailbox file starts, for the bytes
// the read will hold (known from the file's fstat); it may refuse with an
// error, which the read then returns. release gives them back once the
// bytes are dropped. The control socket charges its caller's memory budget.
type Charge func(n int64) (release func(), err error)

// Charged is the store for one caller whose reads of mailbox files are
// charged to its Charge.
type Charged struct {
	s      *Store
	charge Charge
}

// Charged returns the store whose reads are charged to c (nil: to no one).
func (s *Store) Charged(c Charge) Charged { return Charged{s: s, charge: c} }

// take charges n bytes, or nothing when there is no Charge.
func (c Charged) take(n int64) (func(), error) {
	if c.charge == nil || n <= 0 {
		return func() {}, nil
	}
	return c.charge(n)
}

// frontmatterCost is what reading the frontmatter of a file of size bytes
// holds: the read buffer, the frontmatter's bytes and what they decode to.
func frontmatterCost(size int64) int64 { return readBuffer + 2*min(size, MaxFrontmatter) }

// readBuffer is the buffer a message file is read through.
const readBuffer = 64 << 10

// msgFile is a message's Markdown file open for a bounded read: its
// frontmatter read and decoded, the rest (the body) still to be read.
type msgFile struct {
	f       *os.File
	br      *bufio.Reader
	m       *Message
	release func()
}

// openMessage opens id's Markdown file (a regular file of uid of at most
// MaxMessageFile bytes, checked on the descriptor), charges the reading of
// its frontmatter and reads it. A missing, foreign or planted file is
// ErrNotFound, as readMessage has it.
func (d *Dir) openMessage(id string, uid int, take func(int64) (func(), error)) (*msgFile, error) {
	f, err := d.openOwned(id+".md", MaxMessageFile, uid)
	if err != nil {
		return nil, notFound("message "+id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	release, err := take(frontmatterCost(fi.Size()))
	if err != nil {
		f.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(f, readBuffer)
	m, err := readFrontmatter(br)
	if err != nil {
		f.Close()
		release()
		if errors.Is(err, ErrTooLarge) {
			return nil, &os.PathError{Op: "read", Path: d.join(id + ".md"), Err: err}
		}
		return nil, fmt.Errorf("message %s: %w", id, err)
	}
	m.ID = id // the file name is the id, whatever a hand edit says
	return &msgFile{f: f, br: br, m: m, release: release}, nil
}

// Close closes the file and gives back what reading it was charged.
func (mf *msgFile) Close() {
	mf.f.Close()
	mf.release()
}

// bodyHead is the start of the body, as much as the index's snippet needs
// (the index reads no more when it loads a folder).
func (mf *msgFile) bodyHead() string {
	b, _ := mf.br.Peek(indexHead)
	return string(b)
}

// rest is the body, still to be read.
func (mf *msgFile) rest() io.Reader { return mf.br }

// Header reads a message's frontmatter only, whatever the size of its body.
func (c Charged) Header(mailbox, folder, id string) (*Message, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	mb, d, done, err := c.s.openFolder(mailbox, folder, is(id))
	if err != nil {
		return nil, err
	}
	defer done()
	mf, err := d.openMessage(id, mb.uid, c.take)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	return mf.m, nil
}

// Header is Charged.Header charged to no one.
func (s *Store) Header(mailbox, folder, id string) (*Message, error) {
	return s.Charged(nil).Header(mailbox, folder, id)
}

// LimitError is a file refused for its size before it was read.
type LimitError struct {
	Path  string // the file (for attachments: the one that went past the limit)
	What  string // "file", "attachments" or "attachment count"
	Size  int64  // its size (attachments: all of them, up to this one; attachment count: how many)
	Limit int64
}

func (e *LimitError) Error() string {
	if e.What == "attachment count" {
		return fmt.Sprintf("%s lists %d attachments, over the limit of %d", e.Path, e.Size, e.Limit)
	}
	if e.What == "attachments" {
		return fmt.Sprintf("the attachments come to %d bytes with %s, over the %d-byte limit", e.Size, e.Path, e.Limit)
	}
	return fmt.Sprintf("%s is %d bytes, over the %d-byte limit", e.Path, e.Size, e.Limit)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// DraftLimits bound what ReadDraft reads: the Markdown file, all the
// attachments together, and how many attachments it lists. Zero (no limit
// set) is the store's own bound, MaxMessageFile, MaxDraftAttachmentBytes
// and MaxDraftAttachments.
type DraftLimits struct {
	File, Attachments int64
	Count             int
}

// MaxDraftAttachments bounds how many attachments a draft may list. Each is
// held open until all are sized, so the count is refused before any is
// opened: a frontmatter listing one empty file thousands of times would
// otherwise take that many descriptors.
const MaxDraftAttachments = 1000

// Draft is a message read whole, with its attachments: what sending a
// draft needs.
type Draft struct {
	Message     *Message
	Body        string
	Attachments []AttachmentData
	// Digest names what was read: the Markdown file's bytes and each
	// attachment's, in the order the frontmatter lists them (which names
	// them and their types). The same content has the same digest in
	// whatever files it is, a copy or a restore on another host, whose
	// Version differs (DraftDigest).
	Digest string
}

// ReadDraft reads a message file and the attachments its frontmatter lists
// (from its own attachment folder only), every file checked and sized with
// fstat and the whole charged before a byte is read: a file, or the
// attachments together, past lim is a *LimitError. release gives back the
// charge once the caller has done with the draft.
func (c Charged) ReadDraft(mailbox, folder, id string, lim DraftLimits) (dr *Draft, release func(), err error) {
	if err := ValidID(id); err != nil {
		return nil, nil, err
	}
	mb, d, done, err := c.s.openFolder(mailbox, folder, is(id))
	if err != nil {
		return nil, nil, err
	}
	defer done()
	f, st, err := openMessageFile(d, mb, id)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if lim.File <= 0 {
		lim.File = MaxMessageFile
	}
	if lim.Attachments <= 0 {
		lim.Attachments = MaxDraftAttachmentBytes
	}
	if file := min(lim.File, MaxMessageFile); st.Size > file {
		return nil, nil, &LimitError{Path: d.join(id + ".md"), What: "file", Size: st.Size, Limit: file}
	}
	// The frontmatter says which attachments there are; it is read (and
	// charged) first, bounded like any frontmatter.
	charged, err := c.take(frontmatterCost(st.Size))
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			charged() // the results are nil on an error
		}
	}()
	m, err := readFrontmatter(bufio.NewReaderSize(f, readBuffer))
	if err != nil {
		return nil, nil, fmt.Errorf("message %s: %w", id, err)
	}
	if lim.Count <= 0 {
		lim.Count = MaxDraftAttachments
	}
	atts, err := openAttachments(d, mb.uid, id, m, min(lim.Attachments, MaxDraftAttachmentBytes), min(lim.Count, MaxDraftAttachments))
	if err != nil {
		return nil, nil, err
	}
	defer atts.close()
	more, err := c.take(st.Size + atts.size)
	if err != nil {
		return nil, nil, err
	}
	first := charged
	charged = func() { first(); more() }
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	data, err := readUpTo(f, nil, st.Size, st.Size, d.join(id+".md"))
	if err != nil {
		return nil, nil, err
	}
	m, body, err := parseForIndex(data)
	if err != nil {
		return nil, nil, fmt.Errorf("message %s: %w", id, err)
	}
	m.ID = id
	// The attachments read are those listed when the frontmatter was first
	// read; an edit in between is seen by the caller's version check.
	out, err := atts.read()
	if err != nil {
		return nil, nil, err
	}
	dd := newDraftDigest()
	dd.add(data)
	for _, a := range out {
		dd.add(a.Data)
	}
	return &Draft{Message: m, Body: body, Attachments: out, Digest: dd.String()}, charged, nil
}

// openMessageFile opens message id's Markdown file in d, which must be
// its mailbox's owner's; anything else is the message not found.
func openMessageFile(d *Dir, mb *mailbox, id string) (*os.File, unix.Stat_t, error) {
	f, st, err := d.OpenRegular(id + ".md")
	if err == nil {
		if err = checkOwner(&st, mb.uid); err != nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, st, notFound("message "+id, err)
	}
	return f, st, nil
}

// DraftDigest is the Digest ReadDraft gives the message as it is now,
// within the store's own bounds. Each file is hashed as it is read, a
// buffer at a time: nothing of it is held, so nothing is charged.
func (s *Store) DraftDigest(mailbox, folder, id string) (string, error) {
	if err := ValidID(id); err != nil {
		return "", err
	}
	mb, d, done, err := s.openFolder(mailbox, folder, is(id))
	if err != nil {
		return "", err
	}
	defer done()
	f, st, err := openMessageFile(d, mb, id)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if st.Size > MaxMessageFile {
		return "", &LimitError{Path: d.join(id + ".md"), What: "file", Size: st.Size, Limit: MaxMessageFile}
	}
	m, err := readFrontmatter(bufio.NewReaderSize(f, readBuffer))
	if err != nil {
		return "", fmt.Errorf("message %s: %w", id, err)
	}
	atts, err := openAttachments(d, mb.uid, id, m, MaxDraftAttachmentBytes, MaxDraftAttachments)
	if err != nil {
		return "", err
	}
	defer atts.close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	dd := newDraftDigest()
	if err := dd.addFrom(f, st.Size, d.join(id+".md")); err != nil {
		return "", err
	}
	for i, af := range atts.files {
		if err := dd.addFrom(af, atts.sizes[i], af.Name()); err != nil {
			return "", fmt.Errorf("attachment %q: %w", atts.list[i].Path, err)
		}
	}
	return dd.String(), nil
}

// draftDigest hashes a draft's files in order: the hash of each, so that
// where one ends and the next begins is part of what is hashed.
type draftDigest struct{ h hash.Hash }

func newDraftDigest() draftDigest {
	h := sha256.New()
	io.WriteString(h, "mailctl draft 1\n")
	return draftDigest{h: h}
}

func (dd draftDigest) add(part []byte) {
	sum := sha256.Sum256(part)
	dd.h.Write(sum[:])
}

// addFrom adds what f holds from where it is, no more than max bytes, as
// readUpTo reads it: a file grown past max is an error.
func (dd draftDigest) addFrom(f *os.File, max int64, path string) error {
	ph := sha256.New()
	n, err := io.Copy(ph, io.LimitReader(f, max+1))
	if err != nil {
		return err
	}
	if n > max {
		return &os.PathError{Op: "read", Path: path, Err: ErrTooLarge}
	}
	dd.h.Write(ph.Sum(nil))
	return nil
}

func (dd draftDigest) String() string { return hex.EncodeToString(dd.h.Sum(nil)) }

// openedAttachments are a message's attachment files, open and sized.
type openedAttachments struct {
	dir   *Dir
	list  []Attachment
	files []*os.File
	sizes []int64
	size  int64
}

// openAttachments opens the attachments m lists, from id's attachment
// folder only (a path elsewhere is refused), each a regular file of uid,
// and refuses them when together they pass max bytes, before any is read.
// More than count of them is refused before any is opened.
func openAttachments(d *Dir, uid int, id string, m *Message, max int64, count int) (*openedAttachments, error) {
	oa := &openedAttachments{}
	if len(m.Attachments) == 0 {
		return oa, nil
	}
	if len(m.Attachments) > count {
		return nil, &LimitError{Path: d.join(id + ".md"), What: "attachment count", Size: int64(len(m.Attachments)), Limit: int64(count)}
	}
	// A mount on the attachment folder or on one of its files (an
	// operator's, or an owner's FUSE file system) is not the message's:
	// OpenDir and openFile refuse it (ErrOtherMount) without opening it.
	ad, err := d.OpenDir(id + attSuffix)
	if err != nil {
		return nil, notFound("attachments of "+id, err)
	}
	oa.dir = ad
	for _, a := range m.Attachments {
		dir, name, _ := strings.Cut(a.Path, "/")
		if dir != id+attSuffix || name == "" || strings.ContainsRune(name, '/') || strings.HasPrefix(name, ".") {
			oa.close()
			return nil, fmt.Errorf("attachment %q: its path must be %s/<file>", a.Path, id+attSuffix)
		}
		f, st, err := ad.OpenRegular(name)
		if err == nil {
			if err = checkOwner(&st, uid); err != nil {
				f.Close()
			}
		}
		if err != nil {
			oa.close()
			return nil, fmt.Errorf("attachment %q: %w", a.Path, err)
		}
		oa.list = append(oa.list, a)
		oa.files = append(oa.files, f)
		oa.sizes = append(oa.sizes, st.Size)
		oa.size += st.Size
		if oa.size > max {
			oa.close()
			return nil, &LimitError{Path: ad.join(name), What: "attachments", Size: oa.size, Limit: max}
		}
	}
	return oa, nil
}

// read reads every attachment, each no larger than fstat said.
func (oa *openedAttachments) read() ([]AttachmentData, error) {
	var out []AttachmentData
	for i, f := range oa.files {
		a := oa.list[i]
		data, err := readUpTo(f, nil, oa.sizes[i], oa.sizes[i], f.Name())
		if err != nil {
			return nil, fmt.Errorf("attachment %q: %w", a.Path, err)
		}
		_, name, _ := strings.Cut(a.Path, "/")
		out = append(out, AttachmentData{Filename: cmpOr(a.Filename, name), ContentType: a.ContentType, Data: data})
	}
	return out, nil
}

func (oa *openedAttachments) close() {
	for _, f := range oa.files {
		f.Close()
	}
	oa.dir.Close()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Failure is one message of a batch that could not be changed, and why.
type Failure struct {
	ID  string
	Err error
}

// BatchError is returned by a batch (SetRead, Relabel, Purge) when some of
// its messages failed: the others were done, and the batch's other results
// say so. Each failure names its message.
type BatchError struct {
	Failed []Failure
}

func (e *BatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d message(s) could not be changed:", len(e.Failed))
	for _, f := range e.Failed {
		fmt.Fprintf(&b, " %s: %v;", f.ID, f.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap gives the failures' errors, for errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}
