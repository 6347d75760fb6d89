package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"

	"github.com/emersion/go-message/textproto"

	"github.com/mailctl/mailctl/daemon/bounce"
	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/daemon/trust"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// maxReturnedRaw bounds how much of a sent message is read to return its
// headers in a bounce; a larger one is described from its sent copy.
const maxReturnedRaw = 64 << 20

// bounceToSender puts a delivery status notification (RFC 3464) in the
// sending mailbox's inbox when a settled message has recipients that failed
// after the send was answered (a permanent failure on a later attempt, or
// the retry window running out), as RFC 5321 §6.1 asks of a server that
// accepted a message. It goes through the inbound store path, so on_receive
// hooks and watchers see it as any mail; it is Auto-Submitted, so hooks run
// for it only when they opt in. It is made once per message and set of
// failed recipients: its Message-ID is derived from them, and a report
// already in the inbox is not stored again.
func (o *outboundService) bounceToSender(mailbox, sentID string, res protocol.SendResult) {
	failed := o.svc.Unanswered(outbound.QueueID(mailbox, sentID), res)
	if len(failed) == 0 {
		return
	}
	d := o.d
	log := d.log.With("part", "bounce", "mailbox", mailbox, "id", sentID)
	// The frontmatter only: the sent copy is the owner's file, and its body
	// (which the owner may have made as large as the store allows) is not
	// needed.
	m, err := d.store.Header(mailbox, protocol.FolderSent, sentID)
	if err != nil {
		// No sent copy to link to (its owner removed or replaced it): the
		// sender is still told, from what the queue knows, as a delay
		// warning is.
		log.Warn("sent copy unreadable: the bounce names the message by its Message-ID only", "err", err)
		m = &store.Message{MessageID: res.MessageID}
	}
	raw, err := d.store.Raw(mailbox, protocol.FolderSent, sentID, maxReturnedRaw)
	if err != nil {
		raw = sentHeaders(m)
	}
	if m.IsDSN || isReport(raw) {
		log.Info("no bounce for an undeliverable report (loop protection)")
		return
	}
	cfg := d.cfg()
	rep := bounce.Report{ReportingMTA: cfg.Hostname, From: "MAILER-DAEMON@" + cfg.PrimaryDomain(), To: d.Address(mailbox),
		Date: d.now(), Original: raw, OriginalMessageID: strings.Trim(m.MessageID, "<>"), ArrivalDate: m.Date}
	for _, r := range failed {
		rep.Recipients = append(rep.Recipients, bounce.Failed{Address: r.Address, Code: r.Code, Detail: r.Detail,
			// Only the end of the retry window fails a recipient on a 4xx.
			Expired: r.Code >= 400 && r.Code < 500 || strings.HasPrefix(r.Detail, "gave up after")})
	}
	mid := rep.MessageID()
	if _, ok := d.store.FindByMessageID(mailbox, protocol.FolderInbox, mid); ok {
		return
	}
	if _, ok := d.store.FindByMessageID(mailbox, protocol.FolderInbox, "<"+mid+">"); ok {
		return
	}
	if err := d.deliverReport(mailbox, rep.From, rep.Bytes()); err != nil {
		log.Error("bounce not stored", "err", err)
		return
	}
	log.Info("bounce delivered to the sender", "recipients", len(rep.Recipients), "message_id", mid)
}

