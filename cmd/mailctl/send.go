package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/mcpshim"
	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "send", group: "mail", summary: "compose, sign and send a message from one of your mailboxes", run: cmdSend})
}

func cmdSend(args []string) int {
	cf := newClientFlags("send", "send --from MAILBOX --to ADDR... [--cc ADDR] [--bcc ADDR] [--reply-to ADDR] [--subject S] [--body TEXT | --body-file F] [--attach PATH]... [--text-only | --html-body-file F] [--in-reply-to MSGID] [--send-at TIME] [--force] [--dry-run] [--json]",
		`Sends a message from a mailbox you own. The body is Markdown: it goes out as
HTML (raw HTML in it is dropped) with the Markdown as the text part, or as plain
text with --text-only. The daemon signs it with DKIM, keeps a copy in the
mailbox's sent folder and delivers it; the command waits a few seconds for the
first attempt and prints each recipient's status. --dry-run checks policy,
renders and signs, and prints the size and envelope without sending; the
envelope sender is the mailbox's return path, name+bounce-<tag>@domain, where
<tag> stands for the tag the message gets when it is sent (made from the id
it is stored under, which a dry run does not have).
--send-at schedules the send: the queue holds the message until then
(mailctl queue reschedule or drop to change your mind).
Address flags repeat and also take comma-separated lists. Attachment files are
read by this command with your rights, at most 48 MiB together (what one
request carries; the mailbox's send limits apply too).

Examples:
    mailctl send --from agent --to bob@example.org --subject "Report" --body "**Done.**"
    mailctl send --from agent --to bob@example.org --subject "Reminder" --body "Standup in 10 minutes." --send-at 2h`).withJSON()
	var a protocol.SendArgs
	var to, cc, bcc, replyTo commaList
	var attach stringList
	var bodyFile, htmlFile string
	var wait time.Duration
	var sendAt string
	cf.fs.StringVar(&a.FromMailbox, "from", "", "mailbox to send from (you must own it)")
	cf.fs.Var(&to, "to", "recipient (repeatable)")
	cf.fs.Var(&cc, "cc", "Cc recipient (repeatable)")
	cf.fs.Var(&bcc, "bcc", "Bcc recipient, never shown in the message (repeatable)")
	cf.fs.Var(&replyTo, "reply-to", "Reply-To address (repeatable)")
	cf.fs.StringVar(&a.Subject, "subject", "", "subject")
	cf.fs.BoolVar(&a.AllowEmpty, "force", false, "send even with no subject, body or attachment")
	cf.fs.StringVar(&a.Body, "body", "", "body text (Markdown)")
	cf.fs.StringVar(&bodyFile, "body-file", "", "read the body from this file (- for stdin)")
	cf.fs.Var(&attach, "attach", "attach this file (repeatable)")
	cf.fs.BoolVar(&a.TextOnly, "text-only", false, "send plain text only, no HTML part")
	cf.fs.StringVar(&htmlFile, "html-body-file", "", "send this HTML file as the HTML part (the body, if any, becomes the text part)")
	cf.fs.StringVar(&a.InReplyTo, "in-reply-to", "", "Message-ID this message answers (sets In-Reply-To, References and Re:)")
	cf.fs.BoolVar(&a.DryRun, "dry-run", false, "validate, render and sign, but do not send")
	cf.fs.StringVar(&a.IdempotencyKey, "idempotency-key", "", "a retry with the same key returns the first result instead of sending again")
	cf.fs.StringVar(&sendAt, "send-at", "", "send at this time (RFC 3339, e.g. 2026-12-01T09:00:00Z, or a duration from now such as 2h)")
	cf.fs.DurationVar(&wait, "wait", 0, "how long the daemon waits for the first delivery attempt (default: its first_attempt_wait)")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	if err := checkSendFlags(&a, len(to)+len(cc)+len(bcc), bodyFile, htmlFile); err != nil {
		return usageError(cf.fs, "%v", err)
	}
	a.To, a.Cc, a.Bcc, a.ReplyTo = to, cc, bcc, replyTo
	if err := readSendInputs(&a, sendAt, bodyFile, htmlFile, attach); err != nil {
		return usageError(cf.fs, "%v", err)
	}
	if wait > 0 {
		a.WaitMS = int(wait.Milliseconds())
	}
	var res protocol.SendResult
	if err := cf.call(protocol.VerbSend, a, &res); err != nil {
		return cf.fail(withFlagNames(err))
	}
	if cf.json {
		return printJSON(res)
	}
	return printSendResult(res)
}

