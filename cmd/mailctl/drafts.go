package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/hooks"
	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "drafts", group: "mail", summary: "create, list, show, edit, send and delete drafts", run: cmdDrafts})
}

const draftsHelp = `Usage: mailctl drafts SUBCOMMAND [flags]

  list MAILBOX [--json]            the mailbox's drafts, newest first
  show MAILBOX ID [--json]         one draft: its headers and body
  create MAILBOX [flags]           write a new draft (recipients are optional)
  update MAILBOX ID [flags]        change the fields given
  edit MAILBOX ID                  open the draft's file in $EDITOR
  send MAILBOX ID [--send-at T]    send the draft as it is on disk now
  delete MAILBOX ID                discard a draft

A draft is a Markdown file with frontmatter in the mailbox's drafts/ folder.
Edit it by hand or with edit; send reads the file as it is then, and sends it
through the same policy, DKIM signing and queue as mailctl send. Once sent it
leaves drafts/ and its copy is in sent/.

Examples:
    mailctl drafts create agent --to bob@example.org --subject "Weekly report" --body "Numbers for review."
    mailctl drafts list agent
    DRAFT=$(mailctl drafts list agent --ids | head -n 1)
    mailctl drafts send agent "$DRAFT" --send-at 2h`

func cmdDrafts(args []string) int {
	return dispatch("drafts", draftsHelp, args, map[string]func([]string) int{
		"list":   draftsList,
		"ls":     draftsList,
		"show":   draftsShow,
		"create": func(a []string) int { return draftsWrite(a, false) },
		"update": func(a []string) int { return draftsWrite(a, true) },
		"edit":   draftsEdit,
		"send":   draftsSend,
		"delete": draftsDelete,
		"rm":     draftsDelete,
	})
}

// draftsPlace is where a drafts command acts: the drafts of its MAILBOX.
func draftsPlace(cf *clientFlags) func() (string, string) {
	return func() (string, string) { return cf.fs.Arg(0), protocol.FolderDrafts }
}

func draftsList(args []string) int {
	cf := newClientFlags("drafts list", "drafts list MAILBOX [--ids] [--json]", "Lists the mailbox's drafts, newest first.").withJSON()
	cf.place = draftsPlace(cf)
	ids := cf.fs.Bool("ids", false, "print only the drafts' ids, one a line (for scripts)")
	if code, ok := parseArgs(cf.fs, args, 1, "give the mailbox"); !ok {
		return code
	}
	var out protocol.MessageList
	if code, ok := cf.request(protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: cf.fs.Arg(0), Folder: protocol.FolderDrafts, Limit: 200}, &out); !ok {
		return code
	}
	if *ids {
		printIDs(out.Messages)
		return 0
	}
	if len(out.Messages) == 0 {
		fmt.Fprintln(stdout, "no drafts")
		return 0
	}
	tw := table("ID\tTO\tSUBJECT\tDATE")
	for _, m := range out.Messages {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", inert(m.ID), fit(inert(strings.Join(m.To, ", ")), 40), fit(inert(m.Subject), 60), m.Date.Local().Format(time.DateTime))
	}
	tw.Flush()
	return 0
}

// readDraftArgs ask for the draft that a command's MAILBOX ID arguments name.
func readDraftArgs(fs *flag.FlagSet) protocol.MessageReadArgs {
	return protocol.MessageReadArgs{Mailbox: fs.Arg(0), Folder: protocol.FolderDrafts, ID: fs.Arg(1), MaxChars: 200_000}
}

func draftsShow(args []string) int {
	cf := newClientFlags("drafts show", "drafts show MAILBOX ID [--json]", "Shows one draft: its recipients, subject, schedule and body.").withJSON()
	cf.place = draftsPlace(cf)
	if code, ok := parseArgs(cf.fs, args, 2, "give the mailbox and the draft id"); !ok {
		return code
	}
	var m protocol.Message
	if code, ok := cf.request(protocol.VerbMessageRead, readDraftArgs(cf.fs), &m); !ok {
		return code
	}
	// Every field may come from a sender (a reply draft copies the
	// subject and Reply-To it answers) or a hand edit: printed inert.
	fmt.Fprintf(stdout, "id:       %s\nfile:     %s\nto:       %s\n", inert(m.ID), inert(m.Path), inert(strings.Join(m.To, ", ")))
	if len(m.Cc) > 0 {
		fmt.Fprintf(stdout, "cc:       %s\n", inert(strings.Join(m.Cc, ", ")))
	}
	if len(m.Bcc) > 0 {
		fmt.Fprintf(stdout, "bcc:      %s\n", inert(strings.Join(m.Bcc, ", ")))
	}
	fmt.Fprintf(stdout, "subject:  %s\n", inert(m.Subject))
	for _, a := range m.AttachmentList {
		fmt.Fprintf(stdout, "attached: %s (%d bytes)\n", inert(a.Filename), a.Size)
	}
	fmt.Fprintf(stdout, "\n%s\n", inertBody(m.Body))
	return 0
}