// delayWarning puts a delay warning (RFC 3464, action "delayed") in the
// sending mailbox's inbox for the recipients of a sent message still being
// retried (queue.DelayWarner, through the Recorder). It is made like the
// final bounce and carries only the daemon's words; its Message-ID is
// derived from the message and the recipients, so a warning made again
// after a crash (before the queue recorded it) is not stored twice.
//
// It is made holding the mailbox's name, for the mailbox that sent
// (mailboxID) only: one deleted meanwhile, perhaps made again by someone
// else, is warned of nothing. The queue holds none of its locks while it
// asks for a warning, so the hold may wait for a delete, but only as long
// as a copy of inbound mail waits (nameWait): the queue makes its warnings
// one after another, and a delete waiting behind its owner's long request
// must not hold up other mailboxes' warnings. A warning not made for it is
// made later (the queue tries again).
func (o *outboundService) delayWarning(mailbox, mailboxID, sentID, messageID string, waiting []protocol.RecipientStatus, until time.Time) error {
	if len(waiting) == 0 {
		return nil
	}
	d := o.d
	release, ok := d.ctl.HoldNameWithin(mailbox, nameWait)
	if !ok {
		return fmt.Errorf("mailbox %q is being deleted or created", mailbox)
	}
	defer release()
	if d.currentID(mailbox) != mailboxID {
		return nil
	}
	m, err := d.store.Header(mailbox, protocol.FolderSent, sentID) // the frontmatter only, as for a bounce
	if err != nil {
		// No sent copy to link to (its owner removed it): the sender is
		// still told, from what the queue knows.
		m = &store.Message{MessageID: messageID}
	}
	raw, err := d.store.Raw(mailbox, protocol.FolderSent, sentID, maxReturnedRaw)
	if err != nil {
		raw = sentHeaders(m)
	}
	if m.IsDSN || isReport(raw) {
		return nil // loop protection, as for bounces
	}
	cfg := d.cfg()
	rep := bounce.Report{ReportingMTA: cfg.Hostname, From: "MAILER-DAEMON@" + cfg.PrimaryDomain(), To: d.Address(mailbox),
		Date: d.now(), Original: raw, OriginalMessageID: strings.Trim(cmp.Or(m.MessageID, messageID), "<>"), ArrivalDate: m.Date,
		Delayed: true, RetryUntil: until}
	for _, r := range waiting {
		rep.Recipients = append(rep.Recipients, bounce.Failed{Address: r.Address, Code: r.Code, Detail: r.Detail})
	}
	mid := rep.MessageID()
	for _, id := range []string{mid, "<" + mid + ">"} {
		if _, ok := d.store.FindByMessageID(mailbox, protocol.FolderInbox, id); ok {
			return nil
		}
	}
	if err := d.deliverReport(mailbox, rep.From, rep.Bytes()); err != nil {
		return err
	}
	d.metrics.ops.delayWarnings.Inc()
	d.log.Info("delay warning delivered to the sender", "part", "bounce", "mailbox", mailbox, "id", sentID, "recipients", len(waiting), "message_id", mid)
	return nil
}

// deliverReport stores a message the daemon wrote itself in mailbox's inbox
// through the inbound path (events, on_receive hooks), recorded as what it
// is: generated here, with no checks run and none invented.
func (d *Daemon) deliverReport(mailbox, from string, raw []byte) error {
	if d.inbound == nil {
		return fmt.Errorf("inbound delivery is not available")
	}
	parsed, err := ingest.Parse(raw, ingest.Options{MaxAttachmentBytes: d.cfg().SMTP.MaxMessageBytes})
	if err != nil {
		return err
	}
	res := trust.DaemonReport(from)
	ar := res.AuthenticationResults(d.cfg().Hostname)
	rcpt := d.Address(mailbox)
	env := smtpin.Envelope{Helo: d.cfg().Hostname, Rcpts: []string{rcpt}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The daemon's own report reaches no return path: nothing to apply.
	c := &copySource{msg: smtpin.NewMessage(raw, 0), ar: ar, messageID: newMessageID(d.cfg().Hostname), parsed: parsed, stored: withHeader(ar, nil, raw), head: raw}
	return d.inbound.store(ctx, mailbox, route{Mailbox: mailbox}, env, []string{rcpt}, c, res, "")
}

// isReport reports whether raw's top-level Content-Type is a delivery status
// report (multipart/report; report-type=delivery-status).
func isReport(raw []byte) bool {
	// A header without the blank line after it (sentHeaders) ends at EOF.
	h, err := textproto.ReadHeader(bufio.NewReader(io.MultiReader(bytes.NewReader(raw), strings.NewReader("\r\n\r\n"))))
	if err != nil {
		return false
	}
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "multipart/report" && strings.EqualFold(params["report-type"], "delivery-status")
}

// sentHeaders describes a sent message from its sent copy when its raw
// form cannot be read.
func sentHeaders(m *store.Message) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: <%s>\r\n",
		m.From, strings.Join(m.To, ", "), mime.QEncoding.Encode("utf-8", m.Subject), m.Date.Format(time.RFC1123Z), strings.Trim(m.MessageID, "<>"))
	return []byte(b.String())
}
