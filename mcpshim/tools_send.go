package mcpshim

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// MaxAttachBytes bounds the attachments of one send (before base64), well under
// protocol.MaxFrame; the daemon applies the mailbox's own, usually smaller, limit.
const MaxAttachBytes = 25 << 20

type base64Attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type,omitempty"`
	Data        string `json:"data"`
}

type emailSendArgs struct {
	FromMailbox       string             `json:"from_mailbox"`
	To                stringOrList       `json:"to"`
	Cc                stringOrList       `json:"cc,omitempty"`
	Bcc               stringOrList       `json:"bcc,omitempty"`
	Subject           string             `json:"subject"`
	Body              string             `json:"body"`
	TextOnly          bool               `json:"text_only,omitempty"`
	HTMLBody          string             `json:"html_body,omitempty"`
	Attachments       []string           `json:"attachments,omitempty"`
	AttachmentsBase64 []base64Attachment `json:"attachments_base64,omitempty" jsonschema:"files inline"`
	ReplyTo           string             `json:"reply_to,omitempty" jsonschema:"Message-ID answered (not an address)"`
	ReplyToAddress    stringOrList       `json:"reply_to_address,omitempty"`
	References        stringOrList       `json:"references,omitempty" jsonschema:"with reply_to: the thread's Message-IDs"`
	DryRun            bool               `json:"dry_run,omitempty"`
	IdempotencyKey    string             `json:"idempotency_key,omitempty"`
	AllowEmpty        bool               `json:"allow_empty,omitempty"`
	SendAt            string             `json:"send_at,omitempty"`
}

func (s *Server) toolEmailSend() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_send",
		Description: "Send mail from your mailbox: signed, queued and tried at once; returns each recipient's status.",
		Annotations: annotations("Send email", false, false, false, true),
	}, nil, func(ctx context.Context, _ *mcp.CallToolRequest, in *emailSendArgs) (string, SendData, *NextAction, error) {
		if in.TextOnly && in.HTMLBody != "" {
			return "", SendData{}, nil, fail(protocol.CodeInvalidInput, "text_only and html_body exclude each other: drop one")
		}
		if len(in.References) > 0 && in.ReplyTo == "" {
			return "", SendData{}, nil, fail(protocol.CodeInvalidInput, "references needs reply_to (the Message-ID being answered)")
		}
		if len(in.To) == 0 {
			return "", SendData{}, nil, fail(protocol.CodeInvalidInput, "to: give at least one recipient")
		}
		atts, err := loadAttachments(in.Attachments, in.AttachmentsBase64)
		if err != nil {
			return "", SendData{}, nil, err
		}
		sendAt, err := parseSendAt(in.SendAt)
		if err != nil {
			return "", SendData{}, nil, err
		}
		args := protocol.SendArgs{SendAt: sendAt, FromMailbox: in.FromMailbox, To: in.To, Cc: in.Cc, Bcc: in.Bcc, ReplyTo: in.ReplyToAddress,
			Subject: in.Subject, Body: in.Body, TextOnly: in.TextOnly, HTMLBody: in.HTMLBody, Attachments: atts, InReplyTo: in.ReplyTo,
			References: in.References, DryRun: in.DryRun, IdempotencyKey: in.IdempotencyKey, AllowEmpty: in.AllowEmpty}
		summary, res, next, err := s.send(ctx, args)
		out := SendData{SendResult: res}
		if protocol.CodeOf(err) == protocol.CodeInvalidInput && !in.AllowEmpty && emptyMessage(args) {
			again := map[string]any{"from_mailbox": in.FromMailbox, "to": []string(in.To), "subject": in.Subject, "body": in.Body, "allow_empty": true}
			err = withNext(err, &NextAction{Instruction: "Give a subject or a body; only if an empty message is really meant, call again with allow_empty=true.",
				Tool: "email_send", Arguments: again})
		}
		if err != nil || in.ReplyTo == "" {
			return summary, out, next, err
		}
		if known, lerr := s.hasMessageID(ctx, in.FromMailbox, in.ReplyTo); lerr == nil && !known {
			w := fmt.Sprintf("reply_to %q is not the Message-ID of any message in %s (inbox, archive or sent): the message says it answers a message this mailbox never saw.", in.ReplyTo, in.FromMailbox)
			if strings.Contains(in.ReplyTo, "@") && !strings.ContainsAny(in.ReplyTo, "<>") {
				w += " If you meant where answers should go, that is reply_to_address; to answer a stored message, use email_reply with its id."
			}
			out.Warnings = append(out.Warnings, w)
			summary += " (warning: reply_to names no message of this mailbox)"
		}
		return summary, out, next, nil
	})
}