func draftsWrite(args []string, update bool) int {
	cf := newClientFlags(draftsWriteUsage(update)).withJSON()
	cf.place = draftsPlace(cf)
	var f draftFlags
	f.define(cf.fs, update)
	want, what := 1, "give the mailbox"
	if update {
		want, what = 2, "give the mailbox and the draft id"
	}
	if code, ok := parseArgs(cf.fs, args, want, what); !ok {
		return code
	}
	if f.body != "" && f.bodyFile != "" {
		return usageError(cf.fs, "--body and --body-file exclude each other")
	}
	set := map[string]bool{}
	cf.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	atts, at, err := f.read(set)
	if err != nil {
		return usageError(cf.fs, "%v", err)
	}
	mailbox := cf.fs.Arg(0)
	verb, req := protocol.VerbDraftCreate, any(protocol.DraftArgs{Mailbox: mailbox, To: f.to, Cc: f.cc, Bcc: f.bcc, Subject: f.subject, Body: f.body, Attachments: atts, ReplyToID: f.replyToID, SendAt: at})
	if update {
		verb, req = protocol.VerbDraftUpdate, f.updateArgs(mailbox, cf.fs.Arg(1), set, atts, at)
	}
	var d protocol.Draft
	if code, ok := cf.request(verb, req, &d); !ok {
		return code
	}
	printDraftWritten(d, update)
	return 0
}

// draftsWriteUsage is the name, usage line and help text of drafts create,
// or of drafts update when update is set.
func draftsWriteUsage(update bool) (name, usage, about string) {
	if update {
		return "drafts update", "drafts update MAILBOX ID [--to ADDR]... [--cc ADDR] [--bcc ADDR] [--subject S] [--body TEXT | --body-file F] [--attach PATH]... [--send-at TIME | --no-send-at] [--json]",
			"Changes the fields given; --to, --cc, --bcc and --attach replace the draft's lists."
	}
	return "drafts create", "drafts create MAILBOX [--to ADDR]... [--cc ADDR] [--bcc ADDR] [--subject S] [--body TEXT | --body-file F] [--attach PATH]... [--reply-to-id ID] [--send-at TIME] [--json]",
		"Writes a new draft in the mailbox's drafts folder. Recipients may come later. --reply-to-id names a stored message the draft answers (thread, recipients and Re: subject are filled in). --send-at is when it goes out once sent."
}

// draftFlags holds the draft's fields as drafts create and update take
// them from the command line.
type draftFlags struct {
	to, cc, bcc                                commaList
	attach                                     stringList
	subject, body, bodyFile, replyToID, sendAt string
	noSendAt                                   bool
}

// define adds the flags to fs: --no-send-at only to update, which may have
// a send time to remove, and --reply-to-id only to create, since an update
// cannot change the message a draft answers.
func (f *draftFlags) define(fs *flag.FlagSet, update bool) {
	fs.Var(&f.to, "to", "recipient (repeatable)")
	fs.Var(&f.cc, "cc", "Cc recipient (repeatable)")
	fs.Var(&f.bcc, "bcc", "Bcc recipient (repeatable)")
	fs.StringVar(&f.subject, "subject", "", "subject")
	fs.StringVar(&f.body, "body", "", "body text (Markdown)")
	fs.StringVar(&f.bodyFile, "body-file", "", "read the body from this file (- for stdin)")
	fs.Var(&f.attach, "attach", "attach this file (repeatable)")
	fs.StringVar(&f.sendAt, "send-at", "", "send at this time once sent (RFC 3339, or a duration from now such as 2h)")
	if update {
		fs.BoolVar(&f.noSendAt, "no-send-at", false, "remove the draft's send time")
	} else {
		fs.StringVar(&f.replyToID, "reply-to-id", "", "id of a stored message this draft answers")
	}
}

// read loads what the flags point to: the body file, which then counts as
// --body in set, the attachments and the send time (nil when none is given).
func (f *draftFlags) read(set map[string]bool) ([]protocol.SendAttachment, *time.Time, error) {
	if f.bodyFile != "" {
		b, err := readBodyFile(f.bodyFile)
		if err != nil {
			return nil, nil, err
		}
		f.body, set["body"] = b, true
	}
	atts, err := readAttachmentFiles(f.attach)
	if err != nil {
		return nil, nil, err
	}
	if f.sendAt == "" {
		return atts, nil, nil
	}
	t, err := parseSendAt(f.sendAt)
	if err != nil {
		return nil, nil, err
	}
	return atts, &t, nil
}

// updateArgs carries only the fields whose flags were given (set), so that
// an update leaves the others as the draft has them.
func (f *draftFlags) updateArgs(mailbox, id string, set map[string]bool, atts []protocol.SendAttachment, at *time.Time) protocol.DraftUpdateArgs {
	a := protocol.DraftUpdateArgs{Mailbox: mailbox, ID: id, SendAt: at, ClearSendAt: f.noSendAt}
	lists := []struct {
		flag string
		l    []string
		dst  **[]string
	}{{"to", f.to, &a.To}, {"cc", f.cc, &a.Cc}, {"bcc", f.bcc, &a.Bcc}}
	for _, x := range lists {
		if set[x.flag] {
			l := append([]string{}, x.l...)
			*x.dst = &l
		}
	}
	if set["subject"] {
		a.Subject = &f.subject
	}
	if set["body"] {
		a.Body = &f.body
	}
	if set["attach"] {
		a.Attachments = &atts
	}
	return a
}

