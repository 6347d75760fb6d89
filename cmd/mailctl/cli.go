package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// clientFlags are the flags every socket client shares.
type clientFlags struct {
	fs     *flag.FlagSet
	socket string
	// config is the --config of a command that has one: its file's
	// paths.socket is where the daemon is when no socket is named.
	config string
	json   bool
	// place is the mailbox and folder the command acts on, when it acts on
	// one: a not_found's next step lists what is there.
	place func() (mailbox, folder string)
}

// newClientFlags makes a flag set for a client command. usageLine is shown
// after "Usage: mailctl"; about is the paragraph under it.
func newClientFlags(name, usageLine, about string) *clientFlags {
	cf := &clientFlags{fs: newFlagSet(name, usageLine, about)}
	cf.fs.StringVar(&cf.socket, "socket", "", "control socket (default $MAILCTL_SOCKET, then the config's paths.socket, then "+protocol.DefaultSocket+")")
	return cf
}

func (cf *clientFlags) withJSON() *clientFlags {
	cf.fs.BoolVar(&cf.json, "json", false, "print JSON instead of text")
	return cf
}

// newFlagSet makes the flag set of command name, whose help shows usageLine
// after "Usage: mailctl", then about, then the flags.
func newFlagSet(name, usageLine, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: mailctl %s\n\n%s\n", usageLine, strings.TrimSpace(about))
		var any bool
		fs.VisitAll(func(*flag.Flag) { any = true })
		if any {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args; it returns (exit code, false) when the command should stop
// (help asked, or bad flags).
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(interleave(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		durationHint(fs, err)
		return 2, false
	}
	return 0, true
}

// durationHint follows the flag package's "parse error" for a duration flag
// given a bare number (`--timeout 10`, as the MCP tools' timeout_secs would
// have it) with the form it takes.
func durationHint(fs *flag.FlagSet, err error) {
	_, rest, ok := strings.Cut(err.Error(), " for flag -")
	name, _, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return
	}
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				fmt.Fprintf(stderr, "mailctl %s: --%s takes a duration with its unit, e.g. 30s, 5m or 2h\n", fs.Name(), name)
			}
		}
	}
}

// parseArgs is parseFlags for a command that takes exactly n arguments;
// want says which when it is given another number.
func parseArgs(fs *flag.FlagSet, args []string, n int, want string) (int, bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() != n {
		return usageError(fs, "%s", want), false
	}
	return 0, true
}

// interleave moves flags that follow positional arguments to the front, so
// `mailctl mailboxes show alice --json` works as people type it.
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil {
				if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
					continue
				}
				if i+1 < len(args) {
					flags = append(flags, args[i+1])
					i++
				}
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(append(flags, "--"), pos...)
}

// commaList collects a repeatable flag whose values may also be
// comma-separated lists ("a,b"); empty items are dropped.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }
func (l *commaList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// stringList collects a repeatable flag without splitting (paths may hold commas).
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// daemonSocket is the control socket every client finds the daemon at:
// named (its --socket), then $MAILCTL_SOCKET, then paths.socket of the
// config file (cfgFlag, then $MAILCTL_CONFIG, then the default), then
// protocol.DefaultSocket. A config named by cfgFlag or $MAILCTL_CONFIG
// that does not load is an error: dialing the default instead would reach
// another daemon, or say that none runs. The default config is read when
// it can be (root can; other users are usually left to the default
// socket). A config with a bad value still names its socket, as doctor
// reads it.
func daemonSocket(named, cfgFlag string) (string, error) {
	if s := cmp.Or(named, os.Getenv("MAILCTL_SOCKET")); s != "" {
		return s, nil
	}
	path := configPath(cfgFlag)
	cfg, err := config.LoadForChecks(path)
	if err == nil {
		return cmp.Or(cfg.Paths.Socket, protocol.DefaultSocket), nil
	}
	if cfgFlag != "" || os.Getenv("MAILCTL_CONFIG") != "" {
		return "", protocol.Errorf(protocol.CodeInvalidInput, "the control socket is the config's paths.socket, and the config did not load: %v (fix the config, or name the socket with --socket or $MAILCTL_SOCKET)", err)
	}
	return protocol.DefaultSocket, nil
}

// dial connects to the daemon the flags find (daemonSocket).
func (cf *clientFlags) dial(ctx context.Context) (*protocol.Client, error) {
	path, err := daemonSocket(cf.socket, cf.config)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket == 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidInput, "%s is not a socket: --socket, $MAILCTL_SOCKET and the config's paths.socket name the daemon's control socket (%s, or the one mailctl dev prints)", path, protocol.DefaultSocket)
	}
	return protocol.Dial(ctx, path)
}

// call dials, sends one request and closes. A send gets two minutes more:
// the daemon may wait that long for the first delivery attempt.
func (cf *clientFlags) call(verb string, args, out any) error {
	d := time.Duration(protocol.DefaultTimeoutMS) * time.Millisecond
	if verb == protocol.VerbSend || verb == protocol.VerbDraftSend {
		d += 2 * time.Minute
	}
	return cf.callTimeout(verb, args, out, d)
}

