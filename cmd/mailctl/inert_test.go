package main

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/protocol"
)

// hostile is text from outside as a hostile MX, sender or hook may write
// it: an OSC 0 title and an OSC 52 clipboard write ended by BEL, a CSI that
// clears the screen, the 8-bit CSI U+009B, a bidi override, a lone BEL,
// DEL, other C1 and C0 controls, a line separator, a zero-width space and a
// line break that would forge a line of output.
const hostile = "451-4.7.1 \x1b]0;TITLE\x07\x1b[2J\u009b33m\u202eevil\x1b]52;c;cHduZWQ=\x07 bell\x07 del\x7f nel\u0085 ls\u2028 zw\u200b\r\nFORGED: line"

// safeOutput says why out could act on a terminal, or "" when it cannot.
func safeOutput(out string) string {
	if !utf8.ValidString(out) {
		return "invalid UTF-8"
	}
	for _, r := range out {
		if r != '\n' && r != '\t' && unsafeRune(r) && r != '\uFFFD' {
			return "the character " + strings.TrimPrefix(jsonQuote(string(r)), "\"")
		}
	}
	return ""
}

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(jsonInert(b)) }

// encoding/json escapes C0 controls and U+2028/9 but writes DEL, the C1
// controls (U+009B is CSI to a terminal) and bidi overrides as they are:
// what a terminal showing --json would act on. jsonInert escapes them, and
// the JSON still decodes to the very text.
func TestJSONEscapesWhatATerminalActsOn(t *testing.T) {
	raw, err := json.Marshal(hostile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.ContainsRune(string(raw), '\u009b') || !strings.ContainsRune(string(raw), '\u202e') {
		t.Fatalf("encoding/json escapes C1 and bidi itself now (%q): jsonInert may be simpler", raw)
	}
	out := jsonInert(raw)
	if why := safeOutput(string(out)); why != "" {
		t.Fatalf("jsonInert left %s: %q", why, out)
	}
	var back string
	if err := json.Unmarshal(out, &back); err != nil || back != hostile {
		t.Fatalf("jsonInert's output decodes to %q (%v), want the input", back, err)
	}
}

func FuzzJSONInert(f *testing.F) {
	for _, s := range []string{hostile, "plain", "\U0001F600\u200d\u2764", "\xff\xfe", "\u009b\u009d\u0090", `"\u202e"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(map[string]any{"k": s, "l": []string{s, s}})
		if err != nil {
			t.Skip()
		}
		out := jsonInert(raw)
		if why := safeOutput(string(out)); why != "" {
			t.Fatalf("%q: jsonInert left %s", s, why)
		}
		var a, b any
		if json.Unmarshal(raw, &a) != nil || json.Unmarshal(out, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%q: jsonInert changed what the JSON says", s)
		}
	})
}

// fill sets every string of v (recursively: structs, slices, maps, pointers)
// to hostile, every slice to one element, and the rest to a plain value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(hostile)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64:
		if v.CanInt() {
			v.SetInt(1)
		} else {
			v.SetUint(1)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte, json.RawMessage
			v.SetBytes([]byte(`"` + strings.ReplaceAll(jsonQuote(hostile), `"`, "") + `"`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// hostileReplies is, for every verb, its answer with every string hostile.
func hostileReplies(t *testing.T) map[string]any {
	t.Helper()
	types := map[string]any{
		protocol.VerbVersion: protocol.VersionInfo{}, protocol.VerbStatus: protocol.Status{},
		protocol.VerbMailboxList: protocol.MailboxList{}, protocol.VerbMailboxShow: protocol.Mailbox{},
		protocol.VerbMailboxCreate: protocol.MailboxCreated{}, protocol.VerbMailboxUpdate: protocol.Mailbox{},
		protocol.VerbMailboxDelete: protocol.Deleted{}, protocol.VerbMessageList: protocol.MessageList{},
		protocol.VerbMessageRead: protocol.Message{}, protocol.VerbMessageMark: protocol.MessageMarked{},
		protocol.VerbMessageMove: struct {
			ID     string `json:"id"`
			Folder string `json:"folder"`
		}{}, protocol.VerbMessageLabel: protocol.MessageLabeled{}, protocol.VerbMessagePurge: protocol.MessagePurged{},
		protocol.VerbSend: protocol.SendResult{}, protocol.VerbSendStatus: protocol.SendResult{},
		protocol.VerbHookCreate: protocol.Hook{}, protocol.VerbHookList: protocol.HookList{},
		protocol.VerbHookDelete: protocol.Deleted{}, protocol.VerbHookRuns: protocol.HookRuns{},
		protocol.VerbQueueList: protocol.QueueList{}, protocol.VerbQueueShow: protocol.QueueItem{},
		protocol.VerbQueueRetry: protocol.QueueItem{}, protocol.VerbQueueDrop: protocol.QueueItem{},
		protocol.VerbQueueApprove: protocol.QueueItem{}, protocol.VerbQueueReschedule: protocol.QueueItem{},
		protocol.VerbDraftCreate: protocol.Draft{}, protocol.VerbDraftUpdate: protocol.Draft{},
		protocol.VerbDraftSend: protocol.SendResult{}, protocol.VerbDraftDelete: protocol.DraftDeleted{},
		protocol.VerbWatch: struct {
			Watching bool `json:"watching"`
		}{},
		protocol.VerbMailboxPrune: protocol.PruneResult{}, protocol.VerbIndexRebuild: protocol.IndexRebuild{},
		protocol.VerbBackupSnapshot: protocol.BackupSnapshot{},
		protocol.VerbQueueFlush:     protocol.QueueBulkResult{}, protocol.VerbQueueDropMatching: protocol.QueueBulkResult{},
		protocol.VerbQueueSummary: protocol.QueueSummary{},
	}
	out := map[string]any{}
	for _, verb := range control.Verbs() {
		zero, ok := types[verb]
		if !ok {
			t.Errorf("verb %s has no hostile answer here: add its reply type to hostileReplies", verb)
			continue
		}
		v := reflect.New(reflect.TypeOf(zero)).Elem()
		fill(v)
		out[verb] = v.Interface()
	}
	return out
}

// startHostileDaemon serves the control protocol on a socket of its own:
// the greeting names a hostile server, and every request is answered with
// its verb's reply full of hostile text (a watch with one new-mail event),
// or, with failing, with an error whose message is hostile.
func startHostileDaemon(t *testing.T, failing bool) string {
	t.Helper()
	replies := hostileReplies(t)
	sock := filepath.Join(t.TempDir(), "hostile.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				enc := json.NewEncoder(c)
				enc.Encode(protocol.Greeting{Protocol: protocol.Name, Version: protocol.Version, Server: hostile})
				sc := bufio.NewScanner(c)
				sc.Buffer(make([]byte, 1<<20), protocol.MaxFrame)
				for sc.Scan() {
					var req protocol.Request
					if json.Unmarshal(sc.Bytes(), &req) != nil {
						return
					}
					if failing {
						enc.Encode(protocol.Response{ID: req.ID, Error: &protocol.Error{Code: protocol.CodeConflict, Message: hostile}})
						continue
					}
					data, _ := json.Marshal(replies[req.Verb])
					enc.Encode(protocol.Response{ID: req.ID, Data: data})
					if req.Verb == protocol.VerbWatch {
						var a protocol.WatchArgs
						json.Unmarshal(req.Args, &a)
						var sum protocol.MessageSummary
						fill(reflect.ValueOf(&sum).Elem())
						enc.Encode(protocol.Response{ID: req.ID, Event: &protocol.Event{Type: protocol.EventNewMail, Mailbox: a.Mailboxes[0],
							Folder: protocol.FolderInbox, ID: hostile, Message: &sum, At: time.Now()}})
					}
				}
			}()
		}
	}()
	return sock
}

// clientRuns are the commands that print what the daemon says, each with
// arguments that reach the daemon; every subcommand of theirs has one.
var clientRuns = [][]string{
	{"version"},
	{"doctor"},
	{"mailboxes", "create", "m"}, {"mailboxes", "list"}, {"mailboxes", "show", "m"},
	{"mailboxes", "set", "m", "--display-name", "M"}, {"mailboxes", "delete", "m"}, {"mailboxes", "prune", "m", "--dry-run"},
	// Asks no daemon: the names it prints are a folder's, checked by
	// TestMailboxesGiveGivesTheFolder.
	{"mailboxes", "give", "--to", "0", "/nonexistent/mailbox"},
	{"mail", "list", "--mailbox", "m"}, {"mail", "read", "x", "--mailbox", "m"}, {"mail", "read", "x", "--mailbox", "m", "--raw"},
	{"mail", "wait", "--mailbox", "m", "--timeout", "20s"}, {"mail", "mark", "x", "--read", "--mailbox", "m"},
	{"mail", "move", "x", "--to", "archive", "--mailbox", "m"}, {"mail", "label", "x", "--add", "l", "--mailbox", "m"},
	{"mail", "purge", "x", "--mailbox", "m"},
	{"send", "--from", "m", "--to", "a@example.org", "--subject", "s", "--body", "b"},
	{"queue", "list"}, {"queue", "show", "x"}, {"queue", "retry", "x"}, {"queue", "drop", "x"}, {"queue", "approve", "x"},
	{"queue", "reschedule", "x", "2h"}, {"queue", "summary"}, {"queue", "flush", "--domain", "example.org"},
	{"queue", "drop", "--domain", "example.org"},
	{"hooks", "create", "--mailbox", "m", "--event", "on_receive", "--cmd", `["/bin/true"]`}, {"hooks", "list"},
	{"hooks", "delete", "h"}, {"hooks", "runs"},
	{"drafts", "list", "m"}, {"drafts", "show", "m", "x"}, {"drafts", "create", "m", "--to", "a@example.org", "--subject", "s"},
	{"drafts", "update", "m", "x", "--subject", "s"}, {"drafts", "edit", "m", "x"}, {"drafts", "send", "m", "x"},
	{"drafts", "delete", "m", "x"},
}

// notClients are the commands that print nothing a daemon or a stranger
// wrote, and why.
var notClients = map[string]string{
	"serve":   "runs the daemon: it logs through slog, which quotes every value",
	"dev":     "runs the daemon (its banner is its own words)",
	"reload":  "signals a process; what it prints of the daemon's report is checked by TestReportsKeepOutsideTextOnItsLine",
	"setup":   "writes this host's config and keys, printing its own words",
	"dkim":    "prints the host's own keys and the records made from them",
	"agents":  "edits the user's own harness configs",
	"reindex": "prints two counts the daemon answers, no text",
	"backup":  "writes an archive of this host's own files and prints counts the daemon answers",
	"restore": "reads an archive, whose names it checks, and prints them through inert",
	"mcp":     "its stdout is the MCP protocol for a program (JSON from the SDK), not a terminal; what it returns is fenced by mcpshim",
}

// TestEveryCommandPrintsOutsideTextInert runs every command that talks to
// the daemon against one whose every answer, error and event is full of
// terminal escapes (OSC title and clipboard writes, CSI, C1, bidi, BEL),
// in human output and with --json: nothing a terminal would act on reaches
// stdout or stderr, and --json decodes to the text exactly. A command or
// subcommand without a run here fails the test.
func TestEveryCommandPrintsOutsideTextInert(t *testing.T) {
	ref, err := collectHelp()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, r := range clientRuns {
		runs[strings.Join(r[:min(2, len(r))], " ")] = true
		runs[r[0]] = true
	}
	for _, c := range ref.cmds {
		if _, ok := notClients[c.name]; ok {
			continue
		}
		if !runs[c.name] {
			t.Errorf("command %s has no run in clientRuns (or a reason in notClients)", c.name)
		}
		for _, s := range c.subs {
			if !runs[c.name+" "+s.name] {
				t.Errorf("mailctl %s %s has no run in clientRuns", c.name, s.name)
			}
		}
	}

	for _, failing := range []bool{false, true} {
		sock := startHostileDaemon(t, failing)
		env := []string{"MAILCTL_SOCKET=" + sock, "EDITOR=/bin/true", "VISUAL="}
		for _, args := range clientRuns {
			for _, asJSON := range []bool{false, true} {
				a := append([]string(nil), args...)
				if asJSON {
					a = append(a, "--json")
				}
				out, errOut, _ := mailctl(t, env, a...)
				name := strings.Join(a, " ")
				if failing {
					name += " (every answer an error)"
				}
				for what, text := range map[string]string{"stdout": out, "stderr": errOut} {
					if why := safeOutput(text); why != "" {
						t.Errorf("mailctl %s: %s carries %s:\n%q", name, what, why, text)
					}
				}
				if n, most := forgedLines(out+errOut), bodyLines(args, failing || asJSON); n > most {
					t.Errorf("mailctl %s: a line break in the daemon's text forged %d line(s), want at most %d (a body's own):\n%s", name, n, most, out+errOut)
				}
				if strings.Contains(out+errOut, "flag provided but not defined") {
					continue // no --json: the human run covers it
				}
				if !asJSON || strings.TrimSpace(out) == "" {
					continue // an error before any request (usage), on stderr
				}
				var v any
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Errorf("mailctl %s: stdout is not JSON: %v\n%q", name, err, out)
				} else if !holds(v, hostile) {
					t.Errorf("mailctl %s: the JSON does not carry the text exactly:\n%s", name, out)
				}
			}
		}
	}
}

