package control

import (
	"context"
	"errors"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

var folders = map[string]bool{protocol.FolderInbox: true, protocol.FolderSent: true, protocol.FolderArchive: true,
	protocol.FolderTrash: true, protocol.FolderDrafts: true, protocol.FolderJunk: true}

func folderOf(f string) (string, error) {
	if f == "" {
		return protocol.FolderInbox, nil
	}
	if !folders[f] {
		return "", protocol.Errorf(protocol.CodeInvalidInput, "folder %q: use inbox, sent, archive, trash, drafts or junk", f)
	}
	return f, nil
}

// SummaryOf is a stored message's summary as lists and events show it.
func SummaryOf(s store.Summary) protocol.MessageSummary {
	date, source := dateOf(s.Date, s.ReceivedAt)
	return protocol.MessageSummary{ID: s.ID, Folder: s.Folder, MessageID: s.MessageID, ThreadID: s.ThreadID, From: s.From,
		To: nonNil(s.To), Subject: s.Subject, Date: date, DateSource: source, Read: s.Read, Trusted: trustedOrNone(protocol.Verdict(s.Trusted)),
		Attachments: s.Attachments, Snippet: s.Snippet, DeliveryStatus: s.DeliveryStatus, Labels: s.Labels, Starred: s.Starred}
}

// dateOf is the date a message is shown with: its Date header's, or, for a
// message without one (the store keeps it zero, as the header was), the
// time it was received, said so by protocol.DateReceived. The daemon
// substitutes it here, where every summary and message is built, so that
// the CLI, the MCP tools and watch events all show the same date, and never
// the year 1.
func dateOf(date, received time.Time) (time.Time, string) {
	if date.IsZero() && !received.IsZero() {
		return received, protocol.DateReceived
	}
	return date, ""
}

// trustedOrNone reads a missing verdict (a hand-written file) as NoPolicy.
func trustedOrNone(v protocol.Verdict) protocol.Verdict {
	if v == "" {
		return protocol.NoPolicy
	}
	return v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func handleMessageList(_ context.Context, s *Server, c *call, a *protocol.MessageListArgs) (any, error) {
	folder, err := folderOf(a.Folder)
	if err != nil {
		return nil, err
	}
	if a.Limit < 0 || a.Offset < 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "limit and offset must not be negative")
	}
	cur, err := openCursor(a.Cursor, a.Mailbox, folder, a)
	if err != nil {
		return nil, err
	}
	page, err := s.store.List(a.Mailbox, folder, store.Query{Limit: a.Limit, Offset: a.Offset, Cursor: cur,
		Unread: a.Unread, Trusted: a.Trusted, From: a.From, Subject: a.Subject, Text: a.Text, ThreadID: a.ThreadID,
		Since: a.Since, Until: a.Until, Label: a.Label, Starred: a.Starred, Search: a.Query})
	if errors.Is(err, store.ErrIndexing) {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "%v", err)
	}
	if se := (*store.SearchError)(nil); errors.As(err, &se) {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v (the query operators: email_list in docs/mcp.md)", se)
	}
	if err != nil {
		return nil, storeErr(err, "folder "+folder, noFolder(a.Mailbox, folder))
	}
	out := protocol.MessageList{Messages: make([]protocol.MessageSummary, 0, len(page.Items)), Total: page.Total,
		NextCursor: sealCursor(page.NextCursor, a.Mailbox, folder, a), HasMore: page.HasMore, AllFolders: page.AllFolders}
	for _, s := range page.Items {
		out.Messages = append(out.Messages, SummaryOf(s))
	}
	return out, nil
}

// defaultWindow is how many characters of a body message.read returns unless
// asked otherwise, so one large newsletter never floods an agent's context.
const (
	defaultWindow = 20_000
	maxWindow     = 200_000
)

func handleMessageRead(_ context.Context, s *Server, c *call, a *protocol.MessageReadArgs) (any, error) {
	folder, err := folderOf(a.Folder)
	if err != nil {
		return nil, err
	}
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v", err) // it names the id
	}
	if a.MaxChars < 0 || a.Offset < 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "max_chars and offset must not be negative")
	}
	window := a.MaxChars
	if window == 0 {
		window = defaultWindow
	}
	window = min(window, maxWindow)
	// Only the window is read into memory, however large the message.
	m, w, err := s.reads(c, 1).GetWindow(a.Mailbox, folder, a.ID, a.Offset, window, a.Raw)
	if err != nil {
		return nil, storeErr(err, "message "+a.ID, notFoundIn(protocol.MissingMessage, []string{a.ID}, a.Mailbox, folder))
	}
	out := messageOf(m, folder, "")
	base := s.store.Path(a.Mailbox) + "/" + folder + "/"
	out.Path = base + m.ID + ".md"
	out.RawPath = base + m.ID + ".eml"
	for i := range out.AttachmentList {
		out.AttachmentList[i].Path = base + out.AttachmentList[i].Path
	}
	out.Body, out.BodyChars, out.Truncated = w.Text, w.Chars, w.More
	out.Offset = a.Offset
	return out, nil
}

