package main

import (
	"fmt"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// The `mail label` and `mail purge` subcommands: labels and the star, and
// emptying trash for good.

func mailLabel(args []string) int {
	cf := newMailFlags("mail label", "mail label ID... [--add L[,L]] [--remove L[,L]] [--star|--unstar] [--mailbox M] [--folder F] [--json]",
		`Adds and removes labels and stars or unstars messages. Labels are kept in each
message's frontmatter (labels, starred), compared ignoring case; list them with
mailctl mail list --label L or --starred.

Examples:
    mailctl send --from agent --to agent@mailctl.test --subject "Invoice 42" --body "Due in March."
    ID=$(mailctl mail list --mailbox agent --subject "Invoice 42" --limit 1 --ids)
    mailctl mail label "$ID" --add invoices,todo --star --mailbox agent
    mailctl mail list --label invoices --starred --mailbox agent`, true)
	var add, remove commaList
	cf.fs.Var(&add, "add", "labels to add (comma-separated, or repeat the flag)")
	cf.fs.Var(&remove, "remove", "labels to remove (comma-separated, or repeat the flag)")
	star := cf.fs.Bool("star", false, "star the messages")
	unstar := cf.fs.Bool("unstar", false, "unstar the messages")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	if cf.fs.NArg() == 0 {
		return usageError(cf.fs, "give at least one message id (from `mailctl mail list`)")
	}
	if *star && *unstar {
		return usageError(cf.fs, "give --star or --unstar, not both")
	}
	if len(add) == 0 && len(remove) == 0 && !*star && !*unstar {
		return usageError(cf.fs, "nothing to change: give --add, --remove, --star or --unstar")
	}
	if err := cf.resolveMailbox(); err != nil {
		return cf.fail(err)
	}
	a := protocol.MessageLabelArgs{Mailbox: cf.mailbox, Folder: cf.folder, IDs: cf.fs.Args(), Add: add, Remove: remove}
	if *star || *unstar {
		a.Star = star
	}
	var out protocol.MessageLabeled
	if code, ok := cf.request(protocol.VerbMessageLabel, a, &out); !ok {
		return code
	}
	fmt.Fprintf(stdout, "changed %d of %d\n", len(out.Changed), len(cf.fs.Args()))
	return cf.reportBatch(cf.mailbox, cf.folder, out.NotFound, out.Failed)
}

// reportBatch prints, on stderr, the ids of a batch that failed, each with
// the daemon's reason (which names the file), and those that were not found
// (missingIDs, with the command that lists them), and returns the command's
// exit code: a failure's, else not_found's, else 0.
func (cf *clientFlags) reportBatch(mailbox, folder string, notFound []string, failed []protocol.ItemFailure) int {
	for _, f := range failed {
		fmt.Fprintf(stderr, "mailctl: %s not changed: %s (%s)\n", inert(f.ID), inert(f.Message), inert(f.Code))
	}
	code := 0
	if len(notFound) > 0 {
		code = cf.missingIDs(notFound, mailbox, folder)
	}
	if len(failed) > 0 {
		return exitCode(failed[0].Code)
	}
	return code
}

func mailPurge(args []string) int {
	cf := newMailFlags("mail purge", "mail purge ID... | --before DATE [--mailbox M] [--json]",
		`Deletes messages of trash for good: the message, its raw .eml and its attachments.
Give ids, or --before to purge every message of trash received before a date
(YYYY-MM-DD, or an RFC 3339 time). Only trash can be purged: move a message there
first with mailctl mail move ID --to trash. This cannot be undone.

Examples:
    mailctl send --from agent --to agent@mailctl.test --subject "old news" --body "to be purged"
    OLD=$(mailctl mail list --mailbox agent --subject "old news" --limit 1 --ids)
    mailctl mail move "$OLD" --to trash --mailbox agent
    mailctl mail purge "$OLD" --mailbox agent
    mailctl mail purge --before 2026-02-01 --mailbox agent`, false)
	before := cf.fs.String("before", "", "purge every message of trash received before this date (YYYY-MM-DD or RFC 3339)")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	a := protocol.MessagePurgeArgs{IDs: cf.fs.Args()}
	cf.folder = protocol.FolderTrash // where a not_found's next step looks
	if *before != "" {
		if len(a.IDs) > 0 {
			return usageError(cf.fs, "give ids or --before, not both")
		}
		t, err := parseDate(*before)
		if err != nil {
			return usageError(cf.fs, "--before %q: use YYYY-MM-DD or an RFC 3339 time", *before)
		}
		a.Before = &t
	} else if len(a.IDs) == 0 {
		return usageError(cf.fs, "give message ids in trash (mailctl mail list --folder trash) or --before DATE")
	}
	if err := cf.resolveMailbox(); err != nil {
		return cf.fail(err)
	}
	a.Mailbox = cf.mailbox
	var out protocol.MessagePurged
	if code, ok := cf.request(protocol.VerbMessagePurge, a, &out); !ok {
		return code
	}
	fmt.Fprintf(stdout, "purged %d from %s/trash\n", len(out.Purged), inert(a.Mailbox))
	return cf.reportBatch(a.Mailbox, protocol.FolderTrash, out.NotFound, out.Failed)
}

// parseDate reads a YYYY-MM-DD date (midnight UTC) or an RFC 3339 time.
func parseDate(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !protocol.CarriesTime(t) {
			return time.Time{}, fmt.Errorf("time %q: its zone offset is past 23:59", s)
		}
		return t, nil
	}
	return time.Parse("2006-01-02", s)
}
