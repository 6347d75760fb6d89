package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mailctl/mailctl/daemon/bounce"
	"github.com/mailctl/mailctl/daemon/ingest"
	"github.com/mailctl/mailctl/daemon/intake"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// An inbound copy is durable before its 250 by a record in the inbound
// journal (daemon/intake), whose fsync concurrent deliveries share; its
// files are then written without fsyncs, and the journal's checkpoint makes
// them durable (syncfs) before the record goes. The crash points named here
// (internal/crashpoint) let a test kill the daemon between these steps.

// storeCopy stores one mailbox's copy of a message in folder: recorded in
// the inbound journal under the id the store chose (with its delivery key,
// so that a restart remembers the delivery again, whether it writes the
// copy again or finds it written), then
// written into the folder, then marked written for the next checkpoint. A
// repeat of a delivery stored lately is not stored again (dup).
func (b *inbound) storeCopy(key store.DeliveryKey, mailbox, folder string, m *store.Message, p *ingest.Parsed, c *copySource) (id string, dup bool, err error) {
	d := b.d
	sp, err := journalSpool(c.msg)
	if err != nil {
		return "", false, err
	}
	var t *intake.Ticket
	id, dup, err = d.store.DeliverOnceJournaled(key, mailbox, folder, m, p.Body, c, p.Attachments, func(id, ident string) error {
		crashpoint.Hit("inbound-reserved")
		// ident is the identity of the mailbox the store has open and
		// writes to, whatever is under its name by now.
		e := &intake.Entry{Mailbox: mailbox, Folder: folder, ID: id, Msg: *m, Prefix: c.ar, Key: hex.EncodeToString(key[:]), Identity: ident}
		var err error
		if t, err = d.intake.Add(e, c.msg.Bytes(), sp); err != nil {
			return fmt.Errorf("recording the message in the inbound journal: %w", err)
		}
		crashpoint.Hit("inbound-journaled")
		return nil
	})
	if err != nil {
		if t != nil {
			t.Abandon() // recorded, not written: the client retries
		}
		return "", false, err
	}
	if dup {
		return id, true, nil
	}
	crashpoint.Hit("inbound-written")
	t.Written()
	crashpoint.Hit("inbound-marked")
	return id, false, nil
}

// journalSpool is the journal's spool of a spooled message, nil for one
// held in memory.
func journalSpool(msg *smtpin.Message) (*intake.Spool, error) {
	if msg.Spool() == nil {
		return nil, nil
	}
	sp, ok := msg.Spool().(*intake.Spool)
	if !ok {
		return nil, errors.New("a spooled message not in the inbound journal's spool")
	}
	return sp, nil
}

// NewSpool gives the SMTP server a spool in the inbound journal for a
// message too large to hold (smtpin.Spooler).
func (b *inbound) NewSpool() (smtpin.Spool, error) { return b.d.intake.NewSpool() }

// intakeService runs the inbound journal's checkpoints. It starts before the
// listeners: first it writes again the copies the journal recorded before
// the daemon stopped and does not know to be written.
type intakeService struct {
	d       *Daemon
	pending []*intake.Pending
	cancel  context.CancelFunc
	done    chan struct{}
}

// openIntake opens the inbound journal in the state directory.
func (d *Daemon) openIntake() (*intakeService, error) {
	j, pending, err := intake.Open(d.cfg().Paths.InboundDir(), intake.Options{Sync: d.store.Sync,
		Logf:    func(msg string, args ...any) { d.log.Warn(msg, args...) },
		Written: d.rememberWritten})
	if err != nil {
		return nil, fmt.Errorf("opening the inbound journal: %w", err)
	}
	d.intake = j
	return &intakeService{d: d, pending: pending, done: make(chan struct{})}, nil
}