func messageOf(m *store.Message, folder, body string) protocol.Message {
	date, source := dateOf(m.Date, m.ReceivedAt)
	sum := protocol.MessageSummary{ID: m.ID, Folder: folder, MessageID: m.MessageID, ThreadID: m.ThreadID, From: m.From,
		To: nonNil(m.To), Subject: m.Subject, Date: date, DateSource: source, Read: m.Read, Trusted: trustedOrNone(protocol.Verdict(m.Trusted)),
		Attachments: len(m.Attachments), DeliveryStatus: m.DeliveryStatus, Labels: m.Labels, Starred: m.Starred}
	out := protocol.Message{MessageSummary: sum, Mailbox: m.Mailbox, Cc: m.Cc, Bcc: m.Bcc, ReplyTo: m.ReplyTo,
		DeliveredTo: m.DeliveredTo, InReplyTo: m.InReplyTo, References: m.References, ListID: m.ListID,
		AutoSubmitted: m.AutoSubmitted, ReceivedAt: m.ReceivedAt, ReceivedFromIP: m.ReceivedFromIP, ReturnPath: m.ReturnPath, SizeBytes: m.SizeBytes,
		Outbound: m.Outbound, SubmittedBy: m.SubmittedBy}
	for _, r := range m.DKIM {
		out.DKIM = append(out.DKIM, protocol.AuthResult{Result: r.Result, Domain: r.Domain})
	}
	if m.SPF.Result != "" {
		out.SPF = &protocol.AuthResult{Result: m.SPF.Result, Domain: m.SPF.Domain}
	}
	if m.DMARC.Result != "" {
		out.DMARC = &protocol.AuthResult{Result: m.DMARC.Result, Domain: m.DMARC.Domain}
	}
	for _, a := range m.Attachments {
		out.AttachmentList = append(out.AttachmentList, protocol.Attachment{Filename: a.Filename, ContentType: a.ContentType, Size: a.Size, Path: a.Path})
	}
	for _, r := range m.DeliveryDetails {
		out.Recipients = append(out.Recipients, outbound.FromStoreDetail(r))
	}
	return out
}

func handleMessageMark(_ context.Context, s *Server, c *call, a *protocol.MessageMarkArgs) (any, error) {
	folder, err := folderOf(a.Folder)
	if err != nil {
		return nil, err
	}
	if err := checkMessageIDs(a.IDs); err != nil {
		return nil, err
	}
	changed, notFound, err := s.reads(c, 1).SetRead(a.Mailbox, folder, a.IDs, a.Read, s.now().UTC())
	failed, err := s.batchFailures(a.Mailbox, folder, err)
	if err != nil {
		return nil, storeErr(err, "folder "+folder, noFolder(a.Mailbox, folder))
	}
	if err := batchAnswer(a.IDs, notFound, failed); err != nil {
		return nil, err
	}
	if noneFound(notFound, a.IDs) {
		return nil, notFoundIn(protocol.MissingMessage, notFound, a.Mailbox, folder)
	}
	return protocol.MessageMarked{Changed: nonNil(changed), NotFound: notFound, Failed: failed}, nil
}

// moveDestinations are the folders message.move takes a message to. sent
// and drafts are written only by sending and by the draft verbs: a received
// message moved there would pose as a sent copy, or become a draft that
// draft.send sends.
var moveDestinations = map[string]bool{protocol.FolderInbox: true, protocol.FolderArchive: true,
	protocol.FolderTrash: true, protocol.FolderJunk: true}

func handleMessageMove(_ context.Context, s *Server, c *call, a *protocol.MessageMoveArgs) (any, error) {
	from, err := folderOf(a.From)
	if err != nil {
		return nil, err
	}
	to, err := folderOf(a.To)
	if err != nil || a.To == "" || !moveDestinations[to] {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "to: name the destination folder (inbox, archive, trash or junk)")
	}
	if from == to {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "the message is already in %s", to)
	}
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%v", err) // it names the id
	}
	if err := s.reads(c, 1).Move(a.Mailbox, a.ID, from, to); err != nil {
		return nil, storeErr(err, "message "+a.ID, notFoundIn(protocol.MissingMessage, []string{a.ID}, a.Mailbox, from))
	}
	return map[string]string{"id": a.ID, "folder": to}, nil
}
