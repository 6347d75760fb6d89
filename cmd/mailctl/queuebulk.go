package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/mailctl/mailctl/protocol"
)

// queueFilterFlags adds the bulk filters to fs.
func queueFilterFlags(fs *flag.FlagSet) *protocol.QueueFilter {
	f := &protocol.QueueFilter{}
	fs.StringVar(&f.Domain, "domain", "", "only items with a recipient not yet delivered at this domain (a flush tries every recipient of such an item)")
	fs.StringVar(&f.Mailbox, "mailbox", "", "only items this mailbox sent")
	fs.StringVar(&f.State, "state", "", "only items in this state: pending, deferred, held or scheduled")
	fs.StringVar(&f.OlderThan, "older-than", "", "only items queued at least this long ago (e.g. 90m, 4h, 2d)")
	return f
}

// checkFilter refuses a bad filter before the daemon is asked.
func checkFilter(fs *flag.FlagSet, f *protocol.QueueFilter) (int, bool) {
	if err := f.Check(); err != nil {
		if pe, ok := err.(*protocol.Error); ok {
			return usageError(fs, "%s", pe.Message), false
		}
		return usageError(fs, "%v", err), false
	}
	return 0, true
}

func printBulk(verb string, res protocol.QueueBulkResult) {
	fmt.Fprintf(stdout, "%s %d item(s) (%d recipient(s)) of %d matched\n", verb, res.Changed, res.Recipients, res.Matched)
	if res.OtherDomains > 0 {
		fmt.Fprintf(stdout, "%d of those recipient(s) are at other domains: a flush makes the whole item due, and its attempt tries every recipient not yet delivered\n", res.OtherDomains)
	}
	if res.Held > 0 {
		fmt.Fprintf(stdout, "%d held item(s) left held: release them with `mailctl queue approve ID`\n", res.Held)
	}
	if res.Scheduled > 0 {
		fmt.Fprintf(stdout, "%d scheduled item(s) keep their time: `--state scheduled` sends them now\n", res.Scheduled)
	}
	if res.Busy > 0 {
		fmt.Fprintf(stdout, "%d item(s) were being delivered and were left alone: run the command again in a moment\n", res.Busy)
	}
}

func queueFlush(args []string) int {
	cf := newClientFlags("queue flush", "queue flush [--domain D] [--mailbox M] [--state S] [--older-than AGE] [--json]",
		"Makes every matching item due now (without a filter: all you may steer), as `queue retry` does one, and says how many items and recipients. "+
			"An item has one due time: its next attempt tries every recipient of it not yet delivered, so with --domain the item's recipients at other domains are tried now too, and counted apart. "+
			"Held items stay held; scheduled items keep their time unless --state scheduled names them.").withJSON()
	f := queueFilterFlags(cf.fs)
	if code, ok := parseArgs(cf.fs, args, 0, "give filters as flags, not arguments"); !ok {
		return code
	}
	if code, ok := checkFilter(cf.fs, f); !ok {
		return code
	}
	var res protocol.QueueBulkResult
	if code, ok := cf.request(protocol.VerbQueueFlush, f, &res); !ok {
		return code
	}
	printBulk("flushed", res)
	return 0
}

// queueDrop drops one item by id, or every item the filters match.
func queueDrop(args []string) int {
	cf := newClientFlags("queue drop", "queue drop ID | queue drop [--domain D] [--mailbox M] [--state S] [--older-than AGE] [--all] [--json]",
		"Removes an item from the queue; recipients not yet delivered are marked failed in the sent copy, and no bounce is sent. "+
			"With filters instead of an id it drops every matching item (with --domain, only the recipients at that domain) and says how many; --all drops everything you may steer.").withJSON()
	f := queueFilterFlags(cf.fs)
	cf.fs.BoolVar(&f.All, "all", false, "drop every item you may steer (needed when no other filter is given)")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	switch {
	case cf.fs.NArg() == 1 && f.Empty() && !f.All:
		var it protocol.QueueItem
		id := queueID(cf, cf.fs.Arg(0))
		if code, ok := cf.request(protocol.VerbQueueDrop, protocol.QueueIDArgs{ID: id}, &it); !ok {
			return code
		}
		fmt.Fprintf(stdout, "dropped %s\n", inert(id))
		return 0
	case cf.fs.NArg() > 0:
		return usageError(cf.fs, "give one queue id, or filters without an id")
	case f.Empty() && !f.All:
		return usageError(cf.fs, "give a queue id, a filter (--domain, --mailbox, --state, --older-than), or --all")
	}
	if code, ok := checkFilter(cf.fs, f); !ok {
		return code
	}
	var res protocol.QueueBulkResult
	if code, ok := cf.request(protocol.VerbQueueDropMatching, f, &res); !ok {
		return code
	}
	printBulk("dropped", res)
	return 0
}

func queueSummary(args []string) int {
	cf := newClientFlags("queue summary", "queue summary [--domain D] [--mailbox M] [--state S] [--older-than AGE] [--max-domains N] [--json]",
		"Counts queued items per destination domain in age buckets, like Postfix's qshape: each column counts items queued at most that many minutes ago "+
			"(and more than the column before); the last holds older ones. An item counts once in each domain it still has an undelivered recipient at.").withJSON()
	a := &protocol.QueueSummaryArgs{}
	f := queueFilterFlags(cf.fs)
	cf.fs.IntVar(&a.MaxDomains, "max-domains", 50, "domains to list, busiest first; the rest are added up")
	if code, ok := parseArgs(cf.fs, args, 0, "give filters as flags, not arguments"); !ok {
		return code
	}
	a.QueueFilter = *f // the flags were parsed into f: a copy taken before held none of them
	if code, ok := checkFilter(cf.fs, &a.QueueFilter); !ok {
		return code
	}
	var s protocol.QueueSummary
	if code, ok := cf.request(protocol.VerbQueueSummary, a, &s); !ok {
		return code
	}
	head := []string{"DOMAIN", "TOTAL"}
	for _, m := range s.BucketMinutes {
		head = append(head, fmt.Sprint(m))
	}
	head = append(head, fmt.Sprintf("%d+", s.BucketMinutes[len(s.BucketMinutes)-1]))
	tw := table(strings.Join(head, "\t"))
	row := func(r protocol.QueueSummaryRow) {
		cells := []string{inert(r.Domain), fmt.Sprint(r.Items)}
		for _, n := range r.Buckets {
			cells = append(cells, fmt.Sprint(n))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	row(s.Total)
	for _, r := range s.Domains {
		row(r)
	}
	if s.Other != nil {
		o := *s.Other
		o.Domain = fmt.Sprintf("(%d more domains)", s.OtherDomains)
		row(o)
	}
	tw.Flush()
	return 0
}