// forgedLines counts the lines of out that the hostile text began: a line
// break in a field printed without inert lets its sender print a line of
// its own (a forged "ok", or a finding that is not there).
func forgedLines(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FORGED") {
			n++
		}
	}
	return n
}

// bodyLines is how many lines the hostile text may begin in the output of
// the command args: one for a command that prints a body, which keeps its
// line breaks, and none for the rest.
func bodyLines(args []string, noBody bool) int {
	if noBody || slices.Contains(args, "--raw") {
		return 0
	}
	if len(args) >= 2 && (slices.Equal(args[:2], []string{"mail", "read"}) || slices.Equal(args[:2], []string{"drafts", "show"})) {
		return 1
	}
	return 0
}

// holds reports whether one of the strings in the decoded JSON v holds s
// (an error's message may quote it).
func holds(v any, s string) bool {
	switch x := v.(type) {
	case string:
		return strings.Contains(x, s)
	case []any:
		for _, e := range x {
			if holds(e, s) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if holds(e, s) {
				return true
			}
		}
	}
	return false
}

// The case: a remote MX's reply to RCPT, printed by send, drafts
// send and queue show, arrives inert and still readable.
func TestRemoteReplyPrintsInert(t *testing.T) {
	sock := startHostileDaemon(t, false)
	env := []string{"MAILCTL_SOCKET=" + sock}
	for _, args := range [][]string{
		{"send", "--from", "m", "--to", "a@example.org", "--subject", "s", "--body", "b"},
		{"drafts", "send", "m", "x"},
		{"queue", "show", "x"},
	} {
		out, errOut, _ := mailctl(t, env, args...)
		if why := safeOutput(out + errOut); why != "" || !strings.Contains(out, "451-4.7.1") || !strings.Contains(out, "evil") {
			t.Errorf("mailctl %s printed %s:\n%q", strings.Join(args, " "), why, out)
		}
		if strings.Contains(out, "\nFORGED") {
			t.Errorf("mailctl %s: the reply's line break forged a line:\n%s", strings.Join(args, " "), out)
		}
	}
}

// mail move makes one request per id: one that fails (here every one, as
// the daemon answers conflict) is reported by id, and the others are still
// tried; the exit code is the failure's.
func TestMailMoveGoesPastAFailure(t *testing.T) {
	sock := startHostileDaemon(t, true)
	_, errOut, code := mailctl(t, []string{"MAILCTL_SOCKET=" + sock}, "mail", "move", "first", "second", "--to", "archive", "--mailbox", "m")
	if code != exitCode(protocol.CodeConflict) || !strings.Contains(errOut, "first not changed") || !strings.Contains(errOut, "second not changed") {
		t.Fatalf("exit %d, stderr:\n%s\nwant both ids reported and exit %d", code, errOut, exitCode(protocol.CodeConflict))
	}
}
