package backup

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// Source is what Write puts in an archive: a daemon's snapshot (see
// protocol.BackupSnapshot), and the config file and DKIM keys, which the
// daemon never writes and which are read where they are.
type Source struct {
	Snapshot   protocol.BackupSnapshot
	ConfigFile string
	DKIMDir    string
	// UserName names a uid on this host ("" for none).
	UserName func(uid uint32) string
	Host     string
	Mailctl  string
	Now      time.Time
}

// Stats says what Write wrote.
type Stats struct {
	Mailboxes, Messages, Files int
	Bytes                      int64
	// Changed counts files that shrank while being read (an owner
	// rewriting its own file through another link); each is written with
	// zeros where its end was, and named in Warnings.
	Changed int
	// Skipped counts a mailbox's files left out, which the store never
	// writes but an owner can plant: larger than a backup holds (MaxFile;
	// sparse, it costs them nothing), or under a name a restore refuses
	// (a control character, a backslash, bytes that are not UTF-8). Each
	// is named in Warnings. So is an idempotency record larger than a
	// record may be, or not a regular file: damaged, it answers no key.
	Skipped int
	// Warnings name what was left out: the files above, and what the
	// snapshot of each mailbox left out and named (a mount inside it).
	Warnings []string
}

// Write writes the archive of src to w: the manifest, the config, the
// DKIM keys, the registry, the bounce key, the queue journal and its
// idempotency records, the send log, then every mailbox's files.
func Write(w io.Writer, src Source) (*Stats, error) {
	tw := tar.NewWriter(w)
	st := &Stats{}
	snap := src.Snapshot
	m := Manifest{Format: Format, Version: Version, CreatedAt: src.Now.UTC(), CutAt: snap.CutAt, Host: src.Host, Mailctl: src.Mailctl,
		Users: map[string]string{}, QueueItems: snap.QueueItems, QueueBytes: snap.QueueBytes, Mailboxes: []MailboxOwner{}}
	name := func(uid uint32) string {
		if src.UserName == nil {
			return ""
		}
		return src.UserName(uid)
	}
	for _, mb := range snap.Mailboxes {
		m.Mailboxes = append(m.Mailboxes, MailboxOwner{Name: mb.Name, Owner: name(mb.UID), UID: mb.UID, GID: mb.GID, Messages: mb.Messages})
		st.Messages += mb.Messages
	}
	for _, kind := range []string{formats.KindRegistry, formats.KindMailboxes} { // each the name of the directory it stamps
		st, err := formats.ReadStamp(filepath.Join(snap.Dir, kind, formats.StampName), kind)
		if os.IsNotExist(err) {
			continue // a daemon that does not put its stamps in the snapshot
		}
		if err != nil {
			return nil, err
		}
		if m.Formats == nil {
			m.Formats = map[string]FormatStamp{}
		}
		m.Formats[kind] = FormatStamp{Version: st.Version, WrittenBy: st.WrittenBy}
	}
	uids := registryUIDs(filepath.Join(snap.Dir, "registry", "mailboxes"))
	rateLog := filepath.Join(snap.Dir, "ratelimit.log")
	logUIDs, err := rateLogUIDs(rateLog)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("the snapshot's send log: %w", err)
	}
	for _, uid := range append(uids, logUIDs...) {
		if n := name(uid); n != "" {
			m.Users[strconv.FormatUint(uint64(uid), 10)] = n
		}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeBytes(tw, nameManifest, data); err != nil {
		return nil, err
	}
	if src.ConfigFile != "" {
		if err := st.writeFile(tw, nameConfig, src.ConfigFile, MaxConfig); err != nil {
			return nil, err
		}
	}
	if src.DKIMDir != "" {
		keys := 0
		err := st.eachFile(dirDKIM, src.DKIMDir, func(e fs.DirEntry) error {
			if keys++; keys > MaxKeys {
				// A restore refuses an archive of more.
				return fmt.Errorf("%s holds more than %d files: keep only the DKIM keys there", src.DKIMDir, MaxKeys)
			}
			return st.writeFile(tw, dirDKIM+e.Name(), filepath.Join(src.DKIMDir, e.Name()), MaxKey)
		})
		if err != nil {
			return nil, err
		}
	}
	if err := st.writeDir(tw, dirRegMboxes, filepath.Join(snap.Dir, "registry", "mailboxes"), MaxRegistry); err != nil {
		return nil, err
	}
	if err := st.writeDir(tw, dirRegHooks, filepath.Join(snap.Dir, "registry", "hooks"), MaxRegistry); err != nil {
		return nil, err
	}
	if err := st.writeFile(tw, nameBounceKey, filepath.Join(snap.Dir, "bounce.key"), MaxKey); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if err := st.writeFile(tw, nameJournal, filepath.Join(snap.Dir, "queue", "journal"), MaxJournal); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if err := st.writeIdem(tw, filepath.Join(snap.Dir, "queue", queue.IdempotencyDir)); err != nil {
		return nil, err
	}
	err = st.writeFile(tw, nameRateLog, rateLog, MaxRateLog)
	if tl, ok := errors.AsType[*tooLargeError](err); ok {
		// Counts that help against a flood must not cost the mail its
		// backup: the restored limits start from what the host sends.
		st.Skipped++
		st.Warnings = append(st.Warnings, tl.Error()+": left out, the restored send limits start empty")
	} else if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, mb := range snap.Mailboxes {
		st.Warnings = append(st.Warnings, mb.Warnings...)
		if err := st.writeTree(tw, dirMailboxes+mb.Name+"/", filepath.Join(snap.Dir, "mailboxes", mb.Name), 0); err != nil {
			return nil, err
		}
		st.Mailboxes++
	}
	return st, tw.Close()
}