// checkSendFlags refuses flag combinations that cannot make a message.
func checkSendFlags(a *protocol.SendArgs, recipients int, bodyFile, htmlFile string) error {
	switch {
	case a.FromMailbox == "":
		return errors.New("--from MAILBOX is required")
	case recipients == 0:
		return errors.New("give at least one recipient with --to, --cc or --bcc")
	case strings.Contains(a.FromMailbox, "@"):
		local, _, _ := strings.Cut(a.FromMailbox, "@")
		local, _, _ = strings.Cut(local, "+")
		return fmt.Errorf("--from takes a mailbox name, not an address: try --from %s", local)
	case a.Body != "" && bodyFile != "":
		return errors.New("--body and --body-file exclude each other")
	case a.TextOnly && htmlFile != "":
		return errors.New("--text-only and --html-body-file exclude each other")
	}
	return nil
}

// readSendInputs fills a from the files and times the flags name: the body,
// the HTML body, the attachments (read with the caller's rights) and
// --send-at.
func readSendInputs(a *protocol.SendArgs, sendAt, bodyFile, htmlFile string, attach []string) error {
	if sendAt != "" {
		t, err := parseSendAt(sendAt)
		if err != nil {
			return err
		}
		a.SendAt = &t
	}
	if bodyFile != "" {
		b, err := readBodyFile(bodyFile)
		if err != nil {
			return err
		}
		a.Body = b
	}
	if htmlFile != "" {
		b, err := readFileBounded(htmlFile)
		if err != nil {
			return fmt.Errorf("reading the HTML body: %v", err)
		}
		a.HTMLBody = string(b)
	}
	atts, err := readAttachmentFiles(attach)
	a.Attachments = append(a.Attachments, atts...)
	return err
}

// readBodyFile reads a body from a file, or from standard input for "-".
func readBodyFile(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = readAllLimited(os.Stdin, protocol.MaxFrame)
	} else {
		b, err = readFileBounded(name)
	}
	if err != nil {
		return "", fmt.Errorf("reading the body: %v", err)
	}
	return string(b), nil
}

// readFileBounded reads a regular file (not a FIFO or a device, which could
// block or never end) of at most what a request may carry.
func readFileBounded(name string) ([]byte, error) {
	b, full, err := mcpshim.ReadRegularFile(name, protocol.MaxFrame)
	if err == nil && !full {
		err = fmt.Errorf("%s is larger than a request may carry (%d MiB)", name, protocol.MaxFrame>>20)
	}
	return b, err
}

// readAttachmentFiles reads files to attach, with the caller's rights.
func readAttachmentFiles(paths []string) ([]protocol.SendAttachment, error) {
	var out []protocol.SendAttachment
	var total int64
	for _, p := range paths {
		// Not a FIFO or device: the read must end. protocol.MaxFrame bounds
		// the files together, so that a long list of large files is refused
		// before all of it is in memory.
		b, full, err := mcpshim.ReadRegularFile(p, protocol.MaxFrame-total)
		if err != nil {
			return nil, fmt.Errorf("reading attachment: %v", err)
		}
		if !full && total == 0 {
			return nil, fmt.Errorf("attachment %s is larger than a request may carry (%d MiB)", p, protocol.MaxFrame>>20)
		}
		if !full {
			return nil, fmt.Errorf("the attachments come to more than a request may carry (%d MiB) with %s: attach fewer or smaller files", protocol.MaxFrame>>20, p)
		}
		total += int64(len(b))
		out = append(out, protocol.SendAttachment{Filename: filepath.Base(p), Data: b})
	}
	return out, nil
}

// withFlagNames rewords a daemon refusal that names a protocol argument the
// CLI sets with a flag.
func withFlagNames(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code == protocol.CodeInvalidInput && strings.Contains(pe.Message, "allow_empty") {
		pe.Message = strings.Replace(pe.Message, "set allow_empty", "pass --force", 1)
	}
	return err
}

