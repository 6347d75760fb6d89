package mcpshim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

type emailDraftArgs struct {
	Action            string             `json:"action" jsonschema:"create, update, send or delete. List drafts with email_list and read one with email_read, folder drafts"`
	Mailbox           string             `json:"mailbox" jsonschema:"one of your mailboxes"`
	ID                string             `json:"id,omitempty" jsonschema:"the draft's id (update, send, delete)"`
	To                *stringOrList      `json:"to,omitempty" jsonschema:"one address or a list; on update, replaces the draft's"`
	Cc                *stringOrList      `json:"cc,omitempty"`
	Bcc               *stringOrList      `json:"bcc,omitempty"`
	Subject           *string            `json:"subject,omitempty"`
	Body              *string            `json:"body,omitempty" jsonschema:"Markdown, as email_send's body"`
	Attachments       []string           `json:"attachments,omitempty" jsonschema:"paths of files to attach, read with your own rights; on update, replace the draft's"`
	AttachmentsBase64 []base64Attachment `json:"attachments_base64,omitempty" jsonschema:"files given inline: filename, content_type (optional) and base64 data"`
	ReplyToID         string             `json:"reply_to_id,omitempty" jsonschema:"create only: id of a stored message (inbox, archive or sent) the draft answers; fills the thread, recipients and Re: subject"`
	SendAt            string             `json:"send_at,omitempty" jsonschema:"RFC 3339 time the message goes out once sent (a scheduled send), e.g. 2026-12-01T09:00:00Z; at most a year ahead"`
	ClearSendAt       bool               `json:"clear_send_at,omitempty" jsonschema:"update only: remove the draft's send_at"`
	DryRun            bool               `json:"dry_run,omitempty" jsonschema:"send only: validate the draft as it would go out without sending"`
}

// DraftData is email_draft's data: the draft after create and update, the
// send result after send.
type DraftData struct {
	Action  string               `json:"action"`
	Draft   *protocol.Draft      `json:"draft,omitempty"`
	Sent    *protocol.SendResult `json:"sent,omitempty"`
	Deleted bool                 `json:"deleted,omitempty"`
}

func parseSendAt(s string) (*time.Time, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return nil, fail(protocol.CodeInvalidInput, "send_at %q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", s)
	}
	return &t, nil
}

// deref is the value p points at, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func (s *Server) toolEmailDraft() toolSpec {
	return newTool(&mcp.Tool{
		Name: "email_draft",
		Description: "Write a message for a person to review before it goes: create a draft, update it, send it, or delete it. A draft is a file in the mailbox's drafts folder " +
			"that a person may edit by hand; send reads it as it is then and sends it like email_send (policy, DKIM, queue), and the draft becomes the sent copy. " +
			"send_at schedules the send.",
		Annotations: annotations("Draft email", false, true, false, true),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["action"].Enum = []any{"create", "update", "send", "delete"}
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in *emailDraftArgs) (string, DraftData, *NextAction, error) {
		out := DraftData{Action: in.Action}
		sendAt, err := parseSendAt(in.SendAt)
		if err != nil {
			return "", out, nil, err
		}
		if in.Action != "create" && in.ID == "" {
			return "", out, nil, fail(protocol.CodeInvalidInput, "id: name the draft to %s (email_list with folder drafts lists them)", in.Action)
		}
		switch in.Action {
		case "create", "update":
			return s.draftWrite(ctx, in, sendAt, out)
		case "send":
			return s.draftSend(ctx, in, sendAt, out)
		case "delete":
			return s.draftDelete(ctx, in, out)
		}
		return "", out, nil, fail(protocol.CodeInvalidInput, "action %q: use create, update, send or delete", in.Action)
	})
}

