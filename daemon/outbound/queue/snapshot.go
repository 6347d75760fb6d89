package queue

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/mailctl/mailctl/internal/wal"
)

// JournalName is the queue journal's file name in the queue directory: what
// a backup copies, with the idempotency records (IdempotencyDir); the rest
// of the directory is damaged items set aside.
const JournalName = journalName

// SnapshotJournal writes the journal as it stands now to w: every record
// appended so far, whole, and nothing after (a record being appended when
// it is taken is either all in or not at all). Appends go on meanwhile:
// the journal only grows at its end, and a rewrite replaces the file under
// a new inode, so the copy is read from a descriptor opened while appends
// wait, up to the end of the last whole record at that moment. Every item
// enqueued before the call is in it, with its message and the data of its
// sent copy; restored and started, a daemon resumes them.
func (q *Queue) SnapshotJournal(w io.Writer) (int64, error) {
	j := q.j
	j.mu.Lock()
	closed := j.closed
	j.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("the queue journal is closed")
	}
	return j.log.Snapshot(w)
}

// journalCRC is the checksum the journal's records carry (internal/wal's).
var journalCRC = crc32.MakeTable(crc32.Castagnoli)

// RewriteJournal copies the journal r holds to w, passing the state of
// every item (the JSON of its enqueue and state records) through fix, which
// returns it changed or as it was; each record is checksummed again. It is
// how a restore renumbers what the items say about their mailboxes for
// another host. r must hold a whole journal of this version, as
// SnapshotJournal copies one: a foreign header, a record of an impossible
// length, one cut short or failing its checksum is an error.
func RewriteJournal(r io.Reader, w io.Writer, fix func(state []byte) ([]byte, error)) (int64, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	head := make([]byte, len(journalMagic))
	if _, err := io.ReadFull(br, head); err != nil || string(head) != journalMagic {
		return 0, fmt.Errorf("not a queue journal this version reads (it starts %q)", head)
	}
	written, err := w.Write(head)
	total := int64(written)
	if err != nil {
		return total, err
	}
	var hdr [wal.Header]byte
	for n := 0; ; n++ {
		if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
			return total, nil
		} else if err != nil {
			return total, fmt.Errorf("queue journal record %d is cut short", n)
		}
		size := binary.BigEndian.Uint32(hdr[:4])
		if size == 0 || size > maxRecord {
			return total, fmt.Errorf("queue journal record %d has an impossible length (%d)", n, size)
		}
		// Read as it comes, not allocated from the length: a length
		// without the bytes behind it costs nothing.
		p, err := io.ReadAll(io.LimitReader(br, int64(size)))
		if err != nil || len(p) != int(size) {
			return total, fmt.Errorf("queue journal record %d is cut short", n)
		}
		if crc32.Checksum(p, journalCRC) != binary.BigEndian.Uint32(hdr[4:]) {
			return total, fmt.Errorf("queue journal record %d fails its checksum", n)
		}
		var rec []byte
		switch p[0] {
		case 'E':
			if len(p) < 5 || 5+int64(binary.BigEndian.Uint32(p[1:5])) > int64(len(p)) {
				return total, fmt.Errorf("queue journal record %d: a malformed enqueue record", n)
			}
			end := 5 + int(binary.BigEndian.Uint32(p[1:5]))
			st, err := fix(p[5:end])
			if err != nil {
				return total, fmt.Errorf("queue journal record %d: %w", n, err)
			}
			payload, _ := enqueuePayload(st, p[end:])
			rec = wal.Record(payload...)
		case 'S':
			st, err := fix(p[1:])
			if err != nil {
				return total, fmt.Errorf("queue journal record %d: %w", n, err)
			}
			rec = wal.Record([]byte{'S'}, st)
		default:
			rec = append(hdr[:], p...)
		}
		written, err := w.Write(rec)
		total += int64(written)
		if err != nil {
			return total, err
		}
	}
}