func readAllLimited(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err == nil && len(b) > max {
		err = fmt.Errorf("more than %d bytes", max)
	}
	return b, err
}

// printSendResult prints what a send or drafts send did and returns the
// command's exit code: 1 when delivery failed.
func printSendResult(res protocol.SendResult) int {
	if res.Status == "dry_run" {
		fmt.Fprintf(stdout, "dry run: %d bytes, MAIL FROM:<%s>, RCPT TO: %s\nMessage-ID: <%s>\n", res.SizeBytes, inert(res.Envelope.MailFrom), inert(strings.Join(res.Envelope.RcptTo, ", ")), inert(res.MessageID))
		if strings.Contains(res.Envelope.MailFrom, protocol.PendingTag) {
			fmt.Fprintf(stdout, "%s: the return path's tag, made when the message is sent\n", protocol.PendingTag)
		}
		return 0
	}
	dup := ""
	if res.Duplicate {
		dup = " (answered from an earlier send with the same idempotency key)"
	}
	fmt.Fprintf(stdout, "%s: %s%s\nMessage-ID: <%s>\n", inert(res.ID), inert(describeStatus(res)), dup, inert(res.MessageID))
	for _, r := range res.Recipients {
		if r.Captured {
			fmt.Fprintf(stdout, "  %-32s %s\n", inert(r.Address), inert(r.Detail)) // the mailbox it went to
			continue
		}
		what := r.Status
		if r.Status == "delivered" && strings.HasPrefix(r.Detail, "delivered ") {
			what = r.Detail // where to: "delivered to mx.example.org", "delivered locally"
		}
		fmt.Fprintf(stdout, "  %-32s %s", inert(r.Address), inert(what))
		if r.TLS != "" {
			fmt.Fprintf(stdout, " tls=%s", inert(r.TLS))
		}
		if r.Status == "deferred" && !r.NextAttempt.IsZero() {
			fmt.Fprintf(stdout, " next=%s", r.NextAttempt.Local().Format(time.DateTime))
		}
		if r.Detail != "" && r.Status != "delivered" {
			// The remote server's reply: its words, shown as data.
			fmt.Fprintf(stdout, " (%s)", inert(r.Detail))
		}
		fmt.Fprintln(stdout)
	}
	if res.DraftKept {
		fmt.Fprintln(stdout, "the draft was edited while it was being sent: the version read went out, and the edit is still in drafts/")
	}
	if res.Status == "failed" {
		return 1
	}
	return 0
}

// describeStatus is a send's outcome in words, the status said once:
// `mailctl dev` captures outbound mail, which is then delivered to a local
// mailbox and not sent, and says so.
func describeStatus(res protocol.SendResult) string {
	switch res.Status {
	case "delivered":
		if len(res.Recipients) > 0 && !slices.ContainsFunc(res.Recipients, func(r protocol.RecipientStatus) bool { return !r.Captured }) {
			return "captured, not sent (mailctl dev keeps outbound mail; --deliver sends it for real)"
		}
		return "delivered"
	case "queued":
		return "queued, first attempt still running: check with `mailctl queue show " + res.ID + "`"
	case "deferred":
		return "deferred by a temporary failure; the queue retries with backoff"
	case "held":
		return "held for operator approval: `sudo mailctl queue approve " + res.ID + "`"
	case "scheduled":
		at := "its time"
		if res.SendAt != nil {
			at = res.SendAt.Local().Format(time.DateTime + " MST")
		}
		return "scheduled for " + at + ": the queue holds it until then (`mailctl queue reschedule` or `drop` change that)"
	case "partial":
		return "partly delivered: some recipients failed"
	case "failed":
		return "failed"
	}
	return res.Status
}

// parseSendAt reads a send time: RFC 3339, or a duration from now ("2h").
func parseSendAt(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil && protocol.CarriesTime(t) {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return time.Now().Add(d).Truncate(time.Second), nil
	}
	return time.Time{}, fmt.Errorf("time %q: give an RFC 3339 time such as 2026-12-01T09:00:00Z, or a duration from now such as 2h", v)
}
