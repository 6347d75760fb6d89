package protocol

import "time"

// Verbs understood by the daemon. protocol/README.md documents each one.
const (
	VerbVersion       = "version"
	VerbStatus        = "status"
	VerbMailboxList   = "mailbox.list"
	VerbMailboxShow   = "mailbox.show"
	VerbMailboxCreate = "mailbox.create"
	VerbMailboxDelete = "mailbox.delete"
	VerbMailboxUpdate = "mailbox.update"
	VerbMessageList   = "message.list"
	VerbMessageRead   = "message.read"
	VerbMessageMark   = "message.mark"
	VerbMessageMove   = "message.move"
	VerbSend          = "send"
	VerbSendStatus    = "send.status"
	VerbHookCreate    = "hook.create"
	VerbHookList      = "hook.list"
	VerbHookDelete    = "hook.delete"
	VerbHookRuns      = "hook.runs"
	VerbQueueList     = "queue.list"
	VerbQueueShow     = "queue.show"
	VerbQueueRetry    = "queue.retry"
	VerbQueueDrop     = "queue.drop"
	VerbQueueApprove  = "queue.approve"
	VerbWatch         = "watch"
	VerbIndexRebuild  = "index.rebuild"
)

// IndexRebuild answers VerbIndexRebuild: the index was thrown away and is
// being read again from the mailboxes' files, in the background.
type IndexRebuild struct {
	Mailboxes int  `json:"mailboxes"`
	Started   bool `json:"started"`
}

// VersionInfo answers VerbVersion.
type VersionInfo struct {
	Protocol        string `json:"protocol"`
	ProtocolVersion string `json:"protocol_version"`
	Server          string `json:"server"`
	CallerUID       uint32 `json:"caller_uid"`
	CallerGID       uint32 `json:"caller_gid"`
	// PID is the daemon's process id; Reload the outcome of its last
	// config reload (nil before the first), which `mailctl reload`
	// waits for to say whether the daemon reloaded.
	PID    int           `json:"pid,omitempty"`
	Reload *ReloadStatus `json:"reload,omitempty"`
	// Dev is true for a `mailctl dev` instance; Capture names its mailbox
	// that takes outbound mail instead of the recipients' servers.
	Dev     bool   `json:"dev,omitempty"`
	Capture string `json:"capture,omitempty"`
}

// ReloadStatus is the outcome of the daemon's last config reload. Error and
// the keys are shown to root and to the daemon's own user (who can read
// the config file); others see the count and whether it worked.
type ReloadStatus struct {
	Count   int       `json:"count"` // reloads since the daemon started, refused ones included
	At      time.Time `json:"at"`
	OK      bool      `json:"ok"`
	Error   string    `json:"error,omitempty"`   // why the file was refused; the running config is kept
	Applied []string  `json:"applied,omitempty"` // keys the reload changed
	Pending []string  `json:"pending,omitempty"` // keys changed that wait for a restart
	// DKIMKeys names the DKIM keys the reload read, "selector (algorithm)"
	// each; empty (not absent) when it found none and outbound mail goes
	// unsigned. Absent from a daemon that sends nothing.
	DKIMKeys []string `json:"dkim_keys,omitzero"`
	// NotServed names each mailbox the config declares that the reloaded
	// daemon does not serve, and why (its owner is not a user, the name is
	// another user's): the reload applied, and these wait for a fix.
	NotServed []string `json:"not_served,omitempty"`
}

// Empty is the argument of verbs that take none.
type Empty struct{}

// NameArgs names one mailbox.
type NameArgs struct {
	Name string `json:"name"`
}

// MailboxCreateArgs asks for a new mailbox. Owner is a user name or numeric uid;
// empty means the caller. Only root may name another owner.
type MailboxCreateArgs struct {
	Name  string `json:"name"`
	Owner string `json:"owner,omitempty"`
}

