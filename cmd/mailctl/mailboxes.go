package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/mailctl/mailctl/protocol"
	"golang.org/x/sys/unix"
)

func init() {
	register(&command{name: "mailboxes", group: "mail", summary: "create, list, show, set and delete mailboxes", run: cmdMailboxes})
	register(&command{name: "version", group: "daemon", summary: "print the client's and the daemon's versions", run: cmdVersion})
}

const mailboxesHelp = `Usage: mailctl mailboxes SUBCOMMAND [flags]

  create NAME [--owner USER]     create a mailbox (yours, or USER's when root)
  list [--json]                  the mailboxes you own (root: all)
  show NAME [--json]             one mailbox: address, owner, counts, trust, hooks
  set NAME [--display-name X] [--trusted-senders A,B] [--inherit-trusted-senders]
                                 name a mailbox, choose whom it trusts (as the operator allows)
      [--quota-bytes N] [--quota-messages N] [--inherit-quota]
                                 set its quota (root)
  prune [NAME] [--dry-run]       apply the retention now (root; the daemon also does it hourly)
  delete NAME [--force] [--yes]  delete a mailbox (--force also deletes its mail)
  give --to OWNER[:GROUP] FOLDER
                                 give a mailbox's folder and its mail to OWNER (root)

Names match [a-z0-9._-]+ without leading or trailing dots, "..", or a leading '-'.`

func cmdMailboxes(args []string) int {
	return dispatch("mailboxes", mailboxesHelp, args, map[string]func([]string) int{
		"create": mailboxCreate,
		"list":   mailboxList,
		"ls":     mailboxList,
		"show":   mailboxShow,
		"set":    mailboxSet,
		"prune":  mailboxPrune,
		"delete": mailboxDelete,
		"rm":     mailboxDelete,
		"give":   mailboxGive,
	})
}

func mailboxCreate(args []string) int {
	cf := newClientFlags("mailboxes create", "mailboxes create NAME [--owner USER] [--json]",
		"Creates a mailbox owned by you, or by USER when run as root. Creating an existing mailbox of yours again is not an error.").withJSON()
	owner := cf.fs.String("owner", "", "owner's user name or uid (root only for other users)")
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one mailbox name"); !ok {
		return code
	}
	var out protocol.MailboxCreated
	if code, ok := cf.request(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: cf.fs.Arg(0), Owner: *owner}, &out); !ok {
		return code
	}
	if out.Created {
		fmt.Fprintf(stdout, "created %s (owner %s)\n", inert(out.Address), inert(out.Owner))
	} else {
		fmt.Fprintf(stdout, "%s already exists (owner %s)\n", inert(out.Address), inert(out.Owner))
	}
	return 0
}

func mailboxList(args []string) int {
	cf := newClientFlags("mailboxes list", "mailboxes list [--json]", "Lists the mailboxes you own; root sees all of them.").withJSON()
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	var out protocol.MailboxList
	if code, ok := cf.request(protocol.VerbMailboxList, nil, &out); !ok {
		return code
	}
	if len(out.Mailboxes) == 0 {
		fmt.Fprintln(stdout, "no mailboxes: create one with `mailctl mailboxes create NAME`")
		return 0
	}
	tw := table("NAME\tADDRESS\tOWNER\tINBOX\tUNREAD\tSENT\tUSAGE\tSOURCE")
	for _, m := range out.Mailboxes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", inert(m.Name), inert(m.Address), inert(m.Owner), m.Total, m.Unread, m.SentCount, usageText(m.Usage), inert(m.Source))
	}
	tw.Flush()
	return 0
}

func mailboxShow(args []string) int {
	cf := newClientFlags("mailboxes show", "mailboxes show NAME [--json]", "Shows one mailbox: address, owner, counts, trust policy and hooks.").withJSON()
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one mailbox name"); !ok {
		return code
	}
	var m protocol.Mailbox
	if code, ok := cf.request(protocol.VerbMailboxShow, protocol.NameArgs{Name: cf.fs.Arg(0)}, &m); !ok {
		return code
	}
	fmt.Fprintf(stdout, "name      %s\naddress   %s\nowner     %s (uid %d)\nsource    %s\npath      %s\ninbox     %d (%d unread)\nsent      %d\n",
		inert(m.Name), inert(m.Address), inert(m.Owner), m.OwnerUID, inert(m.Source), inert(m.Path), m.Total, m.Unread, m.SentCount)
	if m.DisplayName != "" {
		fmt.Fprintf(stdout, "from      %q <%s>\n", m.DisplayName, inert(m.Address))
	}
	if m.Trust != nil {
		senders := cmp.Or(strings.Join(m.Trust.TrustedSenders, ", "), "(none: no mail is marked trusted)")
		fmt.Fprintf(stdout, "trusted   %s [%s]\n", inert(senders), inert(m.Trust.Source))
	}
	if len(m.Hooks) == 0 {
		fmt.Fprintln(stdout, "hooks     none")
	}
	for _, h := range m.Hooks {
		fmt.Fprintf(stdout, "hook      %s %s %q (%s)\n", inert(h.Name), inert(h.Event), h.Cmd, inert(h.Source))
	}
	return 0
}