func writeBytes(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(header(name, int64(len(data)))); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func header(name string, size int64) *tar.Header {
	return &tar.Header{Name: prefix + name, Typeflag: tar.TypeReg, Mode: 0o600, Size: size, Format: tar.FormatPAX}
}

// writeFile writes the regular file at path as entry name, read through a
// descriptor opened without following a symlink and checked with fstat.
func (st *Stats) writeFile(tw *tar.Writer, name, path string, max int64) error {
	f, fi, err := safeio.OpenRegular(path, math.MaxInt64)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi.Size() > max {
		return &tooLargeError{path: path, size: fi.Size(), max: max}
	}
	size := fi.Size()
	if err := tw.WriteHeader(header(name, size)); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, size))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if n < size {
		st.Changed++
		st.Warnings = append(st.Warnings, fmt.Sprintf("%s shrank while it was read: its end is written as zeros", path))
		if _, err := io.Copy(tw, io.LimitReader(zeros{}, size-n)); err != nil {
			return err
		}
	}
	st.Files++
	st.Bytes += size
	return nil
}

// writeDir writes the regular files directly in dir (hidden and
// temporary ones, and names not of their kind, left out), in the order
// the directory lists them: a restore takes the entries of a directory in
// any order, and sorting them would hold every name of a directory that
// can hold hundreds of thousands (the idempotency records) at once.
func (st *Stats) writeDir(tw *tar.Writer, name, dir string, max int64) error {
	return st.eachFile(name, dir, func(e fs.DirEntry) error {
		return st.writeFile(tw, name+e.Name(), filepath.Join(dir, e.Name()), max)
	})
}

