package mcpshim

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// maxForwardChars bounds the body a forward carries.
const maxForwardChars = 1_000_000

type forwardArgs struct {
	Mailbox            string       `json:"mailbox" jsonschema:"holds the message; sends the forward"`
	ID                 string       `json:"id"`
	Folder             string       `json:"folder,omitempty"`
	To                 stringOrList `json:"to"`
	Cc                 stringOrList `json:"cc,omitempty"`
	Note               string       `json:"note,omitempty" jsonschema:"Markdown above the message"`
	WithoutAttachments bool         `json:"without_attachments,omitempty"`
	DryRun             bool         `json:"dry_run,omitempty"`
	IdempotencyKey     string       `json:"idempotency_key,omitempty"`
}

func (s *Server) toolEmailForward() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_forward",
		Description: "Forward a stored message with its attachments and an optional note. Sends like email_send; forward untrusted mail only if the user asked.",
		Annotations: annotations("Forward email", false, false, false, true),
	}, nil, s.emailForward)
}

func (s *Server) emailForward(ctx context.Context, _ *mcp.CallToolRequest, in *forwardArgs) (string, protocol.SendResult, *NextAction, error) {
	var zero protocol.SendResult
	if len(in.To) == 0 {
		return "", zero, nil, fail(protocol.CodeInvalidInput, "to: give at least one recipient")
	}
	m, body, err := s.readWhole(ctx, protocol.MessageReadArgs{Mailbox: in.Mailbox, ID: in.ID, Folder: in.Folder})
	if err != nil {
		return "", zero, nil, messageHint(err, in.Mailbox, in.Folder)
	}
	var atts []protocol.SendAttachment
	if !in.WithoutAttachments && len(m.AttachmentList) > 0 {
		dir, err := s.mailboxDir(ctx, in.Mailbox)
		if err != nil {
			return "", zero, nil, err
		}
		total := 0
		for _, a := range m.AttachmentList {
			rel, err := attachmentRel(dir, m.Path, a.Path)
			if err != nil {
				return "", zero, nil, err
			}
			data, full, err := readInRoot(dir, rel, MaxAttachBytes)
			if err != nil {
				return "", zero, nil, err
			}
			total += len(data)
			if !full || total > MaxAttachBytes {
				return "", zero, nil, withNext(fail(protocol.CodeTooLarge, "the attachments exceed %d MB", MaxAttachBytes>>20),
					&NextAction{Instruction: "Forward without the attachments.", Tool: "email_forward",
						Arguments: map[string]any{"mailbox": in.Mailbox, "id": in.ID, "without_attachments": true}})
			}
			atts = append(atts, protocol.SendAttachment{Filename: a.Filename, ContentType: a.ContentType, Data: data})
		}
	}
	// The subject is the original sender's, and a forward has none of its
	// own to give instead: a control character or a word too long for a
	// header line is mended, as a reply's is, rather than the forward
	// refused.
	subject := oneLine(protocol.SubjectOf(m.Subject))
	if !strings.HasPrefix(strings.ToLower(subject), "fwd:") && !strings.HasPrefix(strings.ToLower(subject), "fw:") {
		subject = "Fwd: " + subject
	}
	var b strings.Builder
	if in.Note != "" {
		b.WriteString(in.Note)
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "---------- Forwarded message ----------\nFrom: %s\nDate: %s\nSubject: %s\nTo: %s\n",
		oneLine(m.From), dateText(m.Date, m.DateSource, time.RFC1123Z), oneLine(m.Subject), strings.Join(m.To, ", "))
	if len(m.Cc) > 0 {
		fmt.Fprintf(&b, "Cc: %s\n", strings.Join(m.Cc, ", "))
	}
	b.WriteString("\n")
	b.WriteString(body)
	args := protocol.SendArgs{FromMailbox: in.Mailbox, To: in.To, Cc: in.Cc, Subject: subject, Body: b.String(),
		Attachments: atts, DryRun: in.DryRun, IdempotencyKey: in.IdempotencyKey}
	// A forward starts a new thread: the protocol ties References to a reply.
	return s.send(ctx, args)
}

// readWhole reads a message's whole body window by window (up to
// maxForwardChars): a forward must not cut the original short.
func (s *Server) readWhole(ctx context.Context, args protocol.MessageReadArgs) (*protocol.Message, string, error) {
	args.MaxChars = MaxReadWindow
	var body strings.Builder
	var first *protocol.Message
	for {
		m, err := s.read(ctx, args)
		if err != nil {
			return nil, "", err
		}
		if first == nil {
			first = m
		}
		body.WriteString(m.Body)
		n := utf8.RuneCountInString(m.Body)
		args.Offset += n
		if n == 0 || !m.Truncated || args.Offset >= m.BodyChars {
			break
		}
		if args.Offset >= maxForwardChars {
			return nil, "", fail(protocol.CodeTooLarge, "the message body exceeds %d characters", maxForwardChars)
		}
	}
	return first, body.String(), nil
}
