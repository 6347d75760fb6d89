package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "hooks", group: "mail", summary: "create, list and delete hooks; see their runs", run: cmdHooks})
}

const hooksHelp = `Usage: mailctl hooks SUBCOMMAND [flags]

  create --mailbox M --event E --cmd '["/abs/bin","arg"]' [--name N]
         [--timeout-secs S] [--fire-on-untrusted] [--fire-on-auto-submitted] [--fire-on-lists]
                                 run a command as the mailbox owner on_receive or after_send
  list [--mailbox M] [--json]    hooks on your mailboxes (root: all)
  delete NAME [--mailbox M]      delete a hook on one of your mailboxes
  runs [NAME] [--json]           recent runs: exit code, duration, timeout, stderr tail

docs/hooks.md has the contract: environment, stdin, timeouts and the trust gate.`

func cmdHooks(args []string) int {
	return dispatch("hooks", hooksHelp, args, map[string]func([]string) int{
		"create": hookCreate,
		"list":   hookList,
		"ls":     hookList,
		"delete": hookDelete,
		"rm":     hookDelete,
		"runs":   hookRuns,
	})
}

func hookCreate(args []string) int {
	cf := newClientFlags("hooks create", `hooks create --mailbox M --event on_receive|after_send --cmd '["/abs/bin","arg"]' [--name N] [--timeout-secs S] [--fire-on-untrusted] [--fire-on-auto-submitted] [--fire-on-lists]`,
		`Creates a hook. The command runs directly (no shell) as the mailbox owner with the
message's Markdown on stdin and MAILCTL_* variables in its environment. on_receive
hooks fire only for trusted mail unless --fire-on-untrusted, which only root may
set unless the operator allows it, and skip auto-submitted and mailing-list mail
unless --fire-on-auto-submitted or --fire-on-lists. The three --fire-on flags are
for on_receive hooks only.`).withJSON()
	a := protocol.HookCreateArgs{}
	var cmdJSON string
	cf.fs.StringVar(&a.Mailbox, "mailbox", "", "mailbox the hook belongs to")
	cf.fs.StringVar(&a.Event, "event", "", "on_receive or after_send")
	cf.fs.StringVar(&cmdJSON, "cmd", "", `argv as a JSON array, first element an absolute path, e.g. '["/usr/local/bin/wake","--fast"]'`)
	cf.fs.StringVar(&a.Name, "name", "", "hook name (default: a stable name derived from event, argv and flags)")
	cf.fs.IntVar(&a.TimeoutSecs, "timeout-secs", 0, "seconds before the hook's process group is killed, 1-600 (default 60)")
	cf.fs.BoolVar(&a.FireOnUntrusted, "fire-on-untrusted", false, "also fire for mail that is not trusted (dangerous: anyone can trigger it)")
	cf.fs.BoolVar(&a.FireOnAuto, "fire-on-auto-submitted", false, "also fire for Auto-Submitted mail (auto-replies, bounces)")
	cf.fs.BoolVar(&a.FireOnLists, "fire-on-lists", false, "also fire for mailing-list mail")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	if a.Mailbox == "" || a.Event == "" || cmdJSON == "" {
		return usageError(cf.fs, "--mailbox, --event and --cmd are required")
	}
	if err := json.Unmarshal([]byte(cmdJSON), &a.Cmd); err != nil {
		return usageError(cf.fs, `--cmd must be a JSON array of strings, e.g. '["/bin/echo","hi"]': %v`, err)
	}
	// The owner runs the hook, so look with the caller's own rights: a
	// missing program shows now rather than as a failed run later.
	if len(a.Cmd) > 0 && filepath.IsAbs(a.Cmd[0]) {
		fi, err := os.Stat(a.Cmd[0])
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return usageError(cf.fs, "cmd[0] %s does not exist: install the program first, or fix the path", a.Cmd[0])
		case err == nil && fi.IsDir():
			return usageError(cf.fs, "cmd[0] %s is a directory: name the program to run", a.Cmd[0])
		case err == nil && fi.Mode().Perm()&0o111 == 0:
			return usageError(cf.fs, `cmd[0] %s is not executable: chmod +x it, or run it through an interpreter, e.g. '["/bin/sh","%s"]'`, a.Cmd[0], a.Cmd[0])
		}
	}
	var h protocol.Hook
	if code, ok := cf.request(protocol.VerbHookCreate, a, &h); !ok {
		return code
	}
	fmt.Fprintf(stdout, "hook %s on %s (%s)\n", inert(h.Name), inert(h.Mailbox), inert(h.Event))
	return 0
}

