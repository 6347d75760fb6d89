package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/outbound/compose"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// A draft is a message file in the mailbox's drafts folder with the
// frontmatter of any other message, so its owner may edit it on disk.
// draft.send reads it from disk as it is then and sends it through the
// same path as the send verb.

func draftArgs(a *protocol.DraftArgs) protocol.SendArgs {
	return protocol.SendArgs{FromMailbox: a.Mailbox, To: a.To, Cc: a.Cc, Bcc: a.Bcc, ReplyTo: a.ReplyTo, Subject: a.Subject,
		Body: a.Body, Attachments: a.Attachments, InReplyTo: a.InReplyTo, References: a.References}
}

// checkDraftSendAt checks a draft's send_at now; the send checks it again.
func (s *Server) checkDraftSendAt(at *time.Time) (*time.Time, error) {
	if at == nil {
		return nil, nil
	}
	if err := outbound.CheckSendAt(at, s.now()); err != nil {
		return nil, err
	}
	t := at.UTC()
	return &t, nil
}

func (s *Server) draftOf(mailbox string, m *store.Message) protocol.Draft {
	return protocol.Draft{ID: m.ID, Mailbox: mailbox, Path: s.store.Path(mailbox) + "/" + protocol.FolderDrafts + "/" + m.ID + ".md",
		Subject: m.Subject, To: nonNil(m.To), SendAt: m.SendAt}
}

// noDraft is the not_found of a draft id.
func noDraft(mailbox, id string) *protocol.Error {
	return notFoundIn(protocol.MissingDraft, []string{id}, mailbox, protocol.FolderDrafts)
}

func handleDraftCreate(_ context.Context, s *Server, c *call, a *protocol.DraftArgs) (any, error) {
	box := c.box()
	if a.ReplyToID != "" {
		if err := s.draftReply(c, box.Name, a); err != nil {
			return nil, err
		}
	}
	atts, err := compose.CheckDraft(draftArgs(a))
	if err != nil {
		return nil, err
	}
	sendAt, err := s.checkDraftSendAt(a.SendAt)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	m := &store.Message{From: s.address(box.Name), To: a.To, Cc: a.Cc, Bcc: a.Bcc, ReplyTo: a.ReplyTo, Subject: a.Subject,
		InReplyTo: a.InReplyTo, References: a.References, Date: now, ReceivedAt: now, Mailbox: box.Name, Read: true,
		Trusted: string(protocol.NoPolicy), SendAt: sendAt}
	id, _, err := s.store.Deliver(box.Name, protocol.FolderDrafts, m, a.Body, nil, atts)
	if err != nil {
		return nil, storeErr(err, "drafts of "+box.Name, noFolder(box.Name, protocol.FolderDrafts))
	}
	m.ID = id
	return s.draftOf(box.Name, m), nil
}

// draftReply fills a reply draft from the stored message it answers: the
// thread, the subject and the recipients, where the caller gave none.
func (s *Server) draftReply(c *call, mailbox string, a *protocol.DraftArgs) error {
	parent, err := s.replyParent(c, mailbox, a.ReplyToID)
	if err != nil {
		return err
	}
	// The parent's headers are its sender's, made to fit as a reply's
	// (compose.ReplyThread and the rest): a malformed id or address among
	// them is left out, an over-long word of its subject cut.
	if inReplyTo, refs := compose.ReplyThread(parent); a.InReplyTo == "" && inReplyTo != "" {
		a.InReplyTo, a.References = inReplyTo, refs
	}
	if len(a.To) == 0 {
		switch {
		case parent.Outbound:
			a.To = append([]string(nil), parent.To...)
		case len(parent.ReplyTo) > 0 || parent.From != "":
			a.To, _ = compose.ReplyRecipients(parent) // none usable: the draft waits for one
		}
	}
	if a.Subject == "" {
		a.Subject = compose.ReplySubject(parent.Subject)
	}
	return nil
}