// draftWrite creates or updates the draft, and then points to the next
// step: a person reviews it before it is sent.
func (s *Server) draftWrite(ctx context.Context, in *emailDraftArgs, sendAt *time.Time, out DraftData) (string, DraftData, *NextAction, error) {
	atts, err := loadAttachments(in.Attachments, in.AttachmentsBase64)
	if err != nil {
		return "", out, nil, err
	}
	var d protocol.Draft
	if in.Action == "create" {
		err = s.call(ctx, protocol.VerbDraftCreate, draftCreateArgs(in, atts, sendAt), &d)
	} else {
		if in.ReplyToID != "" {
			return "", out, nil, fail(protocol.CodeInvalidInput, "reply_to_id is for create: a draft's thread is set when it is created")
		}
		err = s.call(ctx, protocol.VerbDraftUpdate, draftUpdateArgs(in, atts, sendAt), &d)
	}
	if err != nil {
		return "", out, nil, err
	}
	out.Draft = &d
	summary := fmt.Sprintf("draft %s %sd in %s (file %s)", d.ID, in.Action, d.Mailbox, d.Path)
	next := &NextAction{Instruction: "Ask the person to review the draft (they may edit the file); send it when they agree.", Tool: "email_draft",
		Arguments: map[string]any{"action": "send", "mailbox": d.Mailbox, "id": d.ID}}
	return summary, out, next, nil
}

// draftCreateArgs is the request for a new draft; a subject or body not
// given is left empty.
func draftCreateArgs(in *emailDraftArgs, atts []protocol.SendAttachment, sendAt *time.Time) protocol.DraftArgs {
	return protocol.DraftArgs{Mailbox: in.Mailbox, To: deref(in.To), Cc: deref(in.Cc), Bcc: deref(in.Bcc),
		Subject: deref(in.Subject), Body: deref(in.Body), Attachments: atts, ReplyToID: in.ReplyToID, SendAt: sendAt}
}

// draftUpdateArgs is the request to change a draft. It carries only the
// fields given, so that the others stay as the draft has them.
func draftUpdateArgs(in *emailDraftArgs, atts []protocol.SendAttachment, sendAt *time.Time) protocol.DraftUpdateArgs {
	a := protocol.DraftUpdateArgs{Mailbox: in.Mailbox, ID: in.ID, To: (*[]string)(in.To), Cc: (*[]string)(in.Cc), Bcc: (*[]string)(in.Bcc),
		Subject: in.Subject, Body: in.Body, SendAt: sendAt, ClearSendAt: in.ClearSendAt}
	if len(in.Attachments)+len(in.AttachmentsBase64) > 0 {
		a.Attachments = &atts
	}
	return a
}

// draftSend sends the draft as it is on disk now, or only checks it when
// in.DryRun is set.
func (s *Server) draftSend(ctx context.Context, in *emailDraftArgs, sendAt *time.Time, out DraftData) (string, DraftData, *NextAction, error) {
	var res protocol.SendResult
	if err := s.call(ctx, protocol.VerbDraftSend, protocol.DraftSendArgs{Mailbox: in.Mailbox, ID: in.ID, SendAt: sendAt, DryRun: in.DryRun}, &res); err != nil {
		return "", out, nil, err
	}
	out.Sent = &res
	summary := fmt.Sprintf("%s: draft %s as message %s to %s", res.Status, in.ID, res.MessageID, sentTo(&res))
	if res.SendAt != nil {
		summary += " at " + res.SendAt.UTC().Format(time.RFC3339)
	}
	if res.DraftKept {
		summary += "; the draft was edited while it was being sent: the version read went out, and the edit stays in drafts (read it before sending it too)"
	}
	return summary, out, nil, nil
}

// draftDelete discards the draft.
func (s *Server) draftDelete(ctx context.Context, in *emailDraftArgs, out DraftData) (string, DraftData, *NextAction, error) {
	var del protocol.DraftDeleted
	if err := s.call(ctx, protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: in.Mailbox, ID: in.ID}, &del); err != nil {
		return "", out, nil, err
	}
	out.Deleted = del.Deleted
	return fmt.Sprintf("draft %s deleted", in.ID), out, nil, nil
}