func hookList(args []string) int {
	cf := newClientFlags("hooks list", "hooks list [--mailbox M] [--json]", "Lists hooks on the mailboxes you own (root: all), operator hooks first.").withJSON()
	mailbox := cf.fs.String("mailbox", "", "only this mailbox's hooks")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	var out protocol.HookList
	if code, ok := cf.request(protocol.VerbHookList, protocol.HookListArgs{Mailbox: *mailbox}, &out); !ok {
		return code
	}
	if len(out.Hooks) == 0 {
		fmt.Fprintln(stdout, "no hooks")
		return 0
	}
	tw := table("NAME\tMAILBOX\tEVENT\tCMD\tTIMEOUT\tUNTRUSTED\tSOURCE\tLAST RUN")
	for _, h := range out.Hooks {
		last := "-"
		if h.LastRun != nil {
			last = fmt.Sprintf("exit %d %s", h.LastRun.ExitCode, h.LastRun.StartedAt.Local().Format(time.DateTime))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%ds\t%v\t%s\t%s\n", inert(h.Name), inert(h.Mailbox), inert(h.Event), inert(strings.Join(h.Cmd, " ")), h.TimeoutSecs, h.FireOnUntrusted, inert(h.Source), last)
	}
	tw.Flush()
	return 0
}

func hookDelete(args []string) int {
	cf := newClientFlags("hooks delete", "hooks delete NAME [--mailbox M]", "Deletes a hook on one of your mailboxes. Hook names are unique per mailbox: name the mailbox when\nseveral of yours have a hook of that name. Operator hooks are changed in config.toml.").withJSON()
	mailbox := cf.fs.String("mailbox", "", "the mailbox the hook is on (needed when several of yours have a hook of that name)")
	if code, ok := parseArgs(cf.fs, args, 1, "give exactly one hook name"); !ok {
		return code
	}
	var out protocol.Deleted
	if code, ok := cf.request(protocol.VerbHookDelete, protocol.HookDeleteArgs{Name: cf.fs.Arg(0), Mailbox: *mailbox}, &out); !ok {
		return code
	}
	fmt.Fprintf(stdout, "deleted hook %s\n", inert(out.Name))
	return 0
}

func hookRuns(args []string) int {
	cf := newClientFlags("hooks runs", "hooks runs [NAME] [--limit N] [--json]", "Shows recent hook runs on your mailboxes, newest first.").withJSON()
	limit := cf.fs.Int("limit", 20, "how many runs (at most 500)")
	if code, ok := parseFlags(cf.fs, args); !ok {
		return code
	}
	a := protocol.HookRunsArgs{Name: cf.fs.Arg(0), Limit: *limit}
	var out protocol.HookRuns
	if code, ok := cf.request(protocol.VerbHookRuns, a, &out); !ok {
		return code
	}
	if len(out.Runs) == 0 && a.Name != "" {
		var hl protocol.HookList
		if err := cf.call(protocol.VerbHookList, protocol.HookListArgs{}, &hl); err == nil {
			if !slices.ContainsFunc(hl.Hooks, func(h protocol.Hook) bool { return h.Name == a.Name }) {
				return cf.fail(&protocol.Error{Code: protocol.CodeNotFound, Missing: protocol.MissingHook,
					Message: fmt.Sprintf("no hook %q on your mailboxes: list your hooks to see their names", a.Name)})
			}
		}
	}
	if len(out.Runs) == 0 {
		fmt.Fprintln(stdout, "no runs yet")
		return 0
	}
	tw := table("STARTED\tHOOK\tMAILBOX\tMESSAGE\tRESULT\tDURATION\tSTDERR")
	for _, r := range out.Runs {
		// The hook's stderr is the hook's (and, through it, a sender's) words.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%dms\t%s\n", r.StartedAt.Local().Format(time.DateTime), inert(r.Hook), inert(r.Mailbox), inert(r.MessageID),
			runResult(r), r.DurationMS, firstLine(r.StderrTail))
	}
	tw.Flush()
	return 0
}

// runResult is how a hook run ended, in a word or a line: ok, exit N,
// timed out, or the daemon's error (not started, killed by a signal). What
// the hook wrote to stderr is its own column: a hook that succeeds may
// write there too, and that is no error.
func runResult(r protocol.HookRun) string {
	switch {
	case r.TimedOut:
		return "timed out"
	case r.Error != "":
		return firstLine(r.Error)
	case r.ExitCode != 0:
		return fmt.Sprintf("exit %d", r.ExitCode)
	}
	return "ok"
}

// firstLine is the first line of s, made inert and cut to 80 characters.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return fit(inert(s), 80)
}