// printDraftWritten tells where the draft created or updated is, and when
// it goes out once sent.
func printDraftWritten(d protocol.Draft, update bool) {
	verb := "created"
	if update {
		verb = "updated"
	}
	fmt.Fprintf(stdout, "draft %s %s\nfile: %s\n", inert(d.ID), verb, inert(d.Path))
	if d.SendAt != nil {
		fmt.Fprintf(stdout, "send at: %s (once sent)\n", d.SendAt.Local().Format(time.DateTime+" MST"))
	}
}

func draftsEdit(args []string) int {
	cf := newClientFlags("drafts edit", "drafts edit MAILBOX ID", "Opens the draft's file in $VISUAL or $EDITOR (vi if neither is set), with your own rights; run by root, the editor runs as the mailbox's owner, on a terminal of its own that mailctl relays to yours, with none of your environment but TERM, the locale and PATH.")
	cf.place = draftsPlace(cf)
	if code, ok := parseArgs(cf.fs, args, 2, "give the mailbox and the draft id"); !ok {
		return code
	}
	var m protocol.Message
	if code, ok := cf.request(protocol.VerbMessageRead, readDraftArgs(cf.fs), &m); !ok {
		return code
	}
	editor := cmp.Or(os.Getenv("VISUAL"), os.Getenv("EDITOR"), "vi")
	argv := append(strings.Fields(editor), m.Path)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	run := cmd.Run
	if os.Geteuid() == 0 {
		var mb protocol.Mailbox
		if code, ok := cf.request(protocol.VerbMailboxShow, protocol.NameArgs{Name: cf.fs.Arg(0)}, &mb); !ok {
			return code
		}
		if err := asOwner(cmd, mb.OwnerUID); err != nil {
			return failure(cf.fs, err)
		}
		if cmd.SysProcAttr != nil {
			run = func() error { return runApart(cmd) }
		}
	}
	if err := run(); err != nil {
		return failure(cf.fs, fmt.Errorf("%s: %w", editor, err))
	}
	return 0
}

// asOwner makes root's editor run as uid, the owner of the draft's
// mailbox. The draft is a path in a folder its owner controls: once the
// daemon has read it, the owner may put a symlink to any file there, which
// an editor with root's rights would open and save.
func asOwner(cmd *exec.Cmd, uid uint32) error {
	if uid == 0 {
		return nil
	}
	o, err := hooks.LookupOwner(uid)
	if err != nil {
		return fmt.Errorf("the editor runs as the mailbox's owner (uid %d): %v", uid, err)
	}
	groups := o.Groups
	if groups == nil {
		groups = []uint32{} // drop root's supplementary groups too
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: o.UID, Gid: o.GID, Groups: groups}}
	cmd.Env = ownerEnv(os.Environ(), cmp.Or(o.Home, "/"), o.Name, o.Shell)
	return nil
}

func draftsSend(args []string) int {
	cf := newClientFlags("drafts send", "drafts send MAILBOX ID [--send-at TIME] [--dry-run] [--json]",
		"Sends the draft as its file is now, through the same policy, signing and queue as mailctl send. --send-at overrides the draft's own time. "+
			"--dry-run prints the size and envelope as mailctl send --dry-run does, the return path's tag as <tag>.").withJSON()
	cf.place = draftsPlace(cf)
	var sendAt string
	var dry bool
	cf.fs.StringVar(&sendAt, "send-at", "", "send at this time (RFC 3339, or a duration from now such as 2h)")
	cf.fs.BoolVar(&dry, "dry-run", false, "validate, render and sign, but do not send")
	if code, ok := parseArgs(cf.fs, args, 2, "give the mailbox and the draft id"); !ok {
		return code
	}
	a := protocol.DraftSendArgs{Mailbox: cf.fs.Arg(0), ID: cf.fs.Arg(1), DryRun: dry}
	if sendAt != "" {
		t, err := parseSendAt(sendAt)
		if err != nil {
			return usageError(cf.fs, "%v", err)
		}
		a.SendAt = &t
	}
	var res protocol.SendResult
	if code, ok := cf.request(protocol.VerbDraftSend, a, &res); !ok {
		return code
	}
	return printSendResult(res)
}

func draftsDelete(args []string) int {
	cf := newClientFlags("drafts delete", "drafts delete MAILBOX ID [--json]", "Discards a draft: its file and attachments are removed.").withJSON()
	cf.place = draftsPlace(cf)
	if code, ok := parseArgs(cf.fs, args, 2, "give the mailbox and the draft id"); !ok {
		return code
	}
	var out protocol.DraftDeleted
	if code, ok := cf.request(protocol.VerbDraftDelete, protocol.DraftIDArgs{Mailbox: cf.fs.Arg(0), ID: cf.fs.Arg(1)}, &out); !ok {
		return code
	}
	fmt.Fprintf(stdout, "draft %s deleted\n", inert(out.ID))
	return 0
}