func handleDraftUpdate(_ context.Context, s *Server, c *call, a *protocol.DraftUpdateArgs) (any, error) {
	box := c.box()
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "draft id %q: %v", a.ID, err)
	}
	if a.SendAt != nil && a.ClearSendAt {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "send_at and clear_send_at exclude each other: choose one")
	}
	sendAt, err := s.checkDraftSendAt(a.SendAt)
	if err != nil {
		return nil, err
	}
	var atts []store.AttachmentData
	if a.Attachments != nil {
		if atts, err = compose.CheckDraft(protocol.SendArgs{Attachments: *a.Attachments}); err != nil {
			return nil, err
		}
		if atts == nil {
			atts = []store.AttachmentData{} // remove them all
		}
	}
	var out *store.Message
	err = s.reads(c, 1).Rewrite(box.Name, protocol.FolderDrafts, a.ID, func(m *store.Message) (*string, error) {
		set := func(dst *[]string, src *[]string) {
			if src != nil {
				*dst = append([]string(nil), (*src)...)
			}
		}
		set(&m.To, a.To)
		set(&m.Cc, a.Cc)
		set(&m.Bcc, a.Bcc)
		set(&m.ReplyTo, a.ReplyTo)
		if a.Subject != nil {
			m.Subject = *a.Subject
		}
		switch {
		case sendAt != nil:
			m.SendAt = sendAt
		case a.ClearSendAt:
			m.SendAt = nil
		}
		if _, err := compose.CheckDraft(protocol.SendArgs{To: m.To, Cc: m.Cc, Bcc: m.Bcc, ReplyTo: m.ReplyTo, Subject: m.Subject,
			InReplyTo: m.InReplyTo, References: m.References}); err != nil {
			return nil, err
		}
		m.Date = s.now().UTC()
		out = m
		return a.Body, nil // nil keeps the body on disk, unread
	}, atts)
	if err != nil {
		return nil, storeErr(err, "draft "+a.ID, noDraft(box.Name, a.ID))
	}
	return s.draftOf(box.Name, out), nil
}

// draftsSending holds the drafts being sent, by mailbox identity and id.
var draftsSending sync.Map

// removeDraft takes a sent draft out of drafts/ if it is still the version
// that was sent (a variable so that a test can stop the daemon's work, or
// edit the draft, between queueing and removal).
var removeDraft = func(s *Server, mailbox, id, version string) (bool, error) {
	return s.store.RemoveMessageIfVersion(mailbox, protocol.FolderDrafts, id, version)
}

func handleDraftSend(ctx context.Context, s *Server, c *call, a *protocol.DraftSendArgs) (any, error) {
	box := c.box()
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "draft id %q: %v", a.ID, err)
	}
	// One send of a draft at a time: a second call while the first runs
	// would send it twice; after it, the draft is gone.
	key := box.ID + "/" + a.ID
	if _, busy := draftsSending.LoadOrStore(key, true); busy {
		return nil, protocol.Errorf(protocol.CodeConflict, "draft %s is being sent right now", a.ID)
	}
	defer draftsSending.Delete(key)
	// The file as it is now, with whatever its owner changed by hand, and
	// the version of it that is read. Its owner may have made it, or an
	// attachment it lists, any size: each is sized with fstat and held to
	// the mailbox's send limits, and charged, before a byte is read.
	version, err := s.store.Version(box.Name, protocol.FolderDrafts, a.ID)
	if err != nil {
		return nil, storeErr(err, "draft "+a.ID, noDraft(box.Name, a.ID))
	}
	pol := s.cfg().EffectiveSend(box.Name)
	dr, release, err := s.reads(c, sendCopies).ReadDraft(box.Name, protocol.FolderDrafts, a.ID,
		store.DraftLimits{File: pol.MaxMessageBytes, Attachments: pol.MaxAttachmentBytes, Count: pol.MaxAttachments})
	if err != nil {
		return nil, draftReadErr(box.Name, a.ID, err)
	}
	defer release()
	if again, err := s.store.Version(box.Name, protocol.FolderDrafts, a.ID); err != nil || again != version {
		return nil, protocol.Errorf(protocol.CodeConflict, "draft %s changed while it was being read: send it again", a.ID)
	}
	m, body, atts := dr.Message, dr.Body, dr.Attachments
	args := &protocol.SendArgs{FromMailbox: box.Name, To: m.To, Cc: m.Cc, Bcc: m.Bcc, ReplyTo: m.ReplyTo, Subject: m.Subject,
		Body: body, InReplyTo: m.InReplyTo, References: m.References, DryRun: a.DryRun, WaitMS: a.WaitMS, SendAt: a.SendAt}
	if args.SendAt == nil && m.SendAt != nil && m.SendAt.After(s.now()) {
		args.SendAt = m.SendAt // a draft whose time has passed goes at once
	}
	for _, at := range atts {
		args.Attachments = append(args.Attachments, protocol.SendAttachment{Filename: at.Filename, ContentType: at.ContentType, Data: at.Data})
	}
	if len(args.To)+len(args.Cc)+len(args.Bcc) == 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "draft %s has no recipient: add to, cc or bcc (draft.update, or edit %s)", a.ID, s.draftOf(box.Name, m).Path)
	}
	// A draft that was queued but not yet removed (the daemon stopped in
	// between) must not go out twice when it is sent again unchanged: what
	// is sent, this draft's id and its content as read (the Markdown file
	// and the attachments it lists, dr.Digest), is the send's idempotency
	// key, and its record is kept for as long as the draft is there with
	// this content, past delivery.idempotency_window too
	// (outbound.DraftSource). The file's version is no part of the key: a
	// restore on another host (or any copy of the files) makes new files
	// with the same content, and the same send. An edit is new content,
	// which is a new message.
	args.IdempotencyKey = draftKey(a.ID, dr.Digest)
	res, err := s.sendFrom(ctx, c, box, args, &outbound.DraftSource{ID: a.ID, Version: version, Digest: dr.Digest,
		VersionKey: draftKey(a.ID, version)})
	if err != nil || a.DryRun {
		return res, err
	}
	// The sent copy is in sent/ now: the draft has become it, unless it
	// was edited meanwhile. An edit is never deleted unsent: it stays, and
	// the answer says so.
	removed, err := removeDraft(s, box.Name, a.ID, version)
	if err != nil {
		s.log.Warn("draft sent but not removed from drafts", "mailbox", box.Name, "id", a.ID, "err", err)
	}
	if err == nil && !removed {
		s.log.Info("draft edited while it was being sent: the edit is kept in drafts", "mailbox", box.Name, "id", a.ID)
		res.DraftKept = true
	}
	return res, nil
}

