package mcpshim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mailctl/mailctl/protocol"
)

// MaxWaitSecs bounds email_wait.
const MaxWaitSecs = 600

// MaxWaits bounds the email_wait calls one server runs at once. Each holds
// a daemon connection of its own, and the daemon allows a user 64
// (control.max_connections_per_uid): without a bound, one session's waits
// could take them all and leave every other call of that user, in any
// session, refused.
const MaxWaits = 16

type emailWaitArgs struct {
	Mailbox     string `json:"mailbox"`
	From        string `json:"from,omitempty" jsonschema:"substring of the sender"`
	Subject     string `json:"subject,omitempty" jsonschema:"substring of the subject"`
	Text        string `json:"text,omitempty" jsonschema:"substring of the body"`
	Since       string `json:"since,omitempty" jsonschema:"RFC 3339 time: also take unread mail received since"`
	TimeoutSecs int    `json:"timeout_secs,omitempty" jsonschema:"default 120"`
	MaxChars    int    `json:"max_chars,omitempty" jsonschema:"body window, default 20000"`
}

// EmailWaitData is email_wait's data.
type EmailWaitData struct {
	Message EmailReadData `json:"message"`
	Codes   []string      `json:"codes" jsonschema:"one-time codes found near words such as code, OTP or verification"`
	Links   []string      `json:"links" jsonschema:"links found in the body; never fetched by mailctl"`
	Waited  int64         `json:"waited_ms"`
}

func (s *Server) toolEmailWait() toolSpec {
	return newTool(&mcp.Tool{
		Name:        "email_wait",
		Description: "Wait for a matching message in a mailbox's inbox and return it with its one-time codes and links (never opened).",
		Annotations: annotations("Wait for email", true, false, true, false),
	}, func(sc *jsonschema.Schema) {
		sc.Properties["timeout_secs"].Minimum = new(1.0)
		sc.Properties["timeout_secs"].Maximum = new(float64(MaxWaitSecs))
		sc.Properties["max_chars"].Minimum = new(1.0)
		sc.Properties["max_chars"].Maximum = new(float64(MaxReadWindow))
		boundFilters(sc, "from", "subject", "text")
	}, s.emailWait)
}

// MaxFilterLen bounds a filter, as the daemon bounds email_list's
// (store.MaxSearchLen): a wait matches its filters itself, and may never
// ask the daemon to.
const MaxFilterLen = 2048

// boundFilters gives the string properties names of a tool's schema the
// filters' bound.
func boundFilters(sc *jsonschema.Schema, names ...string) {
	for _, n := range names {
		sc.Properties[n].MaxLength = new(MaxFilterLen)
	}
}

func (s *Server) emailWait(ctx context.Context, req *mcp.CallToolRequest, in *emailWaitArgs) (string, EmailWaitData, *NextAction, error) {
	w := &waiter{s: s, in: in, req: req, start: time.Now(), timeout: cmp.Or(time.Duration(in.TimeoutSecs)*time.Second, 120*time.Second)}
	since, err := parseWhen("since", in.Since)
	if err != nil {
		return "", EmailWaitData{}, nil, err
	}
	select {
	case s.waits <- struct{}{}:
		defer func() { <-s.waits }()
	default:
		return "", EmailWaitData{}, nil, fail(protocol.CodeRateLimited,
			"this MCP server already runs %d email_wait calls, the most at once (each holds a daemon connection): let one end or cancel one, then wait again", MaxWaits)
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()

	// A dedicated connection: closing it is the only way to end the watch.
	wc, err := s.dial(ctx)
	if err != nil {
		return "", EmailWaitData{}, nil, err
	}
	defer wc.Close()
	// Watch before looking back, so that nothing arrives unseen in between.
	events, err := wc.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{in.Mailbox}})
	if err != nil {
		return "", EmailWaitData{}, nil, err
	}
	if since != nil {
		if sum, data, ok, err := w.lookBack(ctx, since); err != nil || ok {
			return sum, data, nil, err
		}
	}
	return w.watch(ctx, events)
}

// waiter is one email_wait call: its filters, its clock and its caller.
type waiter struct {
	s       *Server
	in      *emailWaitArgs
	req     *mcp.CallToolRequest
	start   time.Time
	timeout time.Duration
}

// match applies the filters a message summary can answer. A from that names
// an address or a domain is looked for in the sender's address only, never in
// the display name the sender typed (protocol.SenderMatches).
func (w *waiter) match(m *protocol.MessageSummary) bool {
	return protocol.SenderMatches(m.From, w.in.From) && containsFold(m.Subject, w.in.Subject)
}

