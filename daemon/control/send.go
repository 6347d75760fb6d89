package control

import (
	"context"
	"errors"
	"strings"

	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// sender is the send pipeline, or an error saying there is none.
func (s *Server) sender() (Outbound, error) {
	o := s.b.Outbound()
	if o == nil {
		return nil, protocol.Errorf(protocol.CodeUnavailable, "sending is not available on this daemon")
	}
	return o, nil
}

func handleSend(ctx context.Context, s *Server, c *call, a *protocol.SendArgs) (any, error) {
	return s.sendFrom(ctx, c, c.box(), a, nil)
}

// sendFrom sends a as mailbox m, which the caller was checked to own: the
// one path of every send (the send verb and a draft's).
func (s *Server) sendFrom(ctx context.Context, c *call, m *registry.Mailbox, a *protocol.SendArgs, draft *outbound.DraftSource) (protocol.SendResult, error) {
	o, err := s.sender()
	if err != nil {
		return protocol.SendResult{}, err
	}
	if !a.AllowEmpty && a.ReplyToID == "" && strings.TrimSpace(a.Subject) == "" && strings.TrimSpace(a.Body) == "" && strings.TrimSpace(a.HTMLBody) == "" && len(a.Attachments) == 0 {
		return protocol.SendResult{}, protocol.Errorf(protocol.CodeInvalidInput, "the message has no subject, no body and no attachment: give a subject or a body, or set allow_empty if an empty message is really meant")
	}
	req := outbound.SendRequest{Mailbox: m.Name, MailboxID: m.ID, OwnerUID: m.UID, FromAddress: s.address(m.Name), FromName: s.b.DisplayName(m.Name), Policy: s.cfg().EffectiveSend(m.Name), Args: *a, Draft: draft}
	if a.ReplyToID != "" {
		parent, err := s.replyParent(c, m.Name, a.ReplyToID)
		if err != nil {
			return protocol.SendResult{}, err
		}
		req.Parent = parent
		replyToOwn(&req.Args, parent)
	}
	res, err := o.Send(ctx, req)
	if errors.Is(err, outbound.ErrMailboxGone) {
		return res, notFoundMailbox(m.Name) // deleted, and perhaps created again, since the access check
	}
	return res, err
}

// replyParent is the stored message of mailbox that reply_to_id names: one
// it received (in its inbox or archive) or one it sent.
func (s *Server) replyParent(c *call, mailbox, id string) (*store.Message, error) {
	if err := store.ValidID(id); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "reply_to_id %q: %v", id, err)
	}
	for _, f := range []string{protocol.FolderInbox, protocol.FolderArchive, protocol.FolderSent} {
		// Its frontmatter is all a reply needs, whatever the body's size.
		p, err := s.reads(c, 1).Header(mailbox, f, id)
		switch {
		case err == nil:
			return p, nil
		case !errors.Is(err, store.ErrNotFound):
			return nil, storeErr(err, "message "+id, nil)
		}
	}
	return nil, notFound(protocol.MissingMessage, []string{id}, "to reply to in "+mailbox+"/inbox, archive or sent")
}

// replyToOwn addresses a reply to one of the mailbox's own sent messages as
// any mail client does: to that message's recipients (and, with reply_all,
// its Cc), not to its sender, which is the mailbox itself. Recipients the
// caller named win.
func replyToOwn(a *protocol.SendArgs, parent *store.Message) {
	if !parent.Outbound || len(a.To) > 0 {
		return
	}
	a.To = append([]string(nil), parent.To...)
	if a.ReplyAll {
		a.Cc = append(append([]string(nil), a.Cc...), parent.Cc...)
		a.ReplyAll = false // the parent's To and Cc are already the recipients
	}
}

func handleSendStatus(_ context.Context, s *Server, c *call, a *protocol.SendStatusArgs) (any, error) {
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "id %q: %v", a.ID, err)
	}
	o, err := s.sender()
	if err != nil {
		return nil, err
	}
	res, err := o.Status(a.Mailbox, a.ID, s.reads(c, 1).Header)
	missing := notFoundIn(protocol.MissingMessage, []string{a.ID}, a.Mailbox, protocol.FolderSent)
	if protocol.CodeOf(err) == protocol.CodeNotFound {
		return res, missing // the pipeline's words for it are its own: this is the one wording
	}
	return res, storeErr(err, "sent message "+a.ID, missing)
}