func (s *intakeService) Start(context.Context) error {
	d := s.d
	if len(s.pending) > 0 {
		d.log.Info("writing the messages the inbound journal holds from before the restart", "messages", len(s.pending))
		for _, p := range s.pending {
			s.replay(p)
		}
		s.pending = nil
		if err := d.intake.Checkpoint(); err != nil {
			d.log.Error("inbound checkpoint after the restart failed", "err", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.done)
		d.intake.Run(ctx)
	}()
	return nil
}

// rememberWritten remembers again the delivery of a copy the inbound
// journal holds as written: the store keeps a journaled delivery in memory
// until the checkpoint's Sync commits it (store.DeliverOnceJournaled), so
// one killed before that checkpoint forgot it, and the sender's retry of a
// message it never saw answered must still be known as a repeat.
func (d *Daemon) rememberWritten(e intake.Entry) {
	if !d.sameMailbox(e) {
		return // deleted since, perhaps made again by someone else
	}
	key, err := hex.DecodeString(e.Key)
	if err != nil || len(key) != len(store.DeliveryKey{}) {
		return // recorded without a key: nothing to remember
	}
	if err := d.store.RememberDelivery(store.DeliveryKey(key), e.Mailbox, e.Folder, e.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		// A repeat is then stored again: a duplicate, never a loss.
		d.log.Warn("a message in the inbound journal is not remembered as delivered", "mailbox", e.Mailbox, "id", e.ID, "err", err)
	}
}

// replay writes one copy again, replacing what a crash left of it, and
// does what its first write did after the files: it remembers the delivery
// (so that the sender's retry of a message it never saw answered is known
// as a repeat), applies the delivery report it is to the sent message, and
// announces it. The listeners are not open yet: no retry comes first.
func (s *intakeService) replay(p *intake.Pending) {
	d := s.d
	// Held as a delivery holds it, so that the mailbox found the copy's
	// own is the one written into and announced to, whenever the socket
	// starts taking deletes.
	defer d.ctl.HoldNames(p.Mailbox)()
	if !d.sameMailbox(p.Entry) {
		// Deleted after the copy was recorded, and perhaps made again
		// under the same name by someone else: the copy was the deleted
		// mailbox's and goes with it.
		d.log.Warn("a message in the inbound journal is for a mailbox that is gone; dropped", "mailbox", p.Mailbox, "id", p.ID)
		p.Abandon()
		return
	}
	parsed, err := ingest.ParseFrom(p.Open, p.Size, ingest.Options{MaxAttachmentBytes: d.cfg().SMTP.MaxMessageBytes,
		Spill: func() (*store.Spill, error) { return d.store.NewSpill(p.Mailbox, p.Folder) }})
	if err != nil {
		d.log.Error("a message in the inbound journal is unreadable; it stays there", "mailbox", p.Mailbox, "id", p.ID, "err", err)
		return
	}
	defer parsed.Discard()
	m := p.Msg
	if err := d.store.ReplaceUnsynced(p.Mailbox, p.Folder, p.ID, &m, parsed.Body, replaySource{p}, parsed.Attachments); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			d.log.Warn("a message in the inbound journal is for a mailbox that is gone; dropped", "mailbox", p.Mailbox, "id", p.ID)
			p.Abandon()
			return
		}
		d.log.Error("writing a message from the inbound journal failed; it stays there for the next start", "mailbox", p.Mailbox, "id", p.ID, "err", err)
		return
	}
	if key, err := hex.DecodeString(p.Key); err == nil && len(key) == len(store.DeliveryKey{}) {
		if err := d.store.RememberDelivery(store.DeliveryKey(key), p.Mailbox, p.Folder, p.ID); err != nil {
			// A repeat is then stored again: a duplicate, never a loss.
			d.log.Warn("a message from the inbound journal is not remembered as delivered", "mailbox", p.Mailbox, "id", p.ID, "err", err)
		}
	}
	crashpoint.Hit("inbound-replayed")
	p.Written()
	if rep := reportOf(parsed); rep != nil && d.dsn != nil && strings.HasPrefix(m.Tag, bounce.TagPrefix) {
		// Applied at most once: its first write may have got that far.
		done, applied := d.dsn.begin(p.Mailbox, m.Tag, *rep)
		if !applied {
			d.dsn.apply(p.Mailbox, m.Tag, *rep)
		}
		done()
	}
	d.log.Info("message stored from the inbound journal", "mailbox", p.Mailbox, "folder", p.Folder, "id", p.ID, "from", m.From, "size", m.SizeBytes)
	if p.Folder == protocol.FolderInbox {
		d.inbound.announce(p.Mailbox, "", p.ID, &m, parsed)
	}
}

// sameMailbox reports whether the mailbox now under the name of a journal
// record's copy is the one the copy was delivered to. A record from before
// identities were recorded names its mailbox by name only. A mailbox that
// is gone is left to the write, which drops the copy.
func (d *Daemon) sameMailbox(e intake.Entry) bool {
	if e.Identity == "" {
		return true
	}
	ident, err := d.store.MailboxIdentity(e.Mailbox)
	if err != nil {
		return true // gone (the write drops the copy), or unreadable (the write says why)
	}
	return ident == e.Identity
}

func (s *intakeService) Stop(ctx context.Context) error {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	// What was written since the last checkpoint: durable now, so that a
	// clean stop leaves the journal empty.
	err := s.d.intake.Checkpoint()
	return errors.Join(err, s.d.intake.Close())
}

// replaySource is a replayed copy's raw message (store.RawSource): its
// prefix, then its message from the journal.
type replaySource struct{ p *intake.Pending }

func (r replaySource) Size() int64 { return int64(len(r.p.Prefix)) + r.p.Size }

func (r replaySource) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, r.p.Prefix)
	if err != nil {
		return int64(n), err
	}
	k, err := io.Copy(w, r.p.Open())
	return int64(n) + k, err
}