// deliver reads message id and, when its body matches too, returns it; ok is
// false when the body filter rejects it.
func (w *waiter) deliver(ctx context.Context, id string) (sum string, data EmailWaitData, ok bool, err error) {
	in := w.in
	m, err := w.s.read(ctx, protocol.MessageReadArgs{Mailbox: in.Mailbox, ID: id, Folder: protocol.FolderInbox, MaxChars: in.MaxChars})
	if err != nil {
		return "", EmailWaitData{}, false, err
	}
	if !w.match(&m.MessageSummary) || in.Text != "" && !containsFold(m.Body, in.Text) {
		return "", EmailWaitData{}, false, nil
	}
	data = EmailWaitData{Message: readData(m, newFence()), Codes: extractCodes(m.Subject + "\n" + m.Body), Links: extractLinks(m.Body),
		Waited: time.Since(w.start).Milliseconds()}
	sum = fmt.Sprintf("message %s arrived %s", m.ID, describe(m))
	if len(data.Codes) > 0 {
		sum += fmt.Sprintf("; %d code(s) found", len(data.Codes))
	}
	return sum, data, true, nil
}

// lookBack accepts a matching unread message that arrived since the given
// time, before the call began.
func (w *waiter) lookBack(ctx context.Context, since *time.Time) (string, EmailWaitData, bool, error) {
	in := w.in
	unread := true
	var list protocol.MessageList
	err := w.s.call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: in.Mailbox, Folder: protocol.FolderInbox,
		Limit: 20, Unread: &unread, From: in.From, Subject: in.Subject, Since: since}, &list)
	if err != nil {
		return "", EmailWaitData{}, false, mailboxHint(err, in.Mailbox)
	}
	for _, m := range slices.Backward(list.Messages) { // oldest first: the one the caller was waiting for
		if w.match(&m) {
			if sum, data, ok, err := w.deliver(ctx, m.ID); err != nil || ok {
				return sum, data, ok, err
			}
		}
	}
	return "", EmailWaitData{}, false, nil
}

// watch returns the first new inbox message that matches, reporting
// progress meanwhile, or a timeout.
func (w *waiter) watch(ctx context.Context, events <-chan protocol.Event) (string, EmailWaitData, *NextAction, error) {
	tick := time.NewTicker(w.s.progressEvery)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return "", EmailWaitData{}, nil, w.ended(ctx)
				}
				return "", EmailWaitData{}, nil, watchEnded(w.in, w.start)
			}
			if ev.Type == protocol.EventMailboxDeleted && ev.Mailbox == w.in.Mailbox {
				return "", EmailWaitData{}, nil, fail(protocol.CodeNotFound, "mailbox %s was deleted while this call waited for mail in it", w.in.Mailbox)
			}
			if !w.wanted(ev) {
				continue
			}
			if sum, data, ok, err := w.deliver(ctx, ev.ID); err != nil || ok {
				return sum, data, nil, err
			}
		case <-tick.C:
			w.progress(ctx)
		case <-ctx.Done():
			return "", EmailWaitData{}, nil, w.ended(ctx)
		}
	}
}

// wanted says whether ev is new mail in the inbox waited on that may match.
func (w *waiter) wanted(ev protocol.Event) bool {
	if ev.Type != protocol.EventNewMail || ev.Mailbox != w.in.Mailbox || (ev.Folder != "" && ev.Folder != protocol.FolderInbox) {
		return false
	}
	return ev.Message == nil || w.match(ev.Message)
}

// progress notifies a caller that asked for progress how long it has waited.
func (w *waiter) progress(ctx context.Context) {
	token := w.req.Params.GetProgressToken()
	if token == nil || w.req.Session == nil {
		return
	}
	elapsed := time.Since(w.start)
	w.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: token,
		Progress:      elapsed.Seconds(),
		Total:         w.timeout.Seconds(),
		Message:       fmt.Sprintf("waiting for mail in %s (%ds of %ds)", w.in.Mailbox, int(elapsed.Seconds()), int(w.timeout.Seconds())),
	})
}