// eachFile calls fn for the regular files of dir that writeDir writes,
// listing dir a batch at a time. A dir that does not exist has none; fn's
// error, whatever it is, ends the listing and is returned.
func (st *Stats) eachFile(name, dir string, fn func(fs.DirEntry) error) error {
	var fnErr error
	err := safeio.EachEntry(dir, func(e fs.DirEntry) error {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() || fileName(e.Name()) != nil {
			return nil
		}
		if _, err := classify(prefix+name+e.Name(), 0); err != nil {
			return nil // a name a restore refuses: none the daemon writes
		}
		fnErr = fn(e)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// writeIdem writes the idempotency records. One the daemon cannot have
// written (larger than a record may be, or no longer a regular file) is
// damaged: it answers no key, and the daemon's sweep removes it in time,
// so it is left out with a warning rather than costing the mail its
// backup.
func (st *Stats) writeIdem(tw *tar.Writer, dir string) error {
	return st.eachFile(dirIdem, dir, func(e fs.DirEntry) error {
		path := filepath.Join(dir, e.Name())
		err := st.writeFile(tw, dirIdem+e.Name(), path, MaxIdemRecord)
		if tl, ok := errors.AsType[*tooLargeError](err); ok {
			st.Skipped++
			st.Warnings = append(st.Warnings, tl.Error()+": a damaged idempotency record, left out")
			return nil
		}
		if errors.Is(err, safeio.ErrNotRegular) {
			st.Skipped++
			st.Warnings = append(st.Warnings, fmt.Sprintf("%s: not a regular file: a damaged idempotency record, left out", strconv.Quote(path)))
			return nil
		}
		return err
	})
}

// writeTree writes a mailbox's snapshot: its folders, their files and
// their messages' attachment folders, each directory listed a batch at a
// time and written in the order it lists (a folder can hold any number
// of messages).
func (st *Stats) writeTree(tw *tar.Writer, name, dir string, depth int) error {
	return safeio.EachEntry(dir, func(e fs.DirEntry) error {
		n := e.Name()
		switch {
		case e.IsDir() && depth < 2:
			return st.writeTree(tw, name+n+"/", filepath.Join(dir, n), depth+1)
		case e.Type().IsRegular() && depth > 0:
			if _, err := classify(prefix+name+n, 0); err != nil {
				// A name the store never writes (a newline, a backslash,
				// bytes that are not UTF-8), which its owner planted: in
				// the archive, it would make a restore refuse it whole.
				st.Skipped++
				st.Warnings = append(st.Warnings, fmt.Sprintf("%s: left out (%s)", strconv.Quote(filepath.Join(dir, n)), "not a name a restore accepts"))
				return nil
			}
			err := st.writeFile(tw, name+n, filepath.Join(dir, n), MaxFile)
			if tl, ok := errors.AsType[*tooLargeError](err); ok {
				// One owner's planted file must not cost every mailbox
				// its backup.
				st.Skipped++
				st.Warnings = append(st.Warnings, tl.Error()+": left out")
				return nil
			}
			return err
		}
		return nil
	})
}

// tooLargeError is a file larger than its entry may be.
type tooLargeError struct {
	path      string
	size, max int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, more than a backup holds (%d)", e.path, e.size, e.max)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// registryUIDs are the uids the registry's mailbox files name. Each file
// is read only when it is a regular file of at most MaxRegistry bytes (a
// FIFO is never opened to wait on), and the directory is listed a batch at
// a time; what cannot be read names no uid here (writeDir refuses it).
func registryUIDs(dir string) []uint32 {
	seen := map[uint32]bool{}
	var out []uint32
	safeio.EachEntry(dir, func(e fs.DirEntry) error {
		if !e.Type().IsRegular() {
			return nil
		}
		data, err := safeio.ReadRegular(filepath.Join(dir, e.Name()), MaxRegistry)
		if err != nil {
			return nil
		}
		var r struct {
			OwnerUID  *uint32 `json:"owner_uid"`
			CreatedBy *uint32 `json:"created_by"`
		}
		if json.NewDecoder(bytes.NewReader(data)).Decode(&r) != nil {
			return nil
		}
		for _, u := range []*uint32{r.OwnerUID, r.CreatedBy} {
			if u != nil && !seen[*u] {
				seen[*u] = true
				out = append(out, *u)
			}
		}
		return nil
	})
	slices.Sort(out)
	return out
}
