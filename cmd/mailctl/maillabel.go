package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// The `mail label` and `mail purge` subcommands: labels and the star, and
// emptying trash for good.

// ownMailbox returns the mailbox a command acts on: the one named, or the
// caller's only one.
func ownMailbox(cf *clientFlags, named string) (string, error) {
	if named != "" {
		return named, nil
	}
	var out protocol.MailboxList
	if err := cf.call(protocol.VerbMailboxList, nil, &out); err != nil {
		return "", err
	}
	switch len(out.Mailboxes) {
	case 0:
		return "", protocol.Errorf(protocol.CodeNotFound, "you own no mailbox: create one with `mailctl mailboxes create NAME`")
	case 1:
		return out.Mailboxes[0].Name, nil
	}
	return "", protocol.Errorf(protocol.CodeInvalidInput, "you have %d mailboxes: name one with --mailbox", len(out.Mailboxes))
}

func mailLabel(args []string) int {
	cf := newClientFlags("mail label", "mail label ID... [--add L[,L]] [--remove L[,L]] [--star|--unstar] [--mailbox M] [--folder F] [--json]",
		`Adds and removes labels and stars or unstars messages. Labels are kept in each
message's frontmatter (labels, starred), compared ignoring case; list them with
mailctl mail list --label L or --starred.

Example:
    mailctl mail label 2026-03-01-120000-hello --add invoices,todo --star --mailbox agent`).withJSON()
	mailbox := cf.fs.String("mailbox", "", "mailbox (default: your only mailbox)")
	folder := cf.fs.String("folder", protocol.FolderInbox, "folder: inbox, sent, archive, trash or drafts")
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
	a := protocol.MessageLabelArgs{Folder: *folder, IDs: cf.fs.Args(), Add: add, Remove: remove}
	if *star || *unstar {
		a.Star = star
	}
	var err error
	if a.Mailbox, err = ownMailbox(cf, *mailbox); err != nil {
		return cf.fail(err)
	}
	var out protocol.MessageLabeled
	if err := cf.call(protocol.VerbMessageLabel, a, &out); err != nil {
		return cf.fail(err)
	}
	if cf.json {
		return printJSON(out)
	}
	fmt.Printf("changed %d of %d\n", len(out.Changed), len(cf.fs.Args()))
	if len(out.NotFound) > 0 {
		fmt.Fprintf(os.Stderr, "mailctl: not found in %s/%s: %s\n", a.Mailbox, *folder, strings.Join(out.NotFound, ", "))
		return exitCode(protocol.CodeNotFound)
	}
	return 0
}

func mailPurge(args []string) int {
	cf := newClientFlags("mail purge", "mail purge ID... | --before DATE [--mailbox M] [--json]",
		`Deletes messages of trash for good: the message, its raw .eml and its attachments.
Give ids, or --before to purge every message of trash received before a date
(YYYY-MM-DD, or an RFC 3339 time). Only trash can be purged: move a message there
first with mailctl mail move ID --to trash. This cannot be undone.

Examples:
    mailctl mail move 2026-03-01-120000-hello --to trash --mailbox agent
    mailctl mail purge 2026-03-01-120000-hello --mailbox agent
    mailctl mail purge --before 2026-02-01 --mailbox agent`).withJSON()
	mailbox := cf.fs.String("mailbox", "", "mailbox (default: your only mailbox)")
	before := cf.fs.String("before", "", "purge every message of trash received before this date (YYYY-MM-DD or RFC 3339)")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	a := protocol.MessagePurgeArgs{IDs: cf.fs.Args()}
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
	var err error
	if a.Mailbox, err = ownMailbox(cf, *mailbox); err != nil {
		return cf.fail(err)
	}
	var out protocol.MessagePurged
	if err := cf.call(protocol.VerbMessagePurge, a, &out); err != nil {
		return cf.fail(err)
	}
	if cf.json {
		return printJSON(out)
	}
	fmt.Printf("purged %d from %s/trash\n", len(out.Purged), a.Mailbox)
	if len(out.NotFound) > 0 {
		fmt.Fprintf(os.Stderr, "mailctl: not in %s/trash: %s\n", a.Mailbox, strings.Join(out.NotFound, ", "))
		return exitCode(protocol.CodeNotFound)
	}
	return 0
}

// parseDate reads a YYYY-MM-DD date (midnight UTC) or an RFC 3339 time.
func parseDate(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02", s)
}