// MailboxDeleteArgs asks to delete a mailbox; without Force a non-empty mailbox
// is refused.
type MailboxDeleteArgs struct {
	Name  string `json:"name"`
	Force bool   `json:"force,omitempty"`
}

// MailboxUpdateArgs changes what an owner may set on its mailbox; a field
// left out (null) is kept. TrustedSenders [] trusts no one;
// InheritTrustedSenders drops the mailbox's own list for the global one.
type MailboxUpdateArgs struct {
	Name                  string    `json:"name"`
	DisplayName           *string   `json:"display_name,omitempty"`
	TrustedSenders        *[]string `json:"trusted_senders,omitempty"`
	InheritTrustedSenders bool      `json:"inherit_trusted_senders,omitempty"`
	// QuotaBytes and QuotaMessages set the mailbox's own quota (0: none);
	// InheritQuota drops it for the default. Root only.
	QuotaBytes    *int64 `json:"quota_bytes,omitempty"`
	QuotaMessages *int64 `json:"quota_messages,omitempty"`
	InheritQuota  bool   `json:"inherit_quota,omitempty"`
}

// MailboxUsage is what a mailbox's files take and its quota. A zero quota
// means none. Over a quota, mail to the mailbox is deferred (452 4.2.2) and
// its sends are refused until mail is removed or the quota raised.
type MailboxUsage struct {
	Bytes         int64 `json:"bytes"`
	Messages      int64 `json:"messages"`
	QuotaBytes    int64 `json:"quota_bytes"`
	QuotaMessages int64 `json:"quota_messages"`
	// QuotaSource says where the quota is set: "default" ([storage]),
	// "config" (the mailbox's table) or "mailbox" (set by root with
	// mailbox.update).
	QuotaSource string `json:"quota_source"`
	OverQuota   bool   `json:"over_quota"`
}

// MaxDisplayNameLen bounds a mailbox's display name, in characters.
const MaxDisplayNameLen = 100

// MaxHeaderWord bounds a run of bytes without a space in any header value a
// send gives (a subject, a name, a Message-ID, a content type): such a run
// can only be folded by cutting it, and at this size, quoted or escaped, it
// still fits the 998 bytes RFC 5322 allows per line. A longer one is
// invalid_input.
const MaxHeaderWord = 400

// Mailbox describes one mailbox as its owner (or root) sees it.
type Mailbox struct {
	Name        string `json:"name"`
	Address     string `json:"address"`
	DisplayName string `json:"display_name,omitempty"` // the name outgoing From carries
	Owner       string `json:"owner"`
	OwnerUID    uint32 `json:"owner_uid"`
	Source      string `json:"source"` // "config" (operator-declared) or "registry"
	Path        string `json:"path"`
	InboxPath   string `json:"inbox_path"`
	SentPath    string `json:"sent_path"`
	Total       int    `json:"total"`
	Unread      int    `json:"unread"`
	SentCount   int    `json:"sent_count"`
	CatchAll    bool   `json:"catch_all,omitempty"`
	// The policies that govern the mailbox, so that its owner can plan
	// instead of probing with failures.
	Trust *TrustPolicy `json:"trust,omitempty"`
	Send  *SendLimits  `json:"send,omitempty"`
	// Usage is what the mailbox's files take against its quota.
	Usage *MailboxUsage `json:"usage,omitempty"`
	// Filled by mailbox.show only.
	Hooks []Hook `json:"hooks,omitempty"`
}

