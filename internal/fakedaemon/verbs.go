package fakedaemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

var mailboxName = regexp.MustCompile(`^[a-z0-9._-]+$`)

// handle answers one non-watch request.
func (d *Daemon) handle(verb string, raw json.RawMessage) (any, error) {
	switch verb {
	case protocol.VerbVersion:
		return protocol.VersionInfo{Protocol: protocol.Name, ProtocolVersion: protocol.Version, Server: "fakedaemon"}, nil
	case protocol.VerbMailboxList:
		if _, err := decode[protocol.Empty](raw); err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		out := protocol.MailboxList{Mailboxes: []protocol.Mailbox{}}
		for _, n := range sortedNames(d.mailboxes) {
			out.Mailboxes = append(out.Mailboxes, d.counts(d.mailboxes[n]))
		}
		return out, nil
	case protocol.VerbMailboxCreate:
		a, err := decode[protocol.MailboxCreateArgs](raw)
		if err != nil {
			return nil, err
		}
		if !mailboxName.MatchString(a.Name) || a.Name == "postmaster" || a.Name == "root" {
			return nil, protocol.Errorf(protocol.CodeInvalidInput, "mailbox name %q: use lowercase letters, digits, '.', '_' or '-' (not a reserved name)", a.Name)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		mb, created := d.createLocked(a.Name)
		return protocol.MailboxCreated{Mailbox: d.counts(mb), Created: created}, nil
	case protocol.VerbMailboxDelete:
		a, err := decode[protocol.MailboxDeleteArgs](raw)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		mb := d.mailboxes[a.Name]
		if mb == nil {
			return nil, notFound("no mailbox %s", a.Name)
		}
		n := 0
		for _, msgs := range mb.folders {
			n += len(msgs)
		}
		if n > 0 && !a.Force {
			return nil, protocol.Errorf(protocol.CodeConflict, "mailbox %s holds %d message(s); pass force to delete them too", a.Name, n)
		}
		delete(d.mailboxes, a.Name)
		return protocol.Deleted{Name: a.Name, Deleted: true}, nil
	case protocol.VerbMessageList:
		a, err := decode[protocol.MessageListArgs](raw)
		if err != nil {
			return nil, err
		}
		return d.list(a)
	case protocol.VerbMessageRead:
		a, err := decode[protocol.MessageReadArgs](raw)
		if err != nil {
			return nil, err
		}
		return d.read(a)
	case protocol.VerbMessageMark:
		a, err := decode[protocol.MessageMarkArgs](raw)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		msgs, err := d.folderLocked(a.Mailbox, a.Folder)
		if err != nil {
			return nil, err
		}
		out := protocol.MessageMarked{Changed: []string{}}
		for _, id := range a.IDs {
			i := slices.IndexFunc(msgs, func(m *protocol.Message) bool { return m.ID == id })
			if i < 0 {
				out.NotFound = append(out.NotFound, id)
				continue
			}
			msgs[i].Read = a.Read
			out.Changed = append(out.Changed, id)
		}
		return out, nil
	case protocol.VerbMessageMove:
		a, err := decode[protocol.MessageMoveArgs](raw)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		from := a.From
		if from == "" {
			from = protocol.FolderInbox
		}
		msgs, err := d.folderLocked(a.Mailbox, from)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(msgs, func(m *protocol.Message) bool { return m.ID == a.ID })
		if i < 0 {
			return nil, notFound("no message %s in %s/%s", a.ID, a.Mailbox, from)
		}
		m := msgs[i]
		mb := d.mailboxes[a.Mailbox]
		mb.folders[from] = slices.Delete(msgs, i, i+1)
		m.Folder = a.To
		mb.folders[a.To] = append(mb.folders[a.To], m)
		return map[string]string{"id": m.ID, "folder": a.To}, nil
	case protocol.VerbSend:
		a, err := decode[protocol.SendArgs](raw)
		if err != nil {
			return nil, err
		}
		return d.send(a)
	case protocol.VerbHookCreate:
		a, err := decode[protocol.HookCreateArgs](raw)
		if err != nil {
			return nil, err
		}
		if a.Event != protocol.EventOnReceive && a.Event != protocol.EventAfterSend {
			return nil, protocol.Errorf(protocol.CodeInvalidInput, "event must be on_receive or after_send")
		}
		if len(a.Cmd) == 0 || !strings.HasPrefix(a.Cmd[0], "/") {
			return nil, protocol.Errorf(protocol.CodeInvalidInput, "cmd[0] must be an absolute path")
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.mailboxes[a.Mailbox] == nil {
			return nil, notFound("no mailbox %s", a.Mailbox)
		}
		name := a.Name
		if name == "" {
			sum := sha256.Sum256([]byte(a.Event + "\x00" + strings.Join(a.Cmd, "\x00") + "\x00" + strconv.FormatBool(a.FireOnUntrusted)))
			name = hex.EncodeToString(sum[:6])
		}
		if a.TimeoutSecs == 0 {
			a.TimeoutSecs = 60
		}
		h := protocol.Hook{Name: name, Mailbox: a.Mailbox, Event: a.Event, Cmd: a.Cmd, TimeoutSecs: a.TimeoutSecs,
			FireOnUntrusted: a.FireOnUntrusted, Source: "registry", CreatedAt: time.Now().UTC()}
		d.hooks[name] = h
		return h, nil
	case protocol.VerbHookList:
		a, err := decode[protocol.HookListArgs](raw)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		out := protocol.HookList{Hooks: []protocol.Hook{}}
		for _, n := range sortedNames(d.hooks) {
			if h := d.hooks[n]; a.Mailbox == "" || h.Mailbox == a.Mailbox {
				out.Hooks = append(out.Hooks, h)
			}
		}
		return out, nil
	case protocol.VerbHookDelete:
		a, err := decode[protocol.NameArgs](raw)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.hooks[a.Name]; !ok {
			return nil, notFound("no hook %s", a.Name)
		}
		delete(d.hooks, a.Name)
		return protocol.Deleted{Name: a.Name, Deleted: true}, nil
	}
	return nil, protocol.Errorf(protocol.CodeInvalidInput, "unknown verb %q", verb)
}

func (d *Daemon) folderLocked(mailbox, folder string) ([]*protocol.Message, error) {
	mb := d.mailboxes[mailbox]
	if mb == nil {
		return nil, notFound("no mailbox %s", mailbox)
	}
	if folder == "" {
		folder = protocol.FolderInbox
	}
	return mb.folders[folder], nil
}

func (d *Daemon) list(a protocol.MessageListArgs) (protocol.MessageList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	msgs, err := d.folderLocked(a.Mailbox, a.Folder)
	if err != nil {
		return protocol.MessageList{}, err
	}
	limit := a.Limit
	if limit <= 0 {
		limit = 50
	}
	if limit > 200 {
		return protocol.MessageList{}, protocol.Errorf(protocol.CodeInvalidInput, "limit must be at most 200")
	}
	offset := a.Offset
	if a.Cursor != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(a.Cursor, "o"))
		if err != nil || !strings.HasPrefix(a.Cursor, "o") {
			return protocol.MessageList{}, protocol.Errorf(protocol.CodeInvalidInput, "cursor %q is not one this server issued", a.Cursor)
		}
		offset = n
	}
	var match []protocol.MessageSummary
	for i := len(msgs) - 1; i >= 0; i-- { // newest first
		m := msgs[i]
		if a.Unread != nil && m.Read == *a.Unread {
			continue
		}
		if a.Trusted != nil && (m.Trusted == "true") != *a.Trusted {
			continue
		}
		if !contains(m.From, a.From) || !contains(m.Subject, a.Subject) || (a.ThreadID != "" && m.ThreadID != a.ThreadID) {
			continue
		}
		if a.Text != "" && !contains(m.Subject+"\n"+m.Body, a.Text) {
			continue
		}
		if a.Since != nil && m.ReceivedAt.Before(*a.Since) || a.Until != nil && m.ReceivedAt.After(*a.Until) {
			continue
		}
		match = append(match, m.MessageSummary)
	}
	out := protocol.MessageList{Messages: []protocol.MessageSummary{}, Total: len(match)}
	if offset < len(match) {
		end := min(len(match), offset+limit)
		out.Messages = match[offset:end]
		if end < len(match) {
			out.HasMore = true
			out.NextCursor = "o" + strconv.Itoa(end)
		}
	}
	return out, nil
}

