// Package fakedaemon is an in-process stand-in for the mailctl daemon's
// control socket, for tests of its clients (the MCP shim, the CLI). It speaks
// the protocol exactly: the greeting line, strict JSON-line requests, replies
// with data or a coded error, and watch streams. Its data lives in memory.
package fakedaemon

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mailctl/mailctl/protocol"
)

// Daemon is a fake control-socket server.
type Daemon struct {
	// Domain is the mail domain of created mailboxes.
	Domain string
	// Dir is where mailbox folders (for attachment files) live.
	Dir string

	ln     net.Listener
	socket string

	mu        sync.Mutex
	mailboxes map[string]*mailbox
	hooks     map[string]protocol.Hook
	watchers  map[*watcher]bool
	seq       int
	sendKeys  map[string]protocol.SendResult
	requests  []string
	conns     map[net.Conn]bool
	closed    bool
}

type mailbox struct {
	info    protocol.Mailbox
	folders map[string][]*protocol.Message // oldest first
}

type watcher struct {
	mailboxes map[string]bool
	id        uint64
	w         *connWriter
}

type connWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	bw  *bufio.Writer
}

func (c *connWriter) write(r protocol.Response) error { return c.writeJSON(r) }

// writeJSON writes one line; the lock keeps event and reply lines whole.
func (c *connWriter) writeJSON(v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.enc.Encode(v); err != nil {
		return err
	}
	return c.bw.Flush()
}

// Start listens on a new Unix socket under dir and serves until Close.
func Start(dir string) (*Daemon, error) {
	d := &Daemon{Domain: "example.test", Dir: dir, mailboxes: map[string]*mailbox{}, hooks: map[string]protocol.Hook{},
		watchers: map[*watcher]bool{}, sendKeys: map[string]protocol.SendResult{}, conns: map[net.Conn]bool{}}
	d.socket = filepath.Join(dir, "mailctl.sock")
	ln, err := net.Listen("unix", d.socket)
	if err != nil {
		return nil, fmt.Errorf("fakedaemon: %w", err)
	}
	d.ln = ln
	go d.accept()
	return d, nil
}

// Socket is the socket path to dial.
func (d *Daemon) Socket() string { return d.socket }

// Close stops listening and drops every connection.
func (d *Daemon) Close() error {
	d.mu.Lock()
	d.closed = true
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	return d.ln.Close()
}

// Requests returns the verbs received so far, in order.
func (d *Daemon) Requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.requests...)
}

// AddMailbox creates a mailbox (as the caller would) and returns it.
func (d *Daemon) AddMailbox(name string) protocol.Mailbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	mb, _ := d.createLocked(name)
	return mb.info
}

// AddMessage stores m in mailbox/folder (creating the mailbox when needed),
// fills the fields a real store would, emits new_mail for inbox messages and
// returns the id.
func (d *Daemon) AddMessage(mailboxName, folder string, m protocol.Message) string {
	d.mu.Lock()
	mb, _ := d.createLocked(mailboxName)
	d.seq++
	if m.ID == "" {
		m.ID = fmt.Sprintf("%s-%04d-%s", time.Now().UTC().Format("2006-01-02-150405"), d.seq, slug(m.Subject))
	}
	if m.MessageID == "" {
		m.MessageID = fmt.Sprintf("<%s@%s>", m.ID, d.Domain)
	}
	if m.ThreadID == "" {
		root := m.MessageID // the thread's root: the first reference, else the parent
		if len(m.References) > 0 {
			root = m.References[0]
		} else if m.InReplyTo != "" {
			root = m.InReplyTo
		}
		sum := sha256.Sum256([]byte(root))
		m.ThreadID = hex.EncodeToString(sum[:8])
	}
	if m.Date.IsZero() {
		m.Date = time.Now().UTC()
	}
	if m.ReceivedAt.IsZero() {
		m.ReceivedAt = m.Date
	}
	if m.Trusted == "" {
		m.Trusted = "none"
	}
	m.Folder = folder
	m.Mailbox = mailboxName
	m.Attachments = len(m.AttachmentList)
	m.Path = filepath.Join(mb.info.Path, folder, m.ID+".md")
	m.RawPath = filepath.Join(mb.info.Path, folder, m.ID+".eml")
	m.SizeBytes = int64(len(m.Body))
	if m.Snippet == "" {
		m.Snippet = clip(strings.Join(strings.Fields(m.Body), " "), 200)
	}
	cp := m
	mb.folders[folder] = append(mb.folders[folder], &cp)
	summary := cp.MessageSummary
	d.mu.Unlock()
	if folder == protocol.FolderInbox {
		d.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: mailboxName, Folder: folder, ID: m.ID, Message: &summary, At: time.Now().UTC()})
	}
	return m.ID
}

