package outbound

import (
	"fmt"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// RawRequest is a message the daemon wrote itself (a TLS report), sent from
// one of its mailboxes: signed with every DKIM key, queued and kept as that
// mailbox's sent copy like any send, but neither composed nor held to the
// mailbox's send policy (the operator's daemon sends it, not an agent).
type RawRequest struct {
	Mailbox, MailboxID string
	From               string // the From address, and the envelope sender before the return path
	To                 []string
	MessageID          string // as in the message, without angle brackets
	Subject            string
	Raw                []byte // the whole message, unsigned, CRLF line ends
	// Body and Attachments are the sent copy's Markdown and files.
	Body        string
	Attachments []store.AttachmentData
}

// SendRaw signs and queues req; it returns the sent copy's id. It does not
// wait for the first attempt.
func (s *Service) SendRaw(req RawRequest) (string, error) {
	var keys []*dkim.Key
	if s.Keys != nil {
		keys = s.Keys()
	}
	signed, err := dkim.Sign(req.Raw, s.Domain(), keys)
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	now := s.now()
	var rcpts []protocol.RecipientStatus
	for _, r := range req.To {
		rcpts = append(rcpts, protocol.RecipientStatus{Address: r, Status: queue.StatusPending, UpdatedAt: now})
	}
	copyMsg := &store.Message{MessageID: req.MessageID, From: req.From, To: req.To, Subject: req.Subject, Date: now.UTC(),
		ReceivedAt: now.UTC(), SizeBytes: int64(len(signed)), AutoSubmitted: "auto-generated", Trusted: string(protocol.NoPolicy),
		Mailbox: req.Mailbox, Read: true, Outbound: true, DeliveryStatus: aggregate(rcpts), DeliveryDetails: toStoreDetails(rcpts),
		ThreadID: store.ThreadID(req.MessageID, nil, "", "", time.Time{}, "")}
	sentID, release, err := s.Sent.Store.Reserve(req.Mailbox, protocol.FolderSent, copyMsg)
	if err != nil {
		return "", fmt.Errorf("reserving the sent copy: %w", err)
	}
	defer release()
	it := &queue.Item{ID: QueueID(req.Mailbox, sentID), SentID: sentID, Mailbox: req.Mailbox, MailboxID: req.MailboxID,
		MessageID: req.MessageID, MailFrom: req.From, Recipients: rcpts, Created: now, NextAttempt: now, Data: signed}
	if s.ReturnPath != nil {
		it.MailFrom = s.ReturnPath(req.From, req.MailboxID, sentID)
	}
	if it.Copy, err = encodeCopy(sentCopy{Message: copyMsg, Body: req.Body, Attachments: req.Attachments}); err != nil {
		return "", err
	}
	if err := s.Queue.Enqueue(it); err != nil {
		return "", fmt.Errorf("queueing: %w", err)
	}
	s.log().Info("message queued", "mailbox", req.Mailbox, "id", sentID, "message_id", req.MessageID, "recipients", len(rcpts), "size", len(signed), "kind", "generated")
	return sentID, nil
}
