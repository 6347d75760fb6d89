package hooks

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/mailctl/mailctl/protocol"
)

// Facts is what the gate and the environment need to know about one received
// message or one settled send. The daemon fills it from the message's
// frontmatter; every string may be attacker-written.
type Facts struct {
	Event     string // protocol.EventOnReceive or protocol.EventAfterSend
	Mailbox   string
	ID        string // store id of the message
	File      string // absolute path of the message's Markdown file
	From      string
	To        []string
	Subject   string
	MessageID string // the Message-ID header
	ThreadID  string
	Trusted   protocol.Verdict
	DKIM      string // summaries such as "pass:example.com"
	SPF       string
	DMARC     string
	// Loop protection inputs: the Auto-Submitted and List-Id header values.
	AutoSubmitted string
	ListID        string
	// after_send only.
	SendStatus string
	Recipients []protocol.RecipientStatus
}

// Bounds of environment values. Longer values are cut at a UTF-8 boundary.
const (
	MaxEnvValue     = 1024
	MaxEnvListValue = 4096 // MAILCTL_TO and MAILCTL_RECIPIENTS
)

// Fixed parts of the hook environment.
const (
	EnvPath = "/usr/local/bin:/usr/bin:/bin"
	EnvLang = "C.UTF-8"
)

// Env builds the complete environment of a run of h. Nothing is inherited from
// the daemon: the result holds PATH, HOME, USER, LOGNAME, SHELL (when the owner
// has one), LANG and the MAILCTL_* variables documented in docs/hooks.md, in a
// fixed order. Every MAILCTL_* variable of the event is present, possibly empty.
func Env(h protocol.Hook, f Facts, owner Owner) []string {
	env := []string{
		"PATH=" + EnvPath,
		"HOME=" + clean(cmp.Or(owner.Home, "/"), MaxEnvValue),
		"USER=" + clean(owner.Name, MaxEnvValue),
		"LOGNAME=" + clean(owner.Name, MaxEnvValue),
	}
	if owner.Shell != "" {
		env = append(env, "SHELL="+clean(owner.Shell, MaxEnvValue))
	}
	env = append(env, "LANG="+EnvLang)
	event := cmp.Or(f.Event, h.Event)
	add := func(k, v string, max int) { env = append(env, k+"="+clean(v, max)) }
	add("MAILCTL_EVENT", event, MaxEnvValue)
	add("MAILCTL_HOOK", h.Name, MaxEnvValue)
	add("MAILCTL_MAILBOX", cmp.Or(f.Mailbox, h.Mailbox), MaxEnvValue)
	add("MAILCTL_ID", f.ID, MaxEnvValue)
	add("MAILCTL_FILE", f.File, MaxEnvValue)
	add("MAILCTL_FROM", f.From, MaxEnvValue)
	add("MAILCTL_TO", joinList(f.To, ",", MaxEnvListValue), MaxEnvListValue)
	add("MAILCTL_SUBJECT", f.Subject, MaxEnvValue)
	add("MAILCTL_MESSAGE_ID", f.MessageID, MaxEnvValue)
	add("MAILCTL_THREAD_ID", f.ThreadID, MaxEnvValue)
	add("MAILCTL_TRUSTED", string(f.Trusted), MaxEnvValue)
	add("MAILCTL_DKIM", f.DKIM, MaxEnvValue)
	add("MAILCTL_SPF", f.SPF, MaxEnvValue)
	add("MAILCTL_DMARC", f.DMARC, MaxEnvValue)
	if event == protocol.EventAfterSend {
		add("MAILCTL_SEND_STATUS", f.SendStatus, MaxEnvValue)
		add("MAILCTL_RECIPIENTS", RecipientsValue(f.Recipients), MaxEnvListValue)
	}
	return env
}

// RecipientsValue encodes per-recipient outcomes as
// "addr=status[:code detail];addr=status...". Separators inside addresses and
// details are replaced so the value always splits cleanly on ';' and the first
// '='.
func RecipientsValue(rs []protocol.RecipientStatus) string {
	items := make([]string, 0, len(rs))
	for _, r := range rs {
		var b strings.Builder
		b.WriteString(strings.NewReplacer(";", ",", "=", "_").Replace(r.Address))
		b.WriteByte('=')
		b.WriteString(strings.NewReplacer(";", ",", ":", "_").Replace(r.Status))
		if r.Code != 0 || r.Detail != "" {
			b.WriteByte(':')
			var parts []string
			// Details from the queue already start with the reply code.
			if code := strconv.Itoa(r.Code); r.Code != 0 && !strings.HasPrefix(r.Detail, code+" ") {
				parts = append(parts, code)
			}
			if r.Detail != "" {
				parts = append(parts, strings.ReplaceAll(r.Detail, ";", ","))
			}
			b.WriteString(strings.Join(parts, " "))
		}
		items = append(items, b.String())
	}
	return joinList(items, ";", MaxEnvListValue)
}

// joinList joins whole items while they fit in max bytes, so a long list is
// shortened by dropping trailing items rather than by cutting one in half.
// A first item that alone exceeds max is cut by clean later.
func joinList(items []string, sep string, max int) string {
	var b strings.Builder
	for i, it := range items {
		it = strings.ReplaceAll(it, sep, " ")
		if i > 0 {
			if b.Len()+len(sep)+len(it) > max {
				break
			}
			b.WriteString(sep)
		}
		b.WriteString(it)
	}
	return b.String()
}

// clean makes s safe for an environment value or a log line: invalid UTF-8
// becomes U+FFFD, every control character (C0 including CR, LF and NUL, DEL,
// and C1 such as U+0085 NEXT LINE, which some programs take for a line
// break) becomes a space, and the result is cut to max bytes at a rune
// boundary.
func clean(s string, max int) string {
	return truncateUTF8(protocol.Printable(s), max)
}

// truncateUTF8 cuts valid UTF-8 s to at most max bytes without splitting a
// rune: the bytes of a rune the cut went through are dropped.
func truncateUTF8(s string, max int) string {
	return strings.ToValidUTF8(s[:min(len(s), max)], "")
}