// Emit sends ev to every watch that covers its mailbox.
func (d *Daemon) Emit(ev protocol.Event) {
	d.mu.Lock()
	var targets []*watcher
	for w := range d.watchers {
		if len(w.mailboxes) == 0 || w.mailboxes[ev.Mailbox] {
			targets = append(targets, w)
		}
	}
	d.mu.Unlock()
	for _, w := range targets {
		e := ev
		w.w.write(protocol.Response{ID: w.id, Event: &e})
	}
}

// Watchers reports how many watch streams are open.
func (d *Daemon) Watchers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.watchers)
}

func (d *Daemon) accept() {
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			return
		}
		d.conns[c] = true
		d.mu.Unlock()
		go d.serve(c)
	}
}

func (d *Daemon) serve(c net.Conn) {
	bw := bufio.NewWriter(c)
	w := &connWriter{enc: json.NewEncoder(bw), bw: bw}
	var mine []*watcher
	defer func() {
		d.mu.Lock()
		for _, wt := range mine {
			delete(d.watchers, wt)
		}
		delete(d.conns, c)
		d.mu.Unlock()
		c.Close()
	}()
	if err := w.writeJSON(protocol.Greeting{Protocol: protocol.Name, Version: protocol.Version, Server: "fakedaemon"}); err != nil {
		return
	}
	fr := protocol.NewFrameReader(c, protocol.MaxFrame)
	for {
		frame, err := fr.Next()
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			w.write(protocol.Response{Error: protocol.Errorf(protocol.CodeTooLarge, "frame too large")})
			continue
		}
		if err != nil {
			return
		}
		req, err := protocol.DecodeRequest(frame)
		if err != nil {
			var id uint64
			if req != nil {
				id = req.ID
			}
			w.write(protocol.Response{ID: id, Error: protocol.Errorf(protocol.CodeInvalidInput, "%v", err)})
			continue
		}
		d.mu.Lock()
		d.requests = append(d.requests, req.Verb)
		d.mu.Unlock()
		if req.Verb == protocol.VerbWatch {
			var args protocol.WatchArgs
			if err := protocol.DecodeStrict(req.Args, &args); err != nil {
				w.write(protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeInvalidInput, "%v", err)})
				continue
			}
			wt := &watcher{mailboxes: map[string]bool{}, id: req.ID, w: w}
			for _, m := range args.Mailboxes {
				wt.mailboxes[m] = true
			}
			d.mu.Lock()
			for m := range wt.mailboxes {
				if d.mailboxes[m] == nil {
					d.mu.Unlock()
					w.write(protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeNotFound, "no mailbox %s", m)})
					goto next
				}
			}
			d.watchers[wt] = true
			mine = append(mine, wt)
			d.mu.Unlock()
			w.write(protocol.Response{ID: req.ID, Data: json.RawMessage(`{"watching":true}`)})
		next:
			continue
		}
		go func(req *protocol.Request) {
			data, err := d.handle(req.Verb, req.Args)
			resp := protocol.Response{ID: req.ID}
			if err != nil {
				var pe *protocol.Error
				if !errors.As(err, &pe) {
					pe = protocol.Errorf(protocol.CodeInternal, "%v", err)
				}
				resp.Error = pe
			} else {
				raw, merr := json.Marshal(data)
				if merr != nil {
					resp.Error = protocol.Errorf(protocol.CodeInternal, "%v", merr)
				} else {
					resp.Data = raw
				}
			}
			w.write(resp)
		}(req)
	}
}

func (d *Daemon) createLocked(name string) (*mailbox, bool) {
	if mb := d.mailboxes[name]; mb != nil {
		return mb, false
	}
	path := filepath.Join(d.Dir, "mailboxes", name)
	os.MkdirAll(filepath.Join(path, protocol.FolderInbox), 0o700)
	uid := uint32(os.Getuid())
	mb := &mailbox{info: protocol.Mailbox{Name: name, Address: name + "@" + d.Domain, Owner: strconv.Itoa(int(uid)), OwnerUID: uid,
		Source: "registry", Path: path, InboxPath: filepath.Join(path, protocol.FolderInbox), SentPath: filepath.Join(path, protocol.FolderSent)},
		folders: map[string][]*protocol.Message{}}
	d.mailboxes[name] = mb
	return mb, true
}

func (d *Daemon) counts(mb *mailbox) protocol.Mailbox {
	info := mb.info
	info.Total = len(mb.folders[protocol.FolderInbox])
	info.SentCount = len(mb.folders[protocol.FolderSent])
	info.Unread = 0
	for _, m := range mb.folders[protocol.FolderInbox] {
		if !m.Read {
			info.Unread++
		}
	}
	return info
}

func decode[T any](raw json.RawMessage) (T, error) {
	var v T
	if err := protocol.DecodeStrict(raw, &v); err != nil {
		return v, protocol.Errorf(protocol.CodeInvalidInput, "%v", err)
	}
	return v, nil
}

func notFound(format string, args ...any) error {
	return protocol.Errorf(protocol.CodeNotFound, format, args...)
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 24 {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		return "message"
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