// ended is the answer when the wait's context ends: its own timeout, or its
// caller cancelling it (a client's notifications/cancelled, a session that
// ends), which is no timeout.
func (w *waiter) ended(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return withNext(fail(protocol.CodeTimeout, "no matching message arrived in %s within %s", w.in.Mailbox, w.timeout),
			waitAgain(w.in, w.start, "Wait again if the mail is still expected (since covers anything that arrived meanwhile)."))
	}
	return withNext(fail(protocol.CodeUnavailable, "the wait for mail in %s was cancelled after %s, before its %s were up",
		w.in.Mailbox, time.Since(w.start).Round(time.Second), w.timeout),
		waitAgain(w.in, w.start, "Wait again if the mail is still expected (since covers anything that arrived since this wait began)."))
}

// waitAgain is the next action of a wait that began at start and ended with
// no message: the same wait, looking back to start.
func waitAgain(in *emailWaitArgs, start time.Time, instruction string) *NextAction {
	args := withArgs(map[string]any{"mailbox": in.Mailbox, "since": start.UTC().Format(time.RFC3339)},
		map[string]string{"from": in.From, "subject": in.Subject, "text": in.Text})
	return &NextAction{Instruction: instruction, Tool: "email_wait", Arguments: args}
}

// watchEnded is the answer when the daemon ends the watch (it restarted):
// wait again, looking back to the wait's start so that mail that arrived
// while no watch was open is not missed.
func watchEnded(in *emailWaitArgs, start time.Time) error {
	return withNext(fail(protocol.CodeUnavailable, "the daemon ended the watch (it restarted or is stopping); call email_wait again"),
		waitAgain(in, start, "Wait again (since covers anything that arrived meanwhile); if the daemon is down, that call says how to start it."))
}

func containsFold(s, sub string) bool {
	return sub == "" || strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

var (
	codeWords = regexp.MustCompile(`(?i)\b(code|otp|one[- ]time|verification|verify|passcode|pin|security|confirm(?:ation)?|token|2fa|login)\b`)
	codeRE    = regexp.MustCompile(`\b(\d{4,8}|\d{3}[- ]\d{3})\b`)
	linkRE    = regexp.MustCompile(`https?://[^\s<>()"'\x60\]\[]+`)
)

// extractCodes finds 4–8 digit codes (or "123-456") within a short distance of
// a word that announces a code, so that dates, prices and zip codes far from
// such a word are not reported.
func extractCodes(text string) []string {
	codes := []string{}
	text = text[:min(len(text), 200_000)]
	// Words inside links ("…/verify?…") announce nothing, and digits in
	// links are not codes.
	text = linkRE.ReplaceAllStringFunc(text, func(l string) string { return strings.Repeat(" ", len(l)) })
	words := codeWords.FindAllStringIndex(text, -1)
	if len(words) == 0 {
		return codes
	}
	seen := map[string]bool{}
	for _, loc := range codeRE.FindAllStringIndex(text, -1) {
		c := text[loc[0]:loc[1]]
		if looksLikeYear(c) || partOfLongerNumber(text, loc[0], loc[1]) {
			continue
		}
		near := slices.ContainsFunc(words, func(w []int) bool { return max(w[0]-loc[0], loc[0]-w[0]) <= 80 })
		c = strings.NewReplacer("-", "", " ", "").Replace(c)
		if near && !seen[c] {
			seen[c] = true
			codes = append(codes, c)
		}
		if len(codes) == 5 {
			break
		}
	}
	return codes
}

// partOfLongerNumber reports digits glued to more digits by "-", ".", "/" or
// ":" (phone numbers, dates, versions, times), which are not codes.
func partOfLongerNumber(text string, start, end int) bool {
	isDigit := func(i int) bool { return i >= 0 && i < len(text) && text[i] >= '0' && text[i] <= '9' }
	sep := func(i int) bool { return i >= 0 && i < len(text) && strings.IndexByte("-./:,", text[i]) >= 0 }
	return (sep(start-1) && isDigit(start-2)) || (sep(end) && isDigit(end+1))
}

func looksLikeYear(c string) bool {
	return len(c) == 4 && (strings.HasPrefix(c, "19") || strings.HasPrefix(c, "20"))
}

// extractLinks lists distinct links in order, trimmed of trailing punctuation.
func extractLinks(text string) []string {
	links := []string{}
	seen := map[string]bool{}
	for _, l := range linkRE.FindAllString(text, 200) {
		l = strings.TrimRight(l, ".,;:!?*_~")
		if !seen[l] {
			seen[l] = true
			links = append(links, l)
		}
		if len(links) == 20 {
			break
		}
	}
	return links
}