// SendLimits is the effective send policy of a mailbox (the operator's
// config: global [send] with the mailbox's overrides). Zero limits mean none.
type SendLimits struct {
	Enabled            bool     `json:"enabled"`      // false: only dry runs succeed
	DryRunOnly         bool     `json:"dry_run_only"` // true: sends are validated, never sent
	Hold               bool     `json:"hold"`         // true: sends wait for the operator's approval
	AllowDomains       []string `json:"allow_domains"`
	AllowAddresses     []string `json:"allow_addresses"` // with allow_domains empty too: any recipient
	MaxRecipients      int      `json:"max_recipients"`
	MaxMessageBytes    int64    `json:"max_message_bytes"`
	MaxAttachmentBytes int64    `json:"max_attachment_bytes"`
	MaxAttachments     int      `json:"max_attachments"`
	PerMinute          int      `json:"per_minute"`
	PerHour            int      `json:"per_hour"`
	PerDay             int      `json:"per_day"`
	// Rate is what is left of each limited window (per_minute, per_hour,
	// per_day) right now; empty when no rate limit applies.
	Rate []SendRate `json:"rate"`
}

// SendRate is one sliding rate-limit window of a mailbox: its limit, the
// sends the mailbox made in it, and how many more it may make now.
type SendRate struct {
	Window     string `json:"window"` // "minute", "hour" or "day"
	Limit      int    `json:"limit"`
	Used       int    `json:"used"`
	Remaining  int    `json:"remaining"`
	NextFreeMS int64  `json:"next_free_ms,omitempty"` // with remaining 0: milliseconds until one more send fits
}

// TrustPolicy is the effective trust setting of a mailbox.
type TrustPolicy struct {
	TrustedSenders []string `json:"trusted_senders"`
	Source         string   `json:"source"` // "mailbox" or "global"
}

// MailboxCreated answers VerbMailboxCreate.
type MailboxCreated struct {
	Mailbox
	Created bool `json:"created"` // false when it already existed for the same owner
}

// MailboxList answers VerbMailboxList.
type MailboxList struct {
	Mailboxes []Mailbox `json:"mailboxes"`
}

// Deleted answers delete verbs.
type Deleted struct {
	Name    string `json:"name"`
	Deleted bool   `json:"deleted"`
}

// Folders of a mailbox.
const (
	FolderInbox   = "inbox"
	FolderSent    = "sent"
	FolderArchive = "archive"
	FolderTrash   = "trash"
	FolderDrafts  = "drafts"
	// FolderJunk holds mail the daemon judged unwanted (a DMARC quarantine
	// policy, a blocklisted client): no hook fires and no new_mail event is
	// sent for it, and lists show it only when asked for by name.
	FolderJunk = "junk"
)

// DateReceived is MessageSummary.DateSource for a message listed with the
// time it was received, having no Date header of its own.
const DateReceived = "received"