// draftKey is the idempotency key of a draft's send: its id and its
// content's digest; an earlier release's, its id and its file's version.
func draftKey(id, of string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + of))
	return "draft-" + hex.EncodeToString(sum[:])
}

func handleDraftDelete(_ context.Context, s *Server, c *call, a *protocol.DraftIDArgs) (any, error) {
	box := c.box()
	if err := store.ValidID(a.ID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "draft id %q: %v", a.ID, err)
	}
	if err := s.store.RemoveMessage(box.Name, protocol.FolderDrafts, a.ID); err != nil {
		return nil, storeErr(err, "draft "+a.ID, noDraft(box.Name, a.ID))
	}
	return protocol.DraftDeleted{ID: a.ID, Deleted: true}, nil
}

// sendCopies is how many times a draft's bytes are charged while it is
// sent: as read, then composed (the attachments in base64), signed and
// queued with its sent copy.
const sendCopies = 4

// draftReadErr words why a draft could not be read for sending.
func draftReadErr(mailbox, id string, err error) error {
	var le *store.LimitError
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe): // the caller's memory budget
		return err
	case errors.As(err, &le) && le.What == "attachment count":
		return protocol.Errorf(protocol.CodeTooLarge, "draft %s: %v (send.max_attachments): send fewer, or put them in one archive", id, le)
	case errors.As(err, &le) && le.What == "attachments":
		return protocol.Errorf(protocol.CodeTooLarge, "draft %s: %v (send.max_attachment_bytes): attach less, or smaller files", id, le)
	case errors.As(err, &le):
		return protocol.Errorf(protocol.CodeTooLarge, "draft %s: %v (send.max_message_bytes): a message cannot be that large", id, le)
	case errors.Is(err, store.ErrNotFound) && strings.Contains(err.Error(), "attachment"):
		return protocol.Errorf(protocol.CodeInvalidInput, "draft %s: %v", id, err)
	case errors.Is(err, store.ErrNotFound):
		return storeErr(err, "draft "+id, noDraft(mailbox, id))
	case strings.Contains(err.Error(), "attachment"):
		return protocol.Errorf(protocol.CodeInvalidInput, "draft %s: %v", id, err)
	}
	return storeErr(err, "draft "+id, noDraft(mailbox, id))
}