func contains(s, sub string) bool {
	return sub == "" || strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func (d *Daemon) read(a protocol.MessageReadArgs) (protocol.Message, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	msgs, err := d.folderLocked(a.Mailbox, a.Folder)
	if err != nil {
		return protocol.Message{}, err
	}
	i := slices.IndexFunc(msgs, func(m *protocol.Message) bool { return m.ID == a.ID })
	if i < 0 {
		return protocol.Message{}, notFound("no message %s in %s/%s", a.ID, a.Mailbox, orInbox(a.Folder))
	}
	m := *msgs[i]
	body := m.Body
	if a.Raw {
		body = fmt.Sprintf("From: %s\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: %s\r\n\r\n%s", m.From, strings.Join(m.To, ", "), m.Subject, m.MessageID, m.Body)
	}
	max := a.MaxChars
	if max <= 0 {
		max = 20000
	}
	runes := []rune(body)
	m.BodyChars = len(runes)
	off := min(a.Offset, len(runes))
	end := min(len(runes), off+max)
	m.Body = string(runes[off:end])
	m.Offset = off
	m.Truncated = end < len(runes)
	return m, nil
}

func orInbox(f string) string {
	if f == "" {
		return protocol.FolderInbox
	}
	return f
}

func (d *Daemon) send(a protocol.SendArgs) (protocol.SendResult, error) {
	d.mu.Lock()
	if a.IdempotencyKey != "" {
		if r, ok := d.sendKeys[a.FromMailbox+"\x00"+a.IdempotencyKey]; ok {
			d.mu.Unlock()
			r.Duplicate = true
			return r, nil
		}
	}
	mb := d.mailboxes[a.FromMailbox]
	if mb == nil {
		d.mu.Unlock()
		return protocol.SendResult{}, notFound("no mailbox %s", a.FromMailbox)
	}
	to, subject := a.To, a.Subject
	var inReplyTo string
	refs := a.References
	if a.ReplyToID != "" {
		i := slices.IndexFunc(mb.folders[protocol.FolderInbox], func(m *protocol.Message) bool { return m.ID == a.ReplyToID })
		if i < 0 {
			d.mu.Unlock()
			return protocol.SendResult{}, notFound("no message %s in %s/inbox", a.ReplyToID, a.FromMailbox)
		}
		parent := mb.folders[protocol.FolderInbox][i]
		to = []string{parent.From}
		if a.ReplyAll {
			to = append(to, parent.Cc...)
		}
		subject = parent.Subject
		if !strings.HasPrefix(strings.ToLower(subject), "re:") {
			subject = "Re: " + subject
		}
		inReplyTo = parent.MessageID
		refs = append(append([]string{}, parent.References...), parent.MessageID)
	} else if a.InReplyTo != "" {
		inReplyTo = a.InReplyTo
	}
	if len(to) == 0 {
		d.mu.Unlock()
		return protocol.SendResult{}, protocol.Errorf(protocol.CodeInvalidInput, "no recipients")
	}
	for _, addr := range append(append(append([]string{}, to...), a.Cc...), a.Bcc...) {
		if strings.ContainsAny(addr, "\r\n") || !strings.Contains(addr, "@") {
			d.mu.Unlock()
			return protocol.SendResult{}, protocol.Errorf(protocol.CodeInvalidInput, "bad address %q", addr)
		}
	}
	rcpts := append(append(append([]string{}, to...), a.Cc...), a.Bcc...)
	res := protocol.SendResult{Envelope: protocol.Envelope{MailFrom: mb.info.Address, RcptTo: rcpts}, SizeBytes: len(a.Body)}
	d.seq++
	res.ID = fmt.Sprintf("%s-%04d-%s", time.Now().UTC().Format("2006-01-02-150405"), d.seq, slug(subject))
	res.MessageID = fmt.Sprintf("<%s@%s>", res.ID, d.Domain)
	if a.DryRun {
		res.Status = "dry_run"
		d.mu.Unlock()
		return res, nil
	}
	res.Status = "delivered"
	var local []string
	for _, r := range rcpts {
		addr := bareAddress(r)
		res.Recipients = append(res.Recipients, protocol.RecipientStatus{Address: addr, Status: "delivered", Code: 250, UpdatedAt: time.Now().UTC()})
		if name, ok := strings.CutSuffix(addr, "@"+d.Domain); ok && d.mailboxes[name] != nil {
			local = append(local, name)
		}
	}
	if a.IdempotencyKey != "" {
		d.sendKeys[a.FromMailbox+"\x00"+a.IdempotencyKey] = res
	}
	from := mb.info.Address
	d.mu.Unlock()

	var atts []protocol.Attachment
	for _, at := range a.Attachments {
		atts = append(atts, protocol.Attachment{Filename: at.Filename, ContentType: at.ContentType, Size: int64(len(at.Data))})
	}
	sent := protocol.Message{MessageSummary: protocol.MessageSummary{ID: res.ID, MessageID: res.MessageID, From: from, To: to,
		Subject: subject, Read: true, Trusted: "none", DeliveryStatus: "delivered"}, Cc: a.Cc, Bcc: a.Bcc, Body: a.Body,
		InReplyTo: inReplyTo, References: refs, Outbound: true, AttachmentList: atts, Recipients: res.Recipients}
	d.AddMessage(a.FromMailbox, protocol.FolderSent, sent)
	for _, name := range local {
		in := protocol.Message{MessageSummary: protocol.MessageSummary{MessageID: res.MessageID, From: from, To: to, Subject: subject,
			Trusted: "true"}, Cc: a.Cc, Body: a.Body, InReplyTo: inReplyTo, References: refs, AttachmentList: atts,
			DKIM: []protocol.AuthResult{{Result: "pass", Domain: d.Domain}}, SPF: &protocol.AuthResult{Result: "pass", Domain: d.Domain},
			DMARC: &protocol.AuthResult{Result: "pass", Domain: d.Domain}}
		d.AddMessage(name, protocol.FolderInbox, in)
	}
	return res, nil
}

func bareAddress(s string) string {
	if i := strings.LastIndex(s, "<"); i >= 0 {
		if j := strings.Index(s[i:], ">"); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return strings.TrimSpace(s)
}
