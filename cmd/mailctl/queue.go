package main

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "queue", group: "operate", summary: "list, summarize, inspect, retry, flush, drop or approve outbound mail", run: cmdQueue})
}

const queueHelp = `Usage: mailctl queue SUBCOMMAND [flags]

  list [--json]          messages waiting for delivery, held or deferred
  summary [FILTERS]      items per destination domain by age (like qshape)
  show ID [--json]       one item with each recipient's state
  retry ID               attempt a deferred item now
  flush [FILTERS]        attempt every matching item now (all its recipients)
  drop ID                remove an item; undelivered recipients become failed
  drop FILTERS | --all   remove every matching item (or recipient, with --domain)
  approve ID             release an item held for approval (send.hold)
  reschedule ID TIME     move a scheduled send (RFC 3339 or a duration from now)

FILTERS: --domain D, --mailbox M, --state pending|deferred|held|scheduled,
--older-than AGE (e.g. 90m, 4h, 2d); every one given must match.

Queue ids are <mailbox>.<sent id>. Owners may list, show, retry, flush and drop
their mailboxes' items; root may do everything, and only root approves held mail.

Examples (a scheduled send first, then the newest item, the last listed):
    mailctl send --from agent --to bob@example.org --subject "Reminder" --body "Standup in 10 minutes." --send-at 2h
    mailctl queue list
    mailctl queue summary
    mailctl queue flush --domain gone.example
    mailctl queue drop --domain gone.example --older-than 2d
    Q=$(mailctl queue list --ids | tail -n 1)
    mailctl queue reschedule "$Q" 30m
    mailctl queue drop "$Q"`

func cmdQueue(args []string) int {
	return dispatch("queue", queueHelp, args, map[string]func([]string) int{
		"list":       queueList,
		"ls":         queueList,
		"show":       queueShow,
		"retry":      func(a []string) int { return queueAction(a, "retry", protocol.VerbQueueRetry, "retrying") },
		"drop":       queueDrop,
		"flush":      queueFlush,
		"summary":    queueSummary,
		"approve":    func(a []string) int { return queueAction(a, "approve", protocol.VerbQueueApprove, "approved") },
		"reschedule": queueReschedule,
	})
}

func queueList(args []string) int {
	cf := newClientFlags("queue list", "queue list [--ids] [--json]", "Lists outbound messages still in the queue, oldest first.").withJSON()
	ids := cf.fs.Bool("ids", false, "print only the items' ids, one a line (for scripts)")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	var out protocol.QueueList
	if code, ok := cf.request(protocol.VerbQueueList, protocol.Empty{}, &out); !ok {
		return code
	}
	if *ids {
		for _, it := range out.Items {
			fmt.Fprintln(stdout, inert(it.ID))
		}
		return 0
	}
	if len(out.Items) == 0 {
		fmt.Fprintln(stdout, "queue is empty")
		return 0
	}
	tw := table("ID\tFROM\tRECIPIENTS\tSTATE\tNEXT ATTEMPT\tSIZE")
	for _, it := range out.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", inert(it.ID), inert(it.MailFrom), inert(rcptSummary(it.Recipients)), inert(itemState(it)), nextAttempt(it), it.SizeBytes)
	}
	tw.Flush()
	return 0
}

func rcptSummary(rs []protocol.RecipientStatus) string {
	if len(rs) == 1 {
		return rs[0].Address
	}
	return fmt.Sprintf("%s +%d", rs[0].Address, len(rs)-1)
}

func itemState(it protocol.QueueItem) string {
	if it.Held {
		return "held"
	}
	if it.Scheduled {
		return "scheduled"
	}
	counts := map[string]int{}
	var order []string
	for _, r := range it.Recipients {
		if counts[r.Status] == 0 {
			order = append(order, r.Status)
		}
		counts[r.Status]++
	}
	var parts []string
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	return strings.Join(parts, ", ")
}