// MessageListArgs selects messages of one folder, newest first.
type MessageListArgs struct {
	Mailbox  string     `json:"mailbox"`
	Folder   string     `json:"folder,omitempty"` // default inbox
	Limit    int        `json:"limit,omitempty"`  // default 50, max 200
	Offset   int        `json:"offset,omitempty"`
	Cursor   string     `json:"cursor,omitempty"`
	Unread   *bool      `json:"unread,omitempty"`
	Trusted  *bool      `json:"trusted,omitempty"`
	From     string     `json:"from,omitempty"`
	Subject  string     `json:"subject,omitempty"`
	Text     string     `json:"text,omitempty"`
	ThreadID string     `json:"thread_id,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	Label    string     `json:"label,omitempty"`   // messages carrying this label (ignoring case)
	Starred  *bool      `json:"starred,omitempty"` // starred (true) or unstarred (false) messages
	// Query is a search in Gmail's language (from:, to:, subject:, label:,
	// is:, has:attachment, in:, before:, after:, older_than:, newer_than:,
	// "phrases", -negation, OR, parentheses; protocol/README.md). One that
	// names folders (in:) searches the whole mailbox, whatever Folder says.
	Query string `json:"query,omitempty"`
}

// Filtered reports whether the listing keeps only some messages of its
// folder: any filter or a query is set.
func (a *MessageListArgs) Filtered() bool {
	return a.Unread != nil || a.Trusted != nil || a.Starred != nil || a.Since != nil || a.Until != nil ||
		a.From+a.Subject+a.Text+a.ThreadID+a.Label+a.Query != ""
}

// MessageSummary is one row of a message list.
type MessageSummary struct {
	ID             string    `json:"id"`
	Folder         string    `json:"folder"`
	MessageID      string    `json:"message_id"`
	ThreadID       string    `json:"thread_id"`
	From           string    `json:"from"`
	To             []string  `json:"to"`
	Subject        string    `json:"subject"`
	Date           time.Time `json:"date"`
	DateSource     string    `json:"date_source,omitempty"` // DateReceived when Date is when it was received (no Date header); empty: the header's
	Read           bool      `json:"read"`
	Trusted        Verdict   `json:"trusted"`
	Attachments    int       `json:"attachments"`
	Snippet        string    `json:"snippet"`
	DeliveryStatus string    `json:"delivery_status,omitempty"`
	Labels         []string  `json:"labels,omitempty"`
	Starred        bool      `json:"starred,omitempty"`
}

// MessageList answers VerbMessageList.
type MessageList struct {
	Messages   []MessageSummary `json:"messages"`
	Total      int              `json:"total"` // matching messages in the folder
	NextCursor string           `json:"next_cursor,omitempty"`
	HasMore    bool             `json:"has_more"`
	// AllFolders: the query named folders (in:), so the rows come from
	// those folders, each carrying its own, not from the folder asked.
	AllFolders bool `json:"all_folders,omitempty"`
}

// MessageReadArgs reads one message. The body is windowed: MaxChars (default
// 20000) characters from Offset.
type MessageReadArgs struct {
	Mailbox  string `json:"mailbox"`
	ID       string `json:"id"`
	Folder   string `json:"folder,omitempty"`
	MaxChars int    `json:"max_chars,omitempty"`
	Offset   int    `json:"offset,omitempty"`
	Raw      bool   `json:"raw,omitempty"` // return the raw message instead of the Markdown body
}

// Attachment is one stored attachment.
type Attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	Path        string `json:"path"`
}

// AuthResult is one authentication check and the domain it concerns.
type AuthResult struct {
	Result string `json:"result"`
	Domain string `json:"domain,omitempty"`
}

// RecipientStatus is the delivery state of one recipient of a sent message.
type RecipientStatus struct {
	Address     string    `json:"address"`
	Status      string    `json:"status"` // pending, delivered, deferred, failed, bounced, held
	Detail      string    `json:"detail,omitempty"`
	Code        int       `json:"code,omitempty"`
	Attempts    int       `json:"attempts,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	UpdatedAt   time.Time `json:"updated_at,omitzero"`
	TLS         string    `json:"tls,omitempty"` // verified, unverified, none
	// Captured is true when a delivered message went to the capture
	// mailbox of `mailctl dev` instead of the recipient's server: it was
	// not sent.
	Captured bool `json:"captured,omitempty"`
}

// Message is one message with a window of its body.
type Message struct {
	MessageSummary
	Mailbox        string       `json:"mailbox"`
	Cc             []string     `json:"cc,omitempty"`
	Bcc            []string     `json:"bcc,omitempty"`
	ReplyTo        []string     `json:"reply_to,omitempty"`
	DeliveredTo    string       `json:"delivered_to,omitempty"`
	InReplyTo      string       `json:"in_reply_to,omitempty"`
	References     []string     `json:"references,omitempty"`
	ListID         string       `json:"list_id,omitempty"`
	AutoSubmitted  string       `json:"auto_submitted,omitempty"`
	ReceivedAt     time.Time    `json:"received_at"`
	ReceivedFromIP string       `json:"received_from_ip,omitempty"`
	SizeBytes      int64        `json:"size_bytes"`
	DKIM           []AuthResult `json:"dkim,omitempty"`
	SPF            *AuthResult  `json:"spf,omitempty"`
	DMARC          *AuthResult  `json:"dmarc,omitempty"`
	// SubmittedBy is the local mailbox that handed the message in over the
	// socket (authenticated by its owner's uid); empty for network mail.
	SubmittedBy    string            `json:"submitted_by,omitempty"`
	ReturnPath     string            `json:"return_path,omitempty"` // received mail's envelope sender, "<>" for a bounce's
	AttachmentList []Attachment      `json:"attachment_list,omitempty"`
	Outbound       bool              `json:"outbound,omitempty"`
	Recipients     []RecipientStatus `json:"recipients,omitempty"`
	Path           string            `json:"path"`
	RawPath        string            `json:"raw_path"`
	Body           string            `json:"body"`
	BodyChars      int               `json:"body_chars"` // total characters in the body
	Offset         int               `json:"offset"`
	Truncated      bool              `json:"truncated"`
}

