package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

type principal struct {
	name     string
	uid, gid uint32
}

// runAs performs one request from a separate process running as p.
func runAs(t *testing.T, bin, socket string, p principal, verb string, args any) clientOutcome {
	t.Helper()
	raw, _ := json.Marshal(args)
	cmd := exec.Command(bin)
	cmd.Env = []string{"MAILCTL_TEST_CLIENT=1", "MAILCTL_SOCKET=" + socket, "MAILCTL_TEST_VERB=" + verb, "MAILCTL_TEST_ARGS=" + string(raw)}
	if p.uid != 0 {
		testusers.As(cmd, p.uid, p.gid)
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client as %s: %v (%s)", p.name, err, out)
	}
	var o clientOutcome
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("client as %s printed %q", p.name, out)
	}
	return o
}

// TestAuthorizationMatrix drives every verb from real processes running as
// root, the mailbox owner, another user and a uid with no passwd entry. The
// others must get not_found or forbidden and learn nothing about the owner's
// mailboxes.
func TestAuthorizationMatrix(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcto")
	other := testusers.Create(t, "mctx")
	ghostUID := testusers.UnusedUID(t)
	td := startDaemon(t, fmt.Sprintf(`
[[mailboxes]]
name = "ops"
owner = %q

[[hooks]]
name = "opshook"
mailbox = "ops"
event = "on_receive"
cmd = ["/bin/true"]
`, owner.Name))
	bin := testusers.Executable(t)

	root := principal{"root", 0, 0}
	own := principal{"owner", owner.UID, owner.GID}
	oth := principal{"other", other.UID, other.GID}
	ghost := principal{"ghost", ghostUID, ghostUID}

	// The owner's private mailbox, with one message in it.
	if o := runAs(t, bin, td.socket, own, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "secretbox"}); o.Code != "" {
		t.Fatalf("owner create: %+v", o)
	}
	id, _, err := td.store.Deliver("secretbox", "inbox", &store.Message{MessageID: "m1@example.test", From: "a@example.net",
		Subject: "confidential", ReceivedAt: time.Now()}, "hello", []byte("Subject: confidential\r\n\r\nhello\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := runAs(t, bin, td.socket, own, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "secretbox", Event: "on_receive", Cmd: []string{"/bin/true"}, Name: "ownhook"}); o.Code != "" {
		t.Fatalf("owner hook create: %+v", o)
	}

	type row struct {
		verb string
		args any
		want map[string]string // principal -> expected code ("" = ok)
	}
	denied := map[string]string{"root": "", "owner": "", "other": "not_found", "ghost": "not_found"}
	rows := []row{
		{protocol.VerbVersion, nil, map[string]string{"root": "", "owner": "", "other": "", "ghost": ""}},
		{protocol.VerbMailboxShow, protocol.NameArgs{Name: "secretbox"}, denied},
		{protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "secretbox"}, denied},
		{protocol.VerbMessageRead, protocol.MessageReadArgs{Mailbox: "secretbox", ID: id}, denied},
		{protocol.VerbMessageMark, protocol.MessageMarkArgs{Mailbox: "secretbox", IDs: []string{id}, Read: true}, denied},
		{protocol.VerbHookList, protocol.HookListArgs{Mailbox: "secretbox"}, denied},
		{protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "secretbox", Event: "after_send", Cmd: []string{"/bin/true"}}, denied},
		{protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "secretbox"}, map[string]string{"root": "conflict", "owner": "conflict", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbHookDelete, protocol.NameArgs{Name: "ownhook"}, map[string]string{"other": "not_found", "ghost": "not_found"}},
		{protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "forother", Owner: owner.Name}, map[string]string{"other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "secretbox"}, map[string]string{"other": "conflict", "ghost": "forbidden"}},
		{protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "byroot", Owner: owner.Name}, map[string]string{"root": ""}},
		{protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "ops"}, map[string]string{"owner": "forbidden", "other": "not_found", "root": "forbidden"}},
		{protocol.VerbHookDelete, protocol.NameArgs{Name: "opshook"}, map[string]string{"owner": "forbidden", "other": "not_found", "root": "forbidden"}},
		{protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "secretbox", Event: "on_receive", Cmd: []string{"/bin/true"}, FireOnUntrusted: true}, map[string]string{"owner": "forbidden", "other": "not_found"}},
		{protocol.VerbWatch, protocol.WatchArgs{Mailboxes: []string{"secretbox"}}, map[string]string{"other": "not_found", "ghost": "not_found"}},
		{protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "secretbox", ID: id, To: "archive"}, map[string]string{"other": "not_found", "ghost": "not_found"}},
		{protocol.VerbHookRuns, protocol.HookRunsArgs{}, map[string]string{"other": "", "ghost": ""}},
		{protocol.VerbSend, protocol.SendArgs{FromMailbox: "secretbox", To: []string{"x@remote.test"}, Subject: "s", Body: "b", DryRun: true}, denied},
		{protocol.VerbSendStatus, protocol.SendStatusArgs{Mailbox: "secretbox", ID: "2026-01-01-000000-x"}, map[string]string{"other": "not_found", "ghost": "not_found"}},
		{protocol.VerbQueueList, nil, map[string]string{"root": "", "other": ""}},
		{protocol.VerbQueueApprove, protocol.QueueIDArgs{ID: "secretbox.x"}, map[string]string{"owner": "forbidden", "other": "forbidden"}},
	}
	for _, r := range rows {
		for _, p := range []principal{root, own, oth, ghost} {
			want, ok := r.want[p.name]
			if !ok {
				continue
			}
			t.Run(r.verb+"/"+p.name, func(t *testing.T) {
				o := runAs(t, bin, td.socket, p, r.verb, r.args)
				if o.Code != want {
					t.Fatalf("%s as %s: code %q (%s), want %q", r.verb, p.name, o.Code, o.Msg, orOK(want))
				}
				if p.name == "other" || p.name == "ghost" {
					leak := strings.ToLower(o.Msg + string(o.Data))
					for _, secret := range []string{owner.Name, "confidential", "m1@example.test"} {
						if strings.Contains(leak, strings.ToLower(secret)) {
							t.Errorf("%s as %s leaked %q: %s %s", r.verb, p.name, secret, o.Msg, o.Data)
						}
					}
				}
			})
		}
	}

	// Lists: the others see none of the owner's mailboxes or hooks.
	for _, p := range []principal{oth, ghost} {
		for _, verb := range []string{protocol.VerbMailboxList, protocol.VerbHookList} {
			o := runAs(t, bin, td.socket, p, verb, nil)
			if o.Code != "" {
				t.Fatalf("%s as %s: %+v", verb, p.name, o)
			}
			for _, name := range []string{"secretbox", "ops", "ownhook", "opshook"} {
				if strings.Contains(string(o.Data), name) {
					t.Errorf("%s as %s reveals %q: %s", verb, p.name, name, o.Data)
				}
			}
		}
	}
	var ownList protocol.MailboxList
	o := runAs(t, bin, td.socket, own, protocol.VerbMailboxList, nil)
	json.Unmarshal(o.Data, &ownList)
	if names := mailboxNames(ownList); names != "byroot,ops,secretbox" {
		t.Errorf("owner sees %q, want byroot,ops,secretbox", names)
	}
	// Another user may create a mailbox of its own; a uid without a passwd entry may not.
	if o := runAs(t, bin, td.socket, oth, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "otherbox"}); o.Code != "" {
		t.Errorf("other creating its own mailbox: %+v", o)
	}
	// The owner's mail is untouched by the failed attempts.
	m, _, err := td.store.Get("secretbox", "inbox", id)
	if err != nil || m.Subject != "confidential" {
		t.Fatalf("owner's message changed: %v %+v", err, m)
	}
	// Finally the owner may delete its own mailbox with force.
	if o := runAs(t, bin, td.socket, own, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "secretbox", Force: true}); o.Code != "" {
		t.Errorf("owner force delete: %+v", o)
	}
	if _, err := os.Stat(filepath.Join(td.store.Root(), "secretbox")); !os.IsNotExist(err) {
		t.Errorf("mailbox folder still there after delete: %v", err)
	}
}

func orOK(code string) string {
	if code == "" {
		return "ok"
	}
	return code
}

func mailboxNames(l protocol.MailboxList) string {
	var names []string
	for _, m := range l.Mailboxes {
		names = append(names, m.Name)
	}
	return strings.Join(names, ",")
}