func nextAttempt(it protocol.QueueItem) string {
	if it.Held {
		return "after approval"
	}
	if it.Scheduled && it.SendAt != nil {
		return it.SendAt.Local().Format(time.DateTime) + " (scheduled)"
	}
	settled := true
	for _, r := range it.Recipients {
		settled = settled && (r.Status == "delivered" || r.Status == "failed" || r.Status == "bounced")
	}
	if settled && len(it.Recipients) > 0 {
		return "none (settled)"
	}
	if it.NextAttempt.IsZero() {
		return "-"
	}
	return it.NextAttempt.Local().Format(time.DateTime)
}

func queueShow(args []string) int {
	cf := newClientFlags("queue show", "queue show ID [--json]", "Shows one queue item and each recipient's state, last reply and TLS.").withJSON()
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one queue id"); !ok {
		return code
	}
	var it protocol.QueueItem
	if code, ok := cf.request(protocol.VerbQueueShow, protocol.QueueIDArgs{ID: queueID(cf, cf.fs.Arg(0))}, &it); !ok {
		return code
	}
	fmt.Fprintf(stdout, "id:           %s\nmailbox:      %s\nmessage-id:   <%s>\nmail from:    %s\ncreated:      %s\nnext attempt: %s\nsize:         %d bytes\n",
		inert(it.ID), inert(it.Mailbox), inert(it.MessageID), inert(it.MailFrom), it.CreatedAt.Local().Format(time.DateTime), nextAttempt(it), it.SizeBytes)
	tw := table("\nRECIPIENT\tSTATUS\tATTEMPTS\tTLS\tDETAIL")
	for _, r := range it.Recipients {
		// Detail is the remote server's reply: its words, shown as data.
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", inert(r.Address), inert(r.Status), r.Attempts, inert(cmp.Or(r.TLS, "-")), inert(r.Detail))
	}
	tw.Flush()
	return 0
}

// queueID accepts what send prints (the sent id) as well as the queue id
// (<mailbox>.<sent id>): a sent id that names exactly one of the caller's
// queue items becomes that item's id.
func queueID(cf *clientFlags, arg string) string {
	var l protocol.QueueList
	if err := cf.call(protocol.VerbQueueList, nil, &l); err != nil {
		return arg
	}
	match := ""
	for _, it := range l.Items {
		if it.ID == arg {
			return arg
		}
		if strings.HasSuffix(it.ID, "."+arg) {
			if match != "" {
				return arg // ambiguous: let the daemon say not_found
			}
			match = it.ID
		}
	}
	return cmp.Or(match, arg)
}

func queueAction(args []string, name, verb, done string) int {
	cf := newClientFlags("queue "+name, "queue "+name+" ID [--json]", queueActionAbout[name]).withJSON()
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one queue id"); !ok {
		return code
	}
	var it protocol.QueueItem
	id := queueID(cf, cf.fs.Arg(0))
	if code, ok := cf.request(verb, protocol.QueueIDArgs{ID: id}, &it); !ok {
		return code
	}
	fmt.Fprintf(stdout, "%s %s\n", done, inert(id))
	return 0
}

var queueActionAbout = map[string]string{
	"retry":   "Makes a deferred item due now instead of at its next backoff step.",
	"approve": "Releases an item held by send.hold; it is delivered at once.",
}

func queueReschedule(args []string) int {
	cf := newClientFlags("queue reschedule", "queue reschedule ID TIME [--json]",
		"Moves a scheduled send, or one not yet attempted, to TIME (RFC 3339, e.g. 2026-12-01T09:00:00Z, or a duration from now such as 2h); at most a year ahead. `queue drop` cancels it, `queue retry` sends it now.").withJSON()
	if code, ok := parseArgs(cf.fs, args, 2, "give a queue id and a time"); !ok {
		return code
	}
	at, err := parseSendAt(cf.fs.Arg(1))
	if err != nil {
		return usageError(cf.fs, "%v", err)
	}
	var it protocol.QueueItem
	id := queueID(cf, cf.fs.Arg(0))
	if code, ok := cf.request(protocol.VerbQueueReschedule, protocol.QueueRescheduleArgs{ID: id, SendAt: at}, &it); !ok {
		return code
	}
	fmt.Fprintf(stdout, "%s now goes out at %s\n", inert(id), at.Local().Format(time.DateTime+" MST"))
	return 0
}