// MessageMarkArgs marks messages read or unread.
type MessageMarkArgs struct {
	Mailbox string   `json:"mailbox"`
	Folder  string   `json:"folder,omitempty"`
	IDs     []string `json:"ids"`
	Read    bool     `json:"read"`
}

// MessageMarked answers VerbMessageMark.
type MessageMarked struct {
	Changed  []string      `json:"changed"`
	NotFound []string      `json:"not_found,omitempty"`
	Failed   []ItemFailure `json:"failed,omitempty"`
}

// ItemFailure is one message of a batch (message.mark, message.label,
// message.purge) that could not be changed while the others were: its id,
// a code as an error would carry and a message that names the file and
// says what to do.
type ItemFailure struct {
	ID      string `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// MessageMoveArgs moves a message between folders (inbox, archive, trash, junk).
type MessageMoveArgs struct {
	Mailbox string `json:"mailbox"`
	ID      string `json:"id"`
	From    string `json:"from,omitempty"` // default inbox
	To      string `json:"to"`
}

// SendAttachment is an attachment carried inline: the client reads the file
// with its own rights and sends the bytes (the daemon never opens a caller's path).
type SendAttachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type,omitempty"`
	Data        []byte `json:"data"` // base64 in JSON
}

// SendArgs asks the daemon to compose, sign and queue a message.
type SendArgs struct {
	FromMailbox    string           `json:"from_mailbox"`
	To             []string         `json:"to"`
	Cc             []string         `json:"cc,omitempty"`
	Bcc            []string         `json:"bcc,omitempty"`
	ReplyTo        []string         `json:"reply_to,omitempty"`
	Subject        string           `json:"subject"`
	Body           string           `json:"body"`
	TextOnly       bool             `json:"text_only,omitempty"`
	HTMLBody       string           `json:"html_body,omitempty"`
	Attachments    []SendAttachment `json:"attachments,omitempty"`
	InReplyTo      string           `json:"in_reply_to,omitempty"`
	References     []string         `json:"references,omitempty"`
	ReplyToID      string           `json:"reply_to_id,omitempty"` // id of a stored message in from_mailbox's inbox being answered
	ReplyAll       bool             `json:"reply_all,omitempty"`
	AutoReply      bool             `json:"auto_reply,omitempty"` // adds Auto-Submitted: auto-replied
	DryRun         bool             `json:"dry_run,omitempty"`
	IdempotencyKey string           `json:"idempotency_key,omitempty"`
	WaitMS         int              `json:"wait_ms,omitempty"`     // how long to wait for the first attempt
	AllowEmpty     bool             `json:"allow_empty,omitempty"` // send even with no subject, body or attachment
	// SendAt (RFC 3339) holds the message in the queue until then: a
	// scheduled send. Empty sends at once.
	SendAt *time.Time `json:"send_at,omitempty"`
}

