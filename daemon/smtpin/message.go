package smtpin

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/bits"
	"net"
	"os"
	"sync"

	"github.com/emersion/go-smtp"
)

// Message is a message as received: our Received header (Trace bytes),
// then the client's bytes, every line ending in CRLF. A message of up to
// SpoolOver bytes is held in memory (Bytes); a larger one went, as it
// arrived, to a Spool and is read back from there (Open): no session ever
// holds more than SpoolOver bytes of a message.
type Message struct {
	// Trace is how many leading bytes are our Received header.
	Trace int
	// Headroom is spare room directly before Bytes in the same array:
	// cap(Headroom) reaches the end of Bytes. A backend that puts a header
	// before the message may write it at the end of Headroom and reslice
	// (Headroom[len(Headroom)-len(h) : len(Headroom)+len(raw)]) instead of
	// copying the message. Empty when there is none (a spooled message).
	Headroom []byte

	raw   []byte // the whole message, when held
	spool Spool
	size  int64
}

// SpoolOver is the size past which a message goes to a Spool as it arrives
// instead of being held in memory. Mail is mostly far smaller; the in-flight
// budget (Limits.MaxInFlightBytes) bounds how many such messages are held at
// once.
const SpoolOver = 2 << 20

// spoolChunk is how much of a spooled message is read at a time.
const spoolChunk = 256 << 10

// NewMessage is a message held in memory (raw starts with a Received header
// trace bytes long), for backends that hand themselves a message.
func NewMessage(raw []byte, trace int) *Message {
	return &Message{Trace: trace, raw: raw, size: int64(len(raw))}
}

// Size is the message's size in bytes.
func (m *Message) Size() int64 { return m.size }

// Bytes is the whole message when it is held in memory, else nil.
func (m *Message) Bytes() []byte { return m.raw }

// Spool is where a spooled message is, else nil.
func (m *Message) Spool() Spool { return m.spool }

// Open reads the message from its start. A spooled one is read through a
// buffer large enough that the readers above it (MIME, DKIM) keep it
// instead of adding a small one of their own.
func (m *Message) Open() io.Reader {
	if m.spool == nil {
		return bytes.NewReader(m.raw)
	}
	return bufio.NewReaderSize(io.NewSectionReader(m.spool, 0, m.size), 64<<10)
}

func (m *Message) close() {
	if m.spool != nil {
		m.spool.Close()
		m.spool = nil
	}
}

// Spool holds a message too large to keep in memory, written as it
// arrives and read back by the backend.
type Spool interface {
	io.Writer // appends
	io.ReaderAt
	// Close is called once the server is done with the message: after
	// Deliver returned, or when the message was refused. A spool whose
	// bytes the backend still needs keeps them.
	Close() error
}

// Spooler is a Backend that provides the spools of large messages. The
// server uses an unlinked temporary file for a backend that is not one.
type Spooler interface {
	NewSpool() (Spool, error)
}

// fileSpool is the default Spool: an unlinked temporary file.
type fileSpool struct{ *os.File }

