package compose

import (
	"cmp"
	"slices"
	"strings"

	"github.com/emersion/go-message/mail"

	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// MaxReferences bounds the ids a message's References carries: the first
// (the thread's root) and the last ones (the nearest parents), which are
// what threading readers use. A longer list, the caller's or a parent's,
// loses the ones in between.
const MaxReferences = 100

func trimReferences(refs []string) []string {
	if len(refs) <= MaxReferences {
		return refs
	}
	return append(refs[:1:1], refs[len(refs)-(MaxReferences-1):]...)
}

// thread is where a message sits in a conversation.
type thread struct {
	subject   string
	inReplyTo string
	refs      []string
}

// threadOf threads a message from the stored parent when there is one, else
// from the caller's in_reply_to and references. A reply to a stored parent
// also takes its recipients (and, with reply_all, the parent's other
// recipients) when the caller names none.
func threadOf(in Input, p *parties) (thread, error) {
	a := in.Args
	th := thread{subject: a.Subject}
	var err error
	switch {
	case in.Parent != nil:
		if th, err = replyThread(in.Parent, th); err != nil {
			return th, err
		}
		if a.AutoReply {
			to, err := autoReplyTo(in.Parent, a)
			if err != nil {
				return th, err
			}
			p.to = []*mail.Address{to}
		} else if err := replyRecipients(in.Parent, a.ReplyAll, p); err != nil {
			return th, err
		}
		if !hasRePrefix(th.subject) {
			th.subject = "Re: " + th.subject
		}
		return th, nil
	case a.InReplyTo != "":
		if th.inReplyTo, err = msgID("in_reply_to", a.InReplyTo); err != nil {
			return th, err
		}
		if th.refs, err = parseEach("references", a.References, msgID); err != nil {
			return th, err
		}
		if len(th.refs) == 0 || th.refs[len(th.refs)-1] != th.inReplyTo {
			th.refs = append(th.refs, th.inReplyTo)
		}
	case len(a.References) > 0:
		return th, invalid("references needs in_reply_to (or a reply to a stored message)")
	}
	if th.inReplyTo != "" && !hasRePrefix(th.subject) {
		th.subject = "Re: " + th.subject
	}
	return th, nil
}

func replyThread(parent *store.Message, th thread) (thread, error) {
	th.inReplyTo, th.refs = ReplyThread(parent)
	if th.subject == "" {
		th.subject = ReplySubject(parent.Subject)
	}
	return th, nil
}

// ReplyThread is what a reply to parent carries in In-Reply-To and
// References: the parent's Message-ID and its References followed by it.
// The parent's headers are its sender's: an id among them that could not
// be written as a msg-id is left out (the parent's own as well, the reply
// then threading by References alone), never a reason to refuse the reply.
func ReplyThread(parent *store.Message) (inReplyTo string, refs []string) {
	for _, r := range parent.References {
		if id, err := msgID("references", r); err == nil {
			refs = append(refs, id)
		}
	}
	if id, err := msgID("message_id", parent.MessageID); err == nil {
		inReplyTo = id
		refs = append(refs, id)
	}
	return inReplyTo, refs
}

// ReplySubject is the subject of a reply to a message with subject s: "Re: "
// before it unless it has one, made to fit a header as the caller's subject
// must (checkHeaderValue): the parent's sender chose it, and a reply that
// names none takes it. Every control character (C0 with the line breaks,
// NUL and tab, DEL, C1) becomes a space, bytes that are not UTF-8 become
// U+FFFD, and a word past MaxHeaderWord bytes is cut there.
func ReplySubject(s string) string {
	s = protocol.SubjectOf(s)
	if !hasRePrefix(s) {
		s = "Re: " + s
	}
	return s
}

// replySource is where a reply to parent goes when the caller names no
// one: where the parent asked answers to go, its Reply-To, else its From.
func replySource(parent *store.Message) []string {
	if len(parent.ReplyTo) > 0 {
		return parent.ReplyTo
	}
	return []string{parent.From}
}

// ReplyRecipients is replySource without the addresses a reply cannot be
// sent to (as the address strings the parent has), or the error of the
// first when none is left.
func ReplyRecipients(parent *store.Message) ([]string, error) {
	var out []string
	for _, s := range replySource(parent) {
		if _, err := ParseAddress("parent sender", s); err == nil {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		_, err := usable("parent sender", replySource(parent))
		return nil, err
	}
	return out, nil
}

func replyRecipients(parent *store.Message, all bool, p *parties) error {
	if len(p.to) == 0 {
		var err error
		if p.to, err = usable("parent sender", replySource(parent)); err != nil {
			return err
		}
	}
	if !all {
		return nil
	}
	// The parent's other recipients are its sender's list: one address
	// that cannot be sent to costs the reply that recipient, not the reply.
	extra, _ := usable("parent recipients", slices.Concat(parent.To, parent.Cc))
	for _, x := range extra {
		if !strings.EqualFold(x.Address, p.from.Address) {
			p.cc = append(p.cc, x)
		}
	}
	return nil
}

// autoReplyTo is the one address an automatic reply to parent goes to
// (RFC 3834 section 4): the envelope sender the parent came with, never
// its Reply-To or its other recipients, so that one message naming many
// addresses cannot make an agent's responder write to each of them. A
// parent stored before its return path was recorded is answered at the
// first usable address of its Reply-To, else its From. As section 2 asks,
// nothing automatic answers a bounce (the null sender) or a message that
// is itself automatic, whatever a hook was set to fire on.
func autoReplyTo(parent *store.Message, a protocol.SendArgs) (*mail.Address, error) {
	const why = "an automatic reply goes to the return path of the message answered and nowhere else (RFC 3834)"
	switch {
	case a.ReplyAll:
		return nil, invalid("auto_reply and reply_all exclude each other: %s", why)
	case parent.Outbound:
		return nil, invalid("auto_reply answers mail received, and the message answered is one this mailbox sent: leave out auto_reply")
	case len(a.To)+len(a.Cc)+len(a.Bcc) > 0:
		return nil, invalid("auto_reply takes no to, cc or bcc: %s", why)
	case protocol.IsAutoSubmitted(parent.AutoSubmitted):
		return nil, invalid("the message answered is itself automatic (its Auto-Submitted is not \"no\"): nothing automatic answers it, so that two responders do not answer each other forever (RFC 3834); leave out auto_reply only if a person wrote this reply")
	}
	sender, recorded := parent.EnvelopeSender()
	switch {
	case recorded && sender == "", parent.IsDSN:
		return nil, invalid("the message answered came from the null sender <> (a bounce or another delivery report): nothing automatic answers it (RFC 3834)")
	case recorded:
		return ParseAddress("parent return path", sender)
	}
	l, err := usable("parent sender", replySource(parent))
	if err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, invalid("the message answered names no sender to reply to")
	}
	return l[0], nil
}

// usable parses the addresses of list a reply may send to, leaving out
// those it cannot (a local part that needs quotes, no domain, a broken
// header's fragment); none usable is the first one's error.
func usable(field string, list []string) ([]*mail.Address, error) {
	var out []*mail.Address
	var first error
	for _, s := range list {
		a, err := ParseAddress(field, s)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 && first != nil {
		return nil, first
	}
	return out, nil
}

func hasRePrefix(s string) bool {
	return len(s) >= 3 && strings.EqualFold(s[:3], "re:")
}