// SendResult answers VerbSend and VerbSendStatus.
type SendResult struct {
	ID         string            `json:"id"` // sent-folder id, also the queue id
	MessageID  string            `json:"message_id"`
	Status     string            `json:"status"` // queued, delivered, deferred, failed, partial, held, dry_run
	Envelope   Envelope          `json:"envelope"`
	SizeBytes  int               `json:"size_bytes"`
	Recipients []RecipientStatus `json:"recipients"`
	Duplicate  bool              `json:"duplicate,omitempty"` // answered from an earlier call with the same idempotency key
	SendAt     *time.Time        `json:"send_at,omitempty"`   // a scheduled send's time (status "scheduled" until then)
	// DraftKept (draft.send only): the draft was edited while it was being
	// sent. What was read went out (it is in sent/); the edit stays in
	// drafts/ as a draft of its own.
	DraftKept bool `json:"draft_kept,omitempty"`
}

// Envelope is the SMTP envelope of a message.
type Envelope struct {
	// MailFrom is the envelope sender: the mailbox's return path,
	// name+bounce-TAG@domain, whose tag is made from the message's sent
	// id. A dry run, whose message gets no id, writes the tag as
	// PendingTag.
	MailFrom string   `json:"mail_from"`
	RcptTo   []string `json:"rcpt_to"`
}

// PendingTag stands, in a dry run's envelope sender, for the return path's
// tag, which is made only when the message is sent. It cannot be part of an
// address, so the envelope sender of a dry run is never mailed to.
const PendingTag = "<tag>"

// SendStatusArgs asks for the state of an earlier send.
type SendStatusArgs struct {
	Mailbox string `json:"mailbox"`
	ID      string `json:"id"`
}

// Hook events.
const (
	EventOnReceive = "on_receive"
	EventAfterSend = "after_send"
)

// Hook is one hook as stored and listed. Its name is unique on its mailbox;
// ID and MailboxID are identities never reused, to which its runs are bound.
type Hook struct {
	ID              string    `json:"id,omitempty"`
	Name            string    `json:"name"`
	Mailbox         string    `json:"mailbox"`
	MailboxID       string    `json:"mailbox_id,omitempty"`
	Event           string    `json:"event"`
	Cmd             []string  `json:"cmd"`
	TimeoutSecs     int       `json:"timeout_secs"`
	FireOnUntrusted bool      `json:"fire_on_untrusted"`
	FireOnAuto      bool      `json:"fire_on_auto_submitted,omitempty"`
	FireOnLists     bool      `json:"fire_on_lists,omitempty"`
	Source          string    `json:"source"` // "config" or "registry"
	LastRun         *HookRun  `json:"last_run,omitempty"`
	CreatedAt       time.Time `json:"created_at,omitempty"`
}

// HookCreateArgs creates a hook; Name empty derives a stable one.
type HookCreateArgs struct {
	Mailbox         string   `json:"mailbox"`
	Event           string   `json:"event"`
	Cmd             []string `json:"cmd"`
	Name            string   `json:"name,omitempty"`
	TimeoutSecs     int      `json:"timeout_secs,omitempty"`
	FireOnUntrusted bool     `json:"fire_on_untrusted,omitempty"`
	FireOnAuto      bool     `json:"fire_on_auto_submitted,omitempty"`
	FireOnLists     bool     `json:"fire_on_lists,omitempty"`
}

// HookDeleteArgs names a hook to delete. Hook names are unique on their
// mailbox; Mailbox is needed only when the caller has hooks of that name on
// several mailboxes.
type HookDeleteArgs struct {
	Name    string `json:"name"`
	Mailbox string `json:"mailbox,omitempty"`
}

// HookListArgs filters hooks by mailbox.
type HookListArgs struct {
	Mailbox string `json:"mailbox,omitempty"`
}

// HookList answers VerbHookList.
type HookList struct {
	Hooks []Hook `json:"hooks"`
}