func newFileSpool() (Spool, error) {
	f, err := os.CreateTemp("", "mailctl-spool-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return fileSpool{f}, nil
}

// readMessage reads DATA (or BDAT chunks), enforces the size, framing and
// loop limits, and prepends our Received header. release returns the
// message's share of the in-flight memory budget and closes its spool; call
// it when done with the message.
func (ss *session) readMessage(r io.Reader) (_ *Message, release func(), err error) {
	budget := &budgetReader{s: ss.s}
	m := &Message{}
	release = func() {
		budget.release()
		m.close()
	}
	ss.txMu.Lock()
	open := ss.hasFrom && len(ss.rcpts) > 0
	ss.txMu.Unlock()
	if !open {
		return nil, release, smtpErr(503, smtp.EnhancedCode{5, 5, 1}, "Bad sequence of commands")
	}
	hdr := ss.received()
	// go-smtp sets the read deadline once per command, and its DATA reader
	// fills whole buffers under it: the connection refreshes the deadline
	// as bytes arrive instead, so a slow but steady sender is not cut off.
	ss.tc.dataDeadline.Store(int64(ss.s.lim.CommandTimeout))
	defer ss.tc.dataDeadline.Store(0)
	// r is go-smtp's DATA reader: it ends at <CRLF>.<CRLF> only and
	// unstuffs leading dots. Its one blind spot, "<CRLF>.<CR>x", loses the
	// dot and the CR; every other bare CR or LF is refused here
	// (docs/go-smtp.md).
	budget.r = r
	if !budget.take(int64(len(hdr))) {
		return nil, release, errNoMemory
	}
	if err := ss.readData(budget, hdr, m); err != nil {
		return nil, release, err
	}
	return m, release, nil
}

// readData reads the message from budget into m: held in one array that
// starts with Headroom bytes and our Received header when it ends within
// SpoolOver bytes, else spooled. Errors are already the replies to give.
func (ss *session) readData(budget *budgetReader, hdr string, m *Message) error {
	hdrLen := len(hdr)
	lr := io.LimitReader(budget, ss.s.lim.MaxMessageBytes+1)
	all, n, eof, err := ss.readDeclared(lr, budget, hdrLen)
	var chunks [][]byte
	if err == nil && !eof {
		// No declared size, or more than was declared: on in chunks, up to
		// SpoolOver bytes in memory.
		var more int
		chunks, more, eof, err = readChunks(lr, SpoolOver+1-n)
		n += more
		// The chunks are copied into the message's array or spooled
		// below, and held by neither: they serve the next message.
		defer putChunks(chunks)
	}
	if err != nil {
		return ss.readFailed(err)
	}
	if !eof {
		var head []byte
		if all != nil {
			head = all[Headroom+hdrLen : Headroom+hdrLen+n-sum(chunks)]
		}
		return ss.spoolData(lr, budget, hdr, append([][]byte{head}, chunks...), n, m)
	}
	if len(chunks) > 0 || all == nil {
		if all, err = joinChunks(budget, all, chunks, hdrLen, n); err != nil {
			return ss.readFailed(err)
		}
	}
	all = completeLastLine(all[:Headroom+hdrLen+n], n)
	copy(all[Headroom:], hdr)
	if err := ss.checkBody(all[Headroom+hdrLen:], hasBareEOL(all[Headroom+hdrLen:])); err != nil {
		return err
	}
	m.Trace, m.Headroom, m.raw, m.size = hdrLen, all[:Headroom], all[Headroom:], int64(len(all)-Headroom)
	return nil
}

// spoolData writes a message larger than SpoolOver to a spool: our Received
// header, what was read (pieces, n bytes), then the rest of lr as it
// arrives, spoolChunk bytes at a time, checked for bare line ends on the
// way. Past the pieces nothing is charged to the memory budget.
func (ss *session) spoolData(lr io.Reader, budget *budgetReader, hdr string, pieces [][]byte, n int, m *Message) error {
	var sp Spool
	var err error
	if sb, ok := ss.s.b.(Spooler); ok {
		sp, err = sb.NewSpool()
	} else {
		sp, err = newFileSpool()
	}
	if err != nil {
		ss.log.Error("DATA refused: cannot spool a large message", "err", err)
		return errTempFailure
	}
	m.spool, m.Trace = sp, len(hdr)
	if _, err := io.WriteString(sp, hdr); err != nil {
		return ss.spoolFailed(err)
	}
	var eol eolCheck
	for _, p := range pieces {
		eol.feed(p)
		if _, err := sp.Write(p); err != nil {
			return ss.spoolFailed(err)
		}
	}
	// The start, to count Received fields in the header (it is longer
	// than any header a loop could grow).
	head := bytes.Join(pieces, nil)
	budget.free = true
	buf := make([]byte, spoolChunk)
	total := int64(n)
	for {
		k, eof, err := readFull(lr, buf)
		if k > 0 {
			total += int64(k)
			if total > ss.s.lim.MaxMessageBytes {
				return ss.readFailed(smtp.ErrDataTooLarge)
			}
			eol.feed(buf[:k])
			if _, err := sp.Write(buf[:k]); err != nil {
				return ss.spoolFailed(err)
			}
		}
		if err != nil {
			return ss.readFailed(err)
		}
		if eof {
			break
		}
	}
	if !eol.cr && total > 0 && !eol.endsCRLF {
		// BDAT's last chunk may end without a line end (see completeLastLine).
		if _, err := io.WriteString(sp, "\r\n"); err != nil {
			return ss.spoolFailed(err)
		}
		total += 2
	}
	m.size = int64(len(hdr)) + total
	if total > ss.s.lim.MaxMessageBytes {
		return ss.readFailed(smtp.ErrDataTooLarge)
	}
	return ss.checkBody(head, eol.bare())
}

// spoolFailed logs a spool that could not be written and answers with a
// temporary failure: the disk is full or broken, the client tries later.
func (ss *session) spoolFailed(err error) error {
	ss.log.Error("DATA refused: writing the spool failed", "err", err)
	return errTempFailure
}

// sum is the total length of chunks.
func sum(chunks [][]byte) int {
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	return n
}

// readDeclared reads the message straight into its final array when the
// client declared its size (MAIL FROM SIZE=, as MTAs send it) and that is
// at most SpoolOver, paid for up front. eof says the message ended within
// the array. It returns a nil array, and reads nothing, when there is no
// usable size or the budget cannot pay for it; the caller then reads in
// chunks.
func (ss *session) readDeclared(lr io.Reader, budget *budgetReader, hdrLen int) (all []byte, n int, eof bool, err error) {
	ss.txMu.Lock()
	hint := ss.sizeHint
	ss.txMu.Unlock()
	if hint <= 0 || hint > ss.s.lim.MaxMessageBytes || hint > SpoolOver {
		return nil, 0, false, nil
	}
	size := int64(Headroom+hdrLen) + hint + hint/32 + 4096
	if !budget.prepay(size) {
		return nil, 0, false, nil
	}
	all = make([]byte, size)
	n, eof, err = readFull(lr, all[Headroom+hdrLen:])
	return all, n, eof, err
}

// readFailed logs a failed read and turns it into the reply. A broken
// stream also ends the connection, since the client's framing can no longer
// be trusted.
func (ss *session) readFailed(err error) error {
	switch {
	case errors.Is(err, smtp.ErrDataTooLarge):
		ss.log.Info("DATA refused: too big")
		return errTooBig
	case errors.Is(err, errNoMemory):
		ss.log.Warn("DATA refused: in-flight memory budget exhausted")
		return errNoMemory
	case errors.Is(err, smtp.ErrDataReset):
		// The client ended a BDAT transfer with RSET (RFC 3030 allows it),
		// or go-smtp refused a chunk and reset: the framing is intact and
		// the session goes on. go-smtp gives no reply for it, except that
		// it may take this result for the next BDAT transaction's
		// (docs/go-smtp.md, point 6): temporary, so that the client
		// retries that one rather than bouncing it.
		ss.log.Debug("message transfer aborted")
		return errAborted
	}
	// The stream is broken (over-long line, timeout, hang-up): answer
	// without internal detail and end the connection.
	ss.log.Info("DATA failed", "err", err)
	ss.tc.closeAfter.Store(true)
	var ne net.Error
	switch {
	case errors.Is(err, smtp.ErrTooLongLine):
		return errLineTooLong
	case errors.As(err, &ne) && ne.Timeout():
		return errReadTimeout
	}
	return errTempFailure
}

// joinChunks copies what was read, n bytes of message in all, if any, and
// then chunks, into one array of exactly the message's size, headroom and
// hdrLen bytes for our Received header first. The chunks are copied once,
// where a growing buffer copies at every doubling and keeps up to twice the
// message.
func joinChunks(budget *budgetReader, all []byte, chunks [][]byte, hdrLen, n int) ([]byte, error) {
	if all != nil {
		// Past the declared size: the array read so far is copied too.
		read := all[Headroom+hdrLen : Headroom+hdrLen+n-sum(chunks)]
		if !budget.charge(int64(len(read))) {
			return nil, errNoMemory
		}
		chunks = append([][]byte{read}, chunks...)
	}
	whole := make([]byte, Headroom+hdrLen+n)
	off := Headroom + hdrLen
	for _, c := range chunks {
		off += copy(whole[off:], c)
	}
	return whole, nil
}

// completeLastLine ends all with CRLF when its n message bytes end without
// a line break. BDAT carries the bytes as they are, and the last chunk may
// end without one: the last line is completed, as Postfix does (DKIM's
// canonical body adds the same CRLF, so signatures still verify). A
// trailing bare CR is left for checkBody to refuse.
func completeLastLine(all []byte, n int) []byte {
	if n > 0 && !bytes.HasSuffix(all, []byte("\r\n")) && all[len(all)-1] != '\r' {
		all = append(all, '\r', '\n')
	}
	return all
}

// checkBody applies the size, framing and loop limits to the message as
// the client sent it (or, for a spooled message, its start; its size and
// line ends were checked as it arrived: bareEOL), and returns the reply for
// the first it breaks.
func (ss *session) checkBody(body []byte, bareEOL bool) error {
	switch {
	case int64(len(body)) > ss.s.lim.MaxMessageBytes:
		ss.log.Info("DATA refused: too big")
		return errTooBig
	case len(body) == 0:
		return errEmpty
	case bareEOL:
		// go-smtp only ends DATA at CRLF.CRLF, so the transaction is intact;
		// refusing also keeps such bytes from reaching an MTA we relay to
		// that might frame them differently.
		ss.log.Info("DATA refused: bare CR or LF")
		return errBareEOL
	case countReceived(body) > ss.s.lim.MaxReceivedHeaders:
		ss.log.Warn("DATA refused: mail loop", "received", countReceived(body))
		return errLoop
	}
	return nil
}

// readFull reads r into b until b is full or r ends (io.EOF, reported as
// eof with a nil error); any other error is returned.
func readFull(r io.Reader, b []byte) (k int, eof bool, err error) {
	for k < len(b) {
		var nn int
		nn, err = r.Read(b[k:])
		k += nn
		if err == io.EOF {
			return k, true, nil
		}
		if err != nil {
			return k, false, err
		}
	}
	return k, false, nil
}

// readChunks reads r in chunks that start small and double up to 1 MiB, so
// that a small message costs little and a large one is not copied as it
// grows, until r ends (eof) or max bytes were read. Any other error,
// io.ErrUnexpectedEOF from a connection lost inside DATA included, is
// returned.
func readChunks(r io.Reader, max int) (chunks [][]byte, n int, eof bool, err error) {
	for class := 0; n < max; class = min(class+1, len(chunkPools)-1) {
		c := getChunk(class)
		c = c[:min(len(c), max-n)]
		k, end, err := readFull(r, c)
		if k > 0 {
			chunks = append(chunks, c[:k])
			n += k
		}
		if end || err != nil {
			return chunks, n, end, err
		}
	}
	return chunks, n, false, nil
}

// chunkPools keep readChunks' arrays between messages, one pool for each
// size from 4 KiB (class 0) doubling to 1 MiB: without them every message
// read in chunks allocates, and the runtime zeroes, its size again on top
// of the array it is copied into.
var chunkPools [9]sync.Pool

// chunkSize is the length of the arrays of class.
func chunkSize(class int) int { return 4 << 10 << class }

// getChunk returns an array of chunkSize(class) bytes, whatever it held.
func getChunk(class int) []byte {
	if c, ok := chunkPools[class].Get().(*[]byte); ok {
		return *c
	}
	return make([]byte, chunkSize(class))
}

// putChunks returns readChunks' chunks to their pools. Only arrays of a
// pool's size go back; a chunk must not be used after.
func putChunks(chunks [][]byte) {
	for _, c := range chunks {
		class := bits.Len(uint(cap(c)>>12)) - 1
		if class < 0 || class >= len(chunkPools) || cap(c) != chunkSize(class) {
			continue
		}
		c = c[:cap(c)]
		chunkPools[class].Put(&c)
	}
}

// budgetReader charges the bytes it reads to the server's in-flight budget.
// It reserves in chunks, and twice what it reads, since the chunks read and
// the array they are copied into are both held for a moment. Once free is
// set (a spooled message), what it reads is not held and costs nothing.
type budgetReader struct {
	r        io.Reader
	s        *Server
	reserved int64
	used     int64
	prepaid  int64 // bytes still to read into memory already paid for
	free     bool
}

const budgetChunk = 256 << 10

// take charges n bytes read, twice: the chunks and the array they go to.
func (b *budgetReader) take(n int64) bool { return b.charge(2 * n) }

// prepay charges an array of n bytes allocated before reading; the next n
// bytes read go into it and cost nothing more.
func (b *budgetReader) prepay(n int64) bool {
	if !b.charge(n) {
		return false
	}
	b.prepaid = n
	return true
}

func (b *budgetReader) charge(n int64) bool {
	b.used += n
	for b.used > b.reserved {
		if b.s.inFlight.Add(budgetChunk) > b.s.lim.MaxInFlightBytes {
			b.s.inFlight.Add(-budgetChunk)
			return false
		}
		b.reserved += budgetChunk
	}
	return true
}

func (b *budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 && !b.free {
		paid := min(int64(n), b.prepaid)
		b.prepaid -= paid
		if !b.take(int64(n) - paid) {
			return 0, errNoMemory
		}
	}
	return n, err
}

func (b *budgetReader) release() {
	b.s.inFlight.Add(-b.reserved)
	b.reserved, b.used, b.prepaid = 0, 0, 0
}

// eolCheck finds a bare CR or LF in a message read in pieces: a CR not
// followed by LF or an LF not preceded by CR, also across two pieces.
type eolCheck struct {
	found    bool
	cr       bool // the last byte fed is a CR, judged with the next piece
	endsCRLF bool // the bytes fed so far end with CRLF
}

func (e *eolCheck) feed(b []byte) {
	if len(b) == 0 {
		return
	}
	e.endsCRLF = bytes.HasSuffix(b, []byte("\r\n")) || len(b) == 1 && b[0] == '\n' && e.cr
	if e.found {
		return
	}
	if e.cr {
		if b[0] != '\n' {
			e.found = true
			return
		}
		b = b[1:] // the LF of a CRLF split between pieces
	}
	e.cr = len(b) > 0 && b[len(b)-1] == '\r'
	if e.cr {
		b = b[:len(b)-1]
	}
	if hasBareEOL(b) {
		e.found = true
	}
}

// bare says whether the bytes fed hold a bare CR or LF (a CR at the very
// end included).
func (e *eolCheck) bare() bool { return e.found || e.cr }

// hasBareEOL reports a CR not followed by LF or an LF not preceded by CR.
// It walks the LFs with IndexByte, which is vectorized (a message is mostly
// long runs between line ends), checks that a CR precedes each, and then
// that there are no other CRs.
func hasBareEOL(b []byte) bool {
	crlf := 0
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			break
		}
		i += j
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		crlf++
		i++
	}
	return bytes.Count(b, []byte{'\r'}) != crlf
}

// countReceived counts Received fields in the header section.
func countReceived(b []byte) int {
	n := 0
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\r\n"))
		if len(line) == 0 {
			break // end of header
		}
		if len(line) > 9 && bytes.EqualFold(line[:8], []byte("received")) {
			rest := bytes.TrimLeft(line[8:], " \t")
			if len(rest) > 0 && rest[0] == ':' {
				n++
			}
		}
	}
	return n
}
