package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/mailctl/mailctl/internal/formats"
)

// Reader reads a backup archive entry by entry, refusing anything this
// package would not have written: a name outside the layout (absolute,
// "..", another directory), a symlink, hard link, device, FIFO or
// directory entry, an entry larger than its kind allows, more than
// MaxEntries entries, a second manifest.
type Reader struct {
	tr       *tar.Reader
	zr       *gzip.Reader // nil: not compressed
	manifest *Manifest
	entries  int
	keys     int
	cur      *Entry
	body     io.Reader
}

// NewReader opens an archive (gzip-compressed or not: the first bytes say)
// and reads its manifest, which must come first.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading the archive: %w", err)
		}
		zr.Multistream(false)
		src = zr
	}
	rd := &Reader{tr: tar.NewReader(src)}
	if zr, ok := src.(*gzip.Reader); ok {
		rd.zr = zr
	}
	e, body, err := rd.next()
	if err == io.EOF {
		return nil, errors.New("the archive is empty: not a mailctl backup")
	}
	if err != nil {
		return nil, err
	}
	if e.Kind != KindManifest {
		return nil, fmt.Errorf("the archive's first entry is %q, not %s%s: not a mailctl backup", e.Name, prefix, nameManifest)
	}
	m, err := decodeManifest(body)
	if err != nil {
		return nil, err
	}
	rd.manifest = m
	return rd, nil
}

func decodeManifest(r io.Reader) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("reading the manifest: %w", err)
	}
	// The version first, so that a newer archive is refused by its number
	// rather than by a field this version does not know.
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil || head.Format != Format {
		return nil, fmt.Errorf("the manifest does not say %q: not a mailctl backup", Format)
	}
	if head.Version > Version || head.Version < 1 {
		return nil, fmt.Errorf("the archive is format version %d and this mailctl reads version %d: restore it with the mailctl release that wrote it (or a newer one)", head.Version, Version)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("the manifest does not parse: %w", err)
	}
	for _, kind := range slices.Sorted(maps.Keys(m.Formats)) {
		st := m.Formats[kind]
		if kind != formats.KindRegistry && kind != formats.KindMailboxes || st.Version < 1 {
			return nil, fmt.Errorf("the manifest's formats name %s version %d: no stamp a mailctl writes", strconv.Quote(kind), st.Version)
		}
		// What the restore writes must say what the manifest says: a
		// writer that is no release's name would be dropped.
		back, _ := formats.ParseStamp(formats.Stamp{Kind: kind, Version: st.Version, WrittenBy: st.WrittenBy}.Text(), kind)
		if back.WrittenBy != st.WrittenBy {
			return nil, fmt.Errorf("the manifest's %s format names its writer %s: not a mailctl release", kind, strconv.Quote(st.WrittenBy))
		}
	}
	seen := map[string]bool{}
	for _, mb := range m.Mailboxes {
		if _, err := classify(prefix+dirMailboxes+mb.Name+"/inbox/x", 0); err != nil {
			return nil, fmt.Errorf("the manifest names mailbox %q: %w", mb.Name, err)
		}
		if seen[mb.Name] {
			return nil, fmt.Errorf("the manifest names mailbox %q twice", mb.Name)
		}
		seen[mb.Name] = true
		if mb.Owner != "" && fileName(mb.Owner) != nil {
			return nil, fmt.Errorf("the manifest names owner %q of mailbox %q: not a user name", mb.Owner, mb.Name)
		}
	}
	return &m, nil
}

// Manifest is the archive's manifest.
func (r *Reader) Manifest() *Manifest { return r.manifest }

// Next returns the next entry and its content (exactly e.Size bytes), or
// io.EOF after the last one.
func (r *Reader) Next() (*Entry, io.Reader, error) {
	e, body, err := r.next()
	if err != nil {
		return nil, nil, err
	}
	switch e.Kind {
	case KindManifest:
		return nil, nil, errors.New("the archive holds a second manifest")
	case KindDKIM:
		if r.keys++; r.keys > MaxKeys {
			return nil, nil, fmt.Errorf("the archive holds more than %d DKIM files", MaxKeys)
		}
	case KindMailboxFile:
		if !r.hasMailbox(e.Mailbox) {
			return nil, nil, fmt.Errorf("entry %q: mailbox %q is not in the archive's manifest", e.Name, e.Mailbox)
		}
	}
	return e, body, nil
}

func (r *Reader) hasMailbox(name string) bool {
	for _, m := range r.manifest.Mailboxes {
		if m.Name == name {
			return true
		}
	}
	return false
}

func (r *Reader) next() (*Entry, io.Reader, error) {
	if r.body != nil { // what the caller left unread of the last entry
		if _, err := io.Copy(io.Discard, r.body); err != nil {
			return nil, nil, err
		}
	}
	h, err := r.tr.Next()
	if err == io.EOF {
		return nil, nil, r.end()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the archive: %w (is it whole?)", err)
	}
	if r.entries++; r.entries > MaxEntries {
		return nil, nil, fmt.Errorf("the archive holds more than %d entries", MaxEntries)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, nil, fmt.Errorf("entry %q is a %s: a mailctl backup holds regular files only", h.Name, typeName(h.Typeflag))
	}
	e, err := classify(h.Name, h.Size)
	if err != nil {
		return nil, nil, err
	}
	r.cur = e
	r.body = &exactReader{r: io.LimitReader(r.tr, h.Size), left: h.Size, name: h.Name}
	return e, r.body, nil
}

// maxTrailer bounds what may follow the end of a compressed archive's tar
// inside its gzip stream: the padding of tar's last record (10 KiB with
// tar(1)'s default blocking).
const maxTrailer = 1 << 20

// end is io.EOF once the archive is known whole. The tar ends before a
// gzip stream does: the stream is read to its end, so that its CRC-32 and
// length are checked, and an archive changed or cut short after the tar's
// last entry is refused rather than restored as if whole.
func (r *Reader) end() error {
	if r.zr == nil {
		return io.EOF
	}
	n, err := io.Copy(io.Discard, io.LimitReader(r.zr, maxTrailer+1))
	if err != nil {
		return fmt.Errorf("reading the archive: %w (is it whole?)", err)
	}
	if n > maxTrailer {
		return fmt.Errorf("the archive's gzip stream holds more than %d bytes after the tar's end: not a mailctl backup", maxTrailer)
	}
	return io.EOF
}

// exactReader reports an entry cut short as an error, not a short file.
type exactReader struct {
	r    io.Reader
	left int64
	name string
}

func (x *exactReader) Read(p []byte) (int, error) {
	n, err := x.r.Read(p)
	x.left -= int64(n)
	if err == io.EOF && x.left > 0 {
		return n, fmt.Errorf("entry %q is cut short: the archive is incomplete", x.name)
	}
	return n, err
}

func typeName(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "FIFO"
	case tar.TypeDir:
		return "directory"
	}
	return fmt.Sprintf("entry of type %q", t)
}