// HookRunsArgs asks for recent runs, of one hook or all visible ones.
type HookRunsArgs struct {
	Name  string `json:"name,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// HookRun records one execution of a hook.
type HookRun struct {
	Hook       string    `json:"hook"`
	HookID     string    `json:"hook_id,omitempty"`
	Mailbox    string    `json:"mailbox"`
	MailboxID  string    `json:"mailbox_id,omitempty"`
	Event      string    `json:"event"`
	MessageID  string    `json:"message_id"` // store id of the message
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	ExitCode   int       `json:"exit_code"`
	TimedOut   bool      `json:"timed_out"`
	Error      string    `json:"error,omitempty"`
	StderrTail string    `json:"stderr_tail,omitempty"`
}

// HookRuns answers VerbHookRuns.
type HookRuns struct {
	Runs []HookRun `json:"runs"`
}

// QueueItem is one outbound queue entry.
type QueueItem struct {
	ID          string            `json:"id"`
	Mailbox     string            `json:"mailbox"`
	MessageID   string            `json:"message_id"`
	MailFrom    string            `json:"mail_from"`
	Recipients  []RecipientStatus `json:"recipients"`
	CreatedAt   time.Time         `json:"created_at"`
	NextAttempt time.Time         `json:"next_attempt"`
	Held        bool              `json:"held"`
	SizeBytes   int64             `json:"size_bytes"`
	// Delivering is true while an attempt is under way; operator actions
	// (retry, drop, approve) answer conflict until it has finished.
	Delivering bool `json:"delivering,omitempty"`
	// SendAt is the time a scheduled send goes out; Scheduled is true
	// while the item waits for it.
	SendAt    *time.Time `json:"send_at,omitempty"`
	Scheduled bool       `json:"scheduled,omitempty"`
	// State is one of QueueStates.
	State string `json:"state"`
	// DelayWarnedAt is when the sender was told the message is delayed
	// (RFC 3464 action "delayed"); it is told once.
	DelayWarnedAt *time.Time `json:"delay_warned_at,omitempty"`
}

// QueueIDArgs names one queue item.
type QueueIDArgs struct {
	ID string `json:"id"`
}

// QueueList answers VerbQueueList.
type QueueList struct {
	Items []QueueItem `json:"items"`
}

// Finding is one result of a health check (doctor, status).
type Finding struct {
	ID       string `json:"id"`
	Severity string `json:"severity"` // ok, info, warn, fail
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"`
}

// Status answers VerbStatus with the checks the caller may see.
type Status struct {
	Server     string    `json:"server"`
	StartedAt  time.Time `json:"started_at"`
	Domains    []string  `json:"domains"`
	Hostname   string    `json:"hostname"`
	Listeners  []string  `json:"listeners"`
	QueueDepth int       `json:"queue_depth"`
	Findings   []Finding `json:"findings"`
}

// WatchArgs subscribes to events of the named mailboxes (empty: all the caller owns).
type WatchArgs struct {
	Mailboxes []string `json:"mailboxes,omitempty"`
}

// Event kinds streamed by watch. EventMailboxDeleted says the mailbox was
// deleted: a watch that named it hears nothing more of the name (a mailbox
// made later under it is another one), and ends after this event when it
// named no other mailbox still there.
const (
	EventNewMail        = "new_mail"
	EventDeliveryStatus = "delivery_status"
	EventMailboxChanged = "mailbox_changed"
	EventMailboxDeleted = "mailbox_deleted"
)

// Event is one item of a watch stream.
type Event struct {
	Type    string          `json:"type"`
	Mailbox string          `json:"mailbox"`
	Folder  string          `json:"folder,omitempty"`
	ID      string          `json:"id,omitempty"`
	Message *MessageSummary `json:"message,omitempty"`
	Send    *SendResult     `json:"send,omitempty"`
	At      time.Time       `json:"at"`
}

// CarriesTime reports whether t can travel in a request: JSON writes a
// time as RFC 3339, which has years 0 to 9999 and zone offsets up to 23:59,
// where time.Parse also takes an offset of 24:00 to 24:59. A caller's time
// outside that is the caller's error, to answer before the request is made.
func CarriesTime(t time.Time) bool {
	_, err := t.MarshalText()
	return err == nil
}