func (cf *clientFlags) callTimeout(verb string, args, out any, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, verb, args, out)
}

// request calls verb with args and decodes the answer into out. ok is false
// when the command is done, with code its exit code: the call failed, or
// --json asked for the answer as it is and it has been printed.
func (cf *clientFlags) request(verb string, args, out any) (code int, ok bool) {
	if err := cf.call(verb, args, out); err != nil {
		return cf.fail(err), false
	}
	if cf.json {
		return printJSON(out), false
	}
	return 0, true
}

// fail prints err for a person (or as JSON with --json) and returns the exit code.
func (cf *clientFlags) fail(err error) int {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		pe = &protocol.Error{Code: protocol.CodeInternal, Message: err.Error()}
	}
	if cf != nil && cf.json {
		b, _ := json.Marshal(map[string]any{"error": pe})
		os.Stdout.Write(append(jsonInert(b), '\n'))
	} else {
		// The message may quote a remote server or a file name.
		fmt.Fprintf(stderr, "mailctl: %s (%s)\n", inert(pe.Message), inert(pe.Code))
		if next := cf.notFoundNext(pe); next != "" {
			fmt.Fprintf(stderr, "mailctl: to see them: %s\n", inert(next))
		}
	}
	return exitCode(pe.Code)
}

// missingIDs reports the ids of a batch that the daemon did not find, having
// acted on the others, in the words of the daemon's not_found, with the
// next step; it returns the exit code of a not_found.
func (cf *clientFlags) missingIDs(ids []string, mailbox, folder string) int {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = strconv.Quote(inert(id))
	}
	saved := cf.place
	defer func() { cf.place = saved }()
	cf.place = func() (string, string) { return mailbox, folder }
	return cf.fail(&protocol.Error{Code: protocol.CodeNotFound, Missing: protocol.MissingMessage,
		Message: fmt.Sprintf("no message %s in %s/%s: list the folder to see its messages", strings.Join(q, ", "), mailbox, folder)})
}

// notFoundNext is the CLI's one next step for a not_found: the command that
// lists what the daemon did not find (Error.Missing), on the mailbox and
// folder the command named. The daemon's message says what was missing and
// where, in words for any client; this names the command.
func (cf *clientFlags) notFoundNext(pe *protocol.Error) string {
	if pe.Code != protocol.CodeNotFound {
		return ""
	}
	var mailbox, folder string
	if cf != nil && cf.place != nil {
		mailbox, folder = cf.place()
	}
	switch pe.Missing {
	case protocol.MissingMailbox:
		return "mailctl mailboxes list"
	case protocol.MissingHook:
		return "mailctl hooks list"
	case protocol.MissingQueueItem:
		return "mailctl queue list"
	case protocol.MissingDraft:
		return "mailctl drafts list " + cmp.Or(mailbox, "MAILBOX")
	case protocol.MissingMessage, protocol.MissingFolder:
		if folder == protocol.FolderDrafts {
			return "mailctl drafts list " + cmp.Or(mailbox, "MAILBOX")
		}
		cmd := "mailctl mail list"
		if mailbox != "" {
			cmd += " --mailbox " + mailbox
		}
		if folder != "" && folder != protocol.FolderInbox {
			cmd += " --folder " + folder
		}
		return cmd
	}
	return ""
}

// exitCode maps protocol codes to process exit codes so scripts can branch.
func exitCode(code string) int {
	switch code {
	case protocol.CodeInvalidInput:
		return 2
	case protocol.CodeNotFound:
		return 3
	case protocol.CodeForbidden, protocol.CodePolicyBlocked:
		return 4
	case protocol.CodeConflict:
		return 5
	case protocol.CodeUnavailable, protocol.CodeTimeout, protocol.CodeRateLimited:
		return 75 // EX_TEMPFAIL
	default:
		return 1
	}
}

// failure prints err as the failure of the command fs parses for and
// returns exit code 1. The error may quote a file name from a mailbox tree
// or an archive: it is kept on its line.
func failure(fs *flag.FlagSet, err error) int {
	fmt.Fprintf(stderr, "mailctl %s: %s\n", fs.Name(), inert(err.Error()))
	return 1
}

// table starts aligned columns on stdout under header; Flush ends them.
func table(header string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	return tw
}

func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(stderr, "mailctl %s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(stderr, "Run `mailctl %s --help` for usage.\n", fs.Name())
	return 2
}

// dispatch runs the subcommand of command name that args[0] names (subs maps
// names and aliases to what runs them), or prints help: exit 0 when it was
// asked for, 2 when no subcommand was given or args[0] is none.
func dispatch(name, help string, args []string, subs map[string]func([]string) int) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, help)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if run, ok := subs[args[0]]; ok {
		return run(args[1:])
	}
	fmt.Fprintf(stderr, "mailctl %s: unknown subcommand %q\n\n%s\n", name, args[0], help)
	return 2
}