func mailboxSet(args []string) int {
	cf := newClientFlags("mailboxes set", "mailboxes set NAME [--display-name X] [--trusted-senders A,B | --inherit-trusted-senders] [--quota-bytes N] [--quota-messages N | --inherit-quota] [--json]",
		"Changes a mailbox you created: the display name outgoing From carries, and whose authenticated mail it trusts. "+
			"[mailbox_rules] in the config says what owners may change (display name: yes by default; trusted senders: no by default); "+
			"root may always. Only root sets a quota (0: none). Mailboxes declared in the config change only there.").withJSON()
	quotaBytes := cf.fs.String("quota-bytes", "", "the mailbox's own quota in bytes (suffixes KiB, MiB, GiB; 0: none); root only")
	quotaMessages := cf.fs.Int64("quota-messages", 0, "the mailbox's own quota in messages (0: none); root only")
	inheritQuota := cf.fs.Bool("inherit-quota", false, "drop the mailbox's own quota for [storage]'s default; root only")
	display := cf.fs.String("display-name", "", "the name outgoing From carries (one line, at most 100 characters; \"\" removes it)")
	senders := cf.fs.String("trusted-senders", "", "comma-separated patterns: alice@example.com, *@example.com, *@*.example.com (\"\" trusts no one)")
	inherit := cf.fs.Bool("inherit-trusted-senders", false, "drop the mailbox's own list and use [trust] trusted_senders")
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one mailbox name"); !ok {
		return code
	}
	a := protocol.MailboxUpdateArgs{Name: cf.fs.Arg(0), InheritTrustedSenders: *inherit, InheritQuota: *inheritQuota}
	var badBytes error
	cf.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "quota-bytes":
			n, err := parseBytes(*quotaBytes)
			badBytes = err
			a.QuotaBytes = &n
		case "quota-messages":
			a.QuotaMessages = quotaMessages
		case "display-name":
			a.DisplayName = display
		case "trusted-senders":
			list := commaList{} // "" trusts no one: an empty list, not none
			list.Set(*senders)
			a.TrustedSenders = (*[]string)(&list)
		}
	})
	if badBytes != nil {
		return usageError(cf.fs, "--quota-bytes: %v", badBytes)
	}
	if a.DisplayName == nil && a.TrustedSenders == nil && !a.InheritTrustedSenders && a.QuotaBytes == nil && a.QuotaMessages == nil && !a.InheritQuota {
		return usageError(cf.fs, "nothing to change: give --display-name, --trusted-senders, --inherit-trusted-senders, --quota-bytes, --quota-messages or --inherit-quota")
	}
	var m protocol.Mailbox
	if code, ok := cf.request(protocol.VerbMailboxUpdate, a, &m); !ok {
		return code
	}
	fmt.Fprintf(stdout, "updated %s\n", inert(m.Address))
	if m.DisplayName != "" {
		fmt.Fprintf(stdout, "from      %q <%s>\n", m.DisplayName, inert(m.Address))
	}
	if m.Trust != nil {
		fmt.Fprintf(stdout, "trusted   %s [%s]\n", inert(strings.Join(m.Trust.TrustedSenders, ", ")), inert(m.Trust.Source))
	}
	if m.Usage != nil {
		fmt.Fprintf(stdout, "usage     %s [%s]\n", usageText(m.Usage), inert(m.Usage.QuotaSource))
	}
	return 0
}

// usageText is a mailbox's usage against its quota: "1.2 MiB/1.0 GiB, 40/-"
// (bytes, then messages; - where there is no limit).
func usageText(u *protocol.MailboxUsage) string {
	if u == nil {
		return "-"
	}
	limit := func(n int64, f func(int64) string) string {
		if n == 0 {
			return "-"
		}
		return f(n)
	}
	s := fmt.Sprintf("%s/%s, %d/%s", humanSize(u.Bytes), limit(u.QuotaBytes, humanSize), u.Messages, limit(u.QuotaMessages, func(n int64) string { return fmt.Sprint(n) }))
	if u.OverQuota {
		s += " OVER QUOTA"
	}
	return s
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// parseBytes reads a size: a number of bytes, or one with KiB, MiB or GiB.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: give bytes, or a number with KiB, MiB or GiB (e.g. 512MiB)", s)
	}
	return n * mult, nil
}