// emptyMessage is the daemon's test for a send it refuses without
// allow_empty: nothing in the subject, the body or attachments.
func emptyMessage(a protocol.SendArgs) bool {
	return strings.TrimSpace(a.Subject) == "" && strings.TrimSpace(a.Body) == "" && strings.TrimSpace(a.HTMLBody) == "" && len(a.Attachments) == 0
}

// SendData is email_send's data: the daemon's result and what the caller
// should know about its arguments.
type SendData struct {
	protocol.SendResult
	Warnings []string `json:"warnings,omitempty" jsonschema:"things the message says that may not be what you meant (the mail was still sent)"`
}

// hasMessageID reports whether a message with Message-ID mid is among the
// newest 200 of the mailbox's inbox, archive and sent folders.
func (s *Server) hasMessageID(ctx context.Context, mailbox, mid string) (bool, error) {
	want := strings.Trim(strings.TrimSpace(mid), "<>")
	for _, folder := range []string{protocol.FolderInbox, protocol.FolderArchive, protocol.FolderSent} {
		var out protocol.MessageList
		if err := s.call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: mailbox, Folder: folder, Limit: 200}, &out); err != nil {
			return false, err
		}
		if slices.ContainsFunc(out.Messages, func(m protocol.MessageSummary) bool { return strings.Trim(m.MessageID, "<>") == want }) {
			return true, nil
		}
	}
	return false, nil
}

func (s *Server) send(ctx context.Context, args protocol.SendArgs) (string, protocol.SendResult, *NextAction, error) {
	var out protocol.SendResult
	if err := s.call(ctx, protocol.VerbSend, args, &out); err != nil {
		return "", out, nil, err
	}
	status := out.Status
	if status == "delivered" && len(out.Recipients) > 0 && !slices.ContainsFunc(out.Recipients, func(r protocol.RecipientStatus) bool { return !r.Captured }) {
		status = "captured, not sent (mailctl dev keeps outbound mail in a local mailbox)"
	}
	summary := fmt.Sprintf("%s: message %s to %s", status, out.MessageID, sentTo(&out))
	if out.Duplicate {
		summary += " (answered from the earlier call with the same idempotency_key)"
	}
	if out.Status == "scheduled" && out.SendAt != nil {
		summary += " at " + out.SendAt.UTC().Format(time.RFC3339) + " (mailctl queue reschedule or drop changes that)"
	}
	var next *NextAction
	switch out.Status {
	case "held":
		next = &NextAction{Instruction: "The message waits for the operator's approval (mailctl queue approve); tell the user."}
	case "deferred", "queued":
		next = &NextAction{Instruction: "Delivery is still in progress; the sent copy's delivery_status updates as it goes.", Tool: "email_read",
			Arguments: map[string]any{"mailbox": args.FromMailbox, "id": out.ID, "folder": protocol.FolderSent, "max_chars": 1}}
	}
	return summary, out, next, nil
}

// sentTo makes a send result's lists [] rather than null and names its
// envelope recipients for a summary line.
func sentTo(res *protocol.SendResult) string {
	res.Recipients = orEmpty(res.Recipients)
	res.Envelope.RcptTo = orEmpty(res.Envelope.RcptTo)
	return clip(strings.Join(res.Envelope.RcptTo, ", "), 120)
}

