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
	Action            string             `json:"action"`
	Mailbox           string             `json:"mailbox"`
	ID                string             `json:"id,omitempty" jsonschema:"the draft (not for create)"`
	To                *stringOrList      `json:"to,omitempty"`
	Cc                *stringOrList      `json:"cc,omitempty"`
	Bcc               *stringOrList      `json:"bcc,omitempty"`
	Subject           *string            `json:"subject,omitempty"`
	Body              *string            `json:"body,omitempty" jsonschema:"Markdown"`
	Attachments       []string           `json:"attachments,omitempty"`
	AttachmentsBase64 []base64Attachment `json:"attachments_base64,omitempty" jsonschema:"files inline"`
	ReplyToID         string             `json:"reply_to_id,omitempty" jsonschema:"create: the message answered; sets recipients, subject, thread"`
	SendAt            string             `json:"send_at,omitempty"`
	ClearSendAt       bool               `json:"clear_send_at,omitempty"`
	DryRun            bool               `json:"dry_run,omitempty"`
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
	if err != nil || !protocol.CarriesTime(t) {
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
		Name:        "email_draft",
		Description: "Create, update, send or delete a draft: a file in drafts a person may edit; send sends it as it is then.",
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