func mailboxDelete(args []string) int {
	cf := newClientFlags("mailboxes delete", "mailboxes delete NAME [--force] [--yes]",
		"Deletes a mailbox. A mailbox with mail is refused unless --force, which deletes its mail too.").withJSON()
	force := cf.fs.Bool("force", false, "delete even if the mailbox has mail")
	yes := cf.fs.Bool("yes", false, "do not ask for confirmation")
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one mailbox name"); !ok {
		return code
	}
	name := cf.fs.Arg(0)
	if *force && !*yes {
		if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err != nil {
			return usageError(cf.fs, "--force deletes %q with its mail and asks to confirm on a terminal; stdin is not one: add --yes to confirm", name)
		}
		fmt.Fprintf(stderr, "Delete mailbox %q and all of its mail? Type the name to confirm: ", name)
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(line) != name {
			fmt.Fprintln(stderr, "not deleted")
			return 1
		}
	}
	var out protocol.Deleted
	if err := cf.call(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: name, Force: *force}, &out); err != nil {
		// The daemon words it for any client; the flag is this one's.
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeConflict && !*force && strings.Contains(pe.Message, "not empty") {
			err = &protocol.Error{Code: pe.Code, Message: pe.Message + fmt.Sprintf(": mailctl mailboxes delete %s --force", name)}
		}
		return cf.fail(err)
	}
	if cf.json {
		return printJSON(out)
	}
	fmt.Fprintf(stdout, "deleted %s\n", inert(out.Name))
	return 0
}

func cmdVersion(args []string) int {
	cf := newClientFlags("version", "version [--json]", "Prints this client's version and, when the daemon answers, the daemon's.").withJSON()
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	var info protocol.VersionInfo
	err := cf.call(protocol.VerbVersion, nil, &info)
	if cf.json {
		out := map[string]any{"client": version, "protocol": protocol.Version}
		if err == nil {
			out["daemon"] = info
		} else {
			out["daemon_error"] = err.Error()
		}
		return printJSON(out)
	}
	fmt.Fprintf(stdout, "mailctl %s (protocol %s)\n", version, protocol.Version)
	if err != nil {
		fmt.Fprintf(stdout, "daemon: not reachable (%s)\n", inert(err.Error()))
		return 0
	}
	fmt.Fprintf(stdout, "daemon: mailctl %s (protocol %s), you are uid %d\n", inert(info.Server), inert(info.ProtocolVersion), info.CallerUID)
	if info.Server != version {
		fmt.Fprintln(stdout, "note: client and daemon versions differ; upgrade so both match")
	}
	return 0
}

func mailboxPrune(args []string) int {
	cf := newClientFlags("mailboxes prune", "mailboxes prune [NAME] [--dry-run] [--json]",
		"Applies the retention in [storage.retention] now, to every mailbox or to NAME (root only): messages past their folder's retention move to trash, "+
			"and messages in trash past trash's retention (counted from when they came to trash) are removed for good. "+
			"The daemon does the same every storage.prune_every; --dry-run only says what it would do.").withJSON()
	dry := cf.fs.Bool("dry-run", false, "say what would be moved and removed, change nothing")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	if cf.fs.NArg() > 1 {
		return usageError(cf.fs, "give at most one mailbox name")
	}
	var res protocol.PruneResult
	if code, ok := cf.request(protocol.VerbMailboxPrune, protocol.MailboxPruneArgs{Mailbox: cf.fs.Arg(0), DryRun: *dry}, &res); !ok {
		return code
	}
	verb := map[bool][2]string{false: {"moved to trash", "removed for good"}, true: {"would move to trash", "would remove for good"}}[*dry]
	if len(res.Rows) == 0 {
		fmt.Fprintln(stdout, "nothing is past its folder's retention")
		return 0
	}
	tw := table("MAILBOX\tFOLDER\tOLDER THAN\tMESSAGES\tACTION")
	for _, r := range res.Rows {
		action := verb[0]
		if r.Action == "purge" {
			action = verb[1]
		}
		fmt.Fprintf(tw, "%s\t%s\t%gd\t%d\t%s\n", inert(r.Mailbox), inert(r.Folder), r.OlderThanDays, r.Count, action)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d %s, %d %s\n", res.Moved, verb[0], res.Purged, verb[1])
	return 0
}