// loadAttachments reads files with the caller's own rights (the daemon never
// opens a caller's path) and decodes base64 ones.
func loadAttachments(paths []string, b64 []base64Attachment) ([]protocol.SendAttachment, error) {
	var out []protocol.SendAttachment
	total := 0
	for _, p := range paths {
		data, full, err := ReadRegularFile(p, int64(MaxAttachBytes-total))
		if errors.Is(err, errNotRegular) {
			return nil, fail(protocol.CodeInvalidInput, "attachment %s is not a regular file", p)
		}
		if err != nil {
			return nil, fail(protocol.CodeInvalidInput, "attachment %s: %v", p, err)
		}
		if !full {
			return nil, fail(protocol.CodeTooLarge, "attachments exceed %d MB in total", MaxAttachBytes>>20)
		}
		total += len(data)
		out = append(out, protocol.SendAttachment{Filename: filepath.Base(p), ContentType: contentType(p, data), Data: data})
	}
	for i, a := range b64 {
		data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(a.Data))
		if err != nil {
			return nil, fail(protocol.CodeInvalidInput, "attachments_base64[%d]: data is not base64: %v", i, err)
		}
		total += len(data)
		if total > MaxAttachBytes {
			return nil, fail(protocol.CodeTooLarge, "attachments exceed %d MB in total", MaxAttachBytes>>20)
		}
		if a.Filename == "" || strings.ContainsAny(a.Filename, `/\`) {
			return nil, fail(protocol.CodeInvalidInput, "attachments_base64[%d]: filename must be a plain file name", i)
		}
		out = append(out, protocol.SendAttachment{Filename: a.Filename, ContentType: cmp.Or(a.ContentType, contentType(a.Filename, data)), Data: data})
	}
	return out, nil
}

func contentType(name string, data []byte) string {
	if ct := mime.TypeByExtension(filepath.Ext(name)); ct != "" {
		return ct
	}
	return http.DetectContentType(data)
}

type emailReplyArgs struct {
	Mailbox        string   `json:"mailbox"`
	ID             string   `json:"id" jsonschema:"the message answered (inbox, archive or sent)"`
	Body           string   `json:"body"`
	TextOnly       bool     `json:"text_only,omitempty"`
	HTMLBody       string   `json:"html_body,omitempty"`
	ReplyAll       bool     `json:"reply_all,omitempty" jsonschema:"also To and Cc of the original"`
	Attachments    []string `json:"attachments,omitempty"`
	AutoReply      bool     `json:"auto_reply,omitempty" jsonschema:"no person wrote it: to return_path alone, Auto-Submitted"`
	DryRun         bool     `json:"dry_run,omitempty"`
	IdempotencyKey string   `json:"idempotency_key,omitempty"`
}

func (s *Server) toolEmailReply() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_reply",
		Description: "Answer a stored message: recipients, Re: subject and threading from it. Sends like email_send.",
		Annotations: annotations("Reply to email", false, false, false, true),
	}, nil, func(ctx context.Context, _ *mcp.CallToolRequest, in *emailReplyArgs) (string, protocol.SendResult, *NextAction, error) {
		if in.TextOnly && in.HTMLBody != "" {
			return "", protocol.SendResult{}, nil, fail(protocol.CodeInvalidInput, "text_only and html_body exclude each other: drop one")
		}
		atts, err := loadAttachments(in.Attachments, nil)
		if err != nil {
			return "", protocol.SendResult{}, nil, err
		}
		args := protocol.SendArgs{FromMailbox: in.Mailbox, ReplyToID: in.ID, ReplyAll: in.ReplyAll, Body: in.Body,
			TextOnly: in.TextOnly, HTMLBody: in.HTMLBody, Attachments: atts, AutoReply: in.AutoReply,
			DryRun: in.DryRun, IdempotencyKey: in.IdempotencyKey}
		sum, out, next, err := s.send(ctx, args)
		return sum, out, next, messageHint(err, in.Mailbox, "")
	})
}

type markArgs struct {
	Mailbox string   `json:"mailbox"`
	ID      string   `json:"id,omitempty"`
	IDs     []string `json:"ids,omitempty"`
	Folder  string   `json:"folder,omitempty"`
}

// MarkData is the data of email_mark_read and email_mark_unread.
type MarkData struct {
	Changed  []string `json:"changed"`
	NotFound []string `json:"not_found,omitempty"`
	Status   string   `json:"status" jsonschema:"ok, or partial when some ids were not found or could not be changed"`
	Issues   []Issue  `json:"issues,omitempty"`
}

func (s *Server) toolMark(read bool) toolSpec {
	name, title, what := "email_mark_read", "Mark read", "read"
	if !read {
		name, title, what = "email_mark_unread", "Mark unread", "unread"
	}
	return newTool(&mcp.Tool{
		Name:        name,
		Description: fmt.Sprintf("Mark one message (id) or several (ids) %s.", what),
		Annotations: annotations(title, false, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["ids"].MaxItems = new(500)
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *markArgs) (string, MarkData, *NextAction, error) {
		ids := idList(in.ID, in.IDs)
		if len(ids) == 0 {
			return "", MarkData{}, nil, fail(protocol.CodeInvalidInput, "give id or ids")
		}
		var out protocol.MessageMarked
		if err := s.call(ctx, protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: in.Mailbox, Folder: in.Folder, IDs: ids, Read: read}, &out); err != nil {
			return "", MarkData{}, nil, messageHint(err, in.Mailbox, in.Folder)
		}
		status, issues := partial("mark", out.NotFound, out.Failed)
		data := MarkData{Changed: orEmpty(out.Changed), NotFound: out.NotFound, Status: status, Issues: issues}
		return fmt.Sprintf("marked %d message(s) %s", len(out.Changed), what), data, nil, nil
	})
}

type moveArgs struct {
	Mailbox string `json:"mailbox"`
	ID      string `json:"id"`
	Action  string `json:"action" jsonschema:"restore: back to the inbox"`
	Folder  string `json:"folder,omitempty" jsonschema:"where it is; default inbox (trash for restore; junk to restore from junk)"`
}

// MoveData is email_move's data.
type MoveData struct {
	Mailbox string `json:"mailbox"`
	ID      string `json:"id"`
	From    string `json:"from"`
	To      string `json:"to"`
}

func (s *Server) toolEmailMove() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_move",
		Description: "Archive a message, move it to trash or junk, or restore it to the inbox. Nothing is deleted.",
		Annotations: annotations("Move message", false, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["action"].Enum = []any{"archive", "trash", "junk", "restore"}
		sc.Properties["folder"].Enum = folderEnum
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *moveArgs) (string, MoveData, *NextAction, error) {
		from, to := cmp.Or(in.Folder, protocol.FolderInbox), ""
		switch in.Action {
		case "archive":
			to = protocol.FolderArchive
		case "trash":
			to = protocol.FolderTrash
		case "junk":
			to = protocol.FolderJunk
		case "restore":
			to = protocol.FolderInbox
			from = cmp.Or(in.Folder, protocol.FolderTrash)
		}
		if from == to {
			return "", MoveData{}, nil, fail(protocol.CodeInvalidInput, "the message is already in %s", to)
		}
		var out struct {
			ID     string `json:"id"`
			Folder string `json:"folder"`
		}
		if err := s.call(ctx, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: in.Mailbox, ID: in.ID, From: from, To: to}, &out); err != nil {
			return "", MoveData{}, nil, messageHint(err, in.Mailbox, in.Folder)
		}
		data := MoveData{Mailbox: in.Mailbox, ID: cmp.Or(out.ID, in.ID), From: from, To: cmp.Or(out.Folder, to)}
		return fmt.Sprintf("moved %s from %s to %s", data.ID, from, data.To), data, nil, nil
	})
}
