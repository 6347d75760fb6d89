package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/daemon/outbound"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

type principal struct {
	name     string
	uid, gid uint32
}

// clientProc is a copy of the test binary running as one principal; it makes
// each request on a fresh connection, so the kernel reports its uid.
type clientProc struct {
	p   principal
	in  io.WriteCloser
	out *bufio.Scanner
}

// startClient starts a client process running as p. One process per
// principal serves every request of a test, which keeps a matrix of many
// verbs fast under the race detector.
func startClient(t *testing.T, bin, socket string, p principal) *clientProc {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"MAILCTL_TEST_CLIENT=1", "MAILCTL_SOCKET=" + socket}
	if p.uid != 0 {
		testusers.As(cmd, p.uid, p.gid)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("client as %s: %v: %s", p.name, err, stderr.String())
		}
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	return &clientProc{p: p, in: in, out: sc}
}

// do performs one request as the client's principal.
func (cp *clientProc) do(t *testing.T, verb string, args any) clientOutcome {
	t.Helper()
	raw, _ := json.Marshal(args)
	line, _ := json.Marshal(clientRequest{Verb: verb, Args: raw})
	if _, err := cp.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("client as %s: %v", cp.p.name, err)
	}
	if !cp.out.Scan() {
		t.Fatalf("client as %s ended: %v", cp.p.name, cp.out.Err())
	}
	var o clientOutcome
	if err := json.Unmarshal(cp.out.Bytes(), &o); err != nil {
		t.Fatalf("client as %s printed %q", cp.p.name, cp.out.Bytes())
	}
	return o
}

// must performs one request that must succeed and returns its data.
func (cp *clientProc) must(t *testing.T, verb string, args any) json.RawMessage {
	t.Helper()
	o := cp.do(t, verb, args)
	if o.Code != "" {
		t.Fatalf("%s as %s: %s %s", verb, cp.p.name, o.Code, o.Msg)
	}
	return o.Data
}

// twoUsers starts a daemon that holds every send (nothing leaves) and two
// new users named prefix1 and prefix2, each with a client.
func twoUsers(t *testing.T, prefix string) (td *testDaemon, c1, c2 *clientProc) {
	t.Helper()
	return twoUsersWith(t, prefix, "")
}

// twoUsersWith is twoUsers with more keys for its config's [send] table.
func twoUsersWith(t *testing.T, prefix, send string) (td *testDaemon, c1, c2 *clientProc) {
	t.Helper()
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, prefix+"1")
	u2 := testusers.Create(t, prefix+"2")
	td = startDaemonWith(t, "[send]\nhold = true\n"+send, Options{Resolver: &resolver.Map{}})
	bin := testusers.Executable(t)
	c1 = startClient(t, bin, td.socket, principal{"u1", u1.UID, u1.GID})
	c2 = startClient(t, bin, td.socket, principal{"u2", u2.UID, u2.GID})
	return td, c1, c2
}

// matrixRow is one request and the code each principal must get ("" = ok);
// principals left out do not make it.
type matrixRow struct {
	verb string
	acc  control.Access // the access the verb table must declare for verb
	args any
	want map[string]string
}

// TestAuthorizationMatrix drives every registered verb from real processes
// running as root, the mailbox owner, another user and a uid with no passwd
// entry. The others must get not_found or forbidden and learn nothing about
// the owner's mailboxes. A verb without a row, or whose declared access
// differs from its row, fails the test.
func TestAuthorizationMatrix(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcto")
	other := testusers.Create(t, "mctx")
	ghostUID := testusers.UnusedUID(t)
	td := startDaemonWith(t, fmt.Sprintf(`
[send]
hold = true

[[mailboxes]]
name = "ops"
owner = %q

[[hooks]]
name = "opshook"
mailbox = "ops"
event = "on_receive"
cmd = ["/bin/true"]
`, owner.Name), Options{Resolver: &resolver.Map{}})
	bin := testusers.Executable(t)

	principals := []principal{{"root", 0, 0}, {"owner", owner.UID, owner.GID}, {"other", other.UID, other.GID}, {"ghost", ghostUID, ghostUID}}
	clients := map[string]*clientProc{}
	for _, p := range principals {
		clients[p.name] = startClient(t, bin, td.socket, p)
	}
	own := clients["owner"]

	// The owner's private mailbox, with one message in it, a hook and a held queue item.
	if o := own.do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "secretbox"}); o.Code != "" {
		t.Fatalf("owner create: %+v", o)
	}
	id, _, err := td.store.Deliver("secretbox", "inbox", &store.Message{MessageID: "m1@example.test", From: "a@example.net",
		Subject: "confidential", ReceivedAt: time.Now()}, "hello", []byte("Subject: confidential\r\n\r\nhello\r\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := own.do(t, protocol.VerbHookCreate, protocol.HookCreateArgs{Mailbox: "secretbox", Event: "on_receive", Cmd: []string{"/bin/true"}, Name: "ownhook"}); o.Code != "" {
		t.Fatalf("owner hook create: %+v", o)
	}
	o := own.do(t, protocol.VerbSend, protocol.SendArgs{FromMailbox: "secretbox", To: []string{"x@remote.test"}, Subject: "confidential", Body: "b"})
	var sent protocol.SendResult
	if json.Unmarshal(o.Data, &sent); o.Code != "" || sent.Status != "held" {
		t.Fatalf("owner send (held): %+v", o)
	}
	queueID := outbound.QueueID("secretbox", sent.ID)

	// Bulk queue verbs reach only the caller's items: another user dropping
	// or flushing everything matches nothing, and the owner's item stays.
	for _, name := range []string{"other", "ghost"} {
		for _, verb := range []string{protocol.VerbQueueDropMatching, protocol.VerbQueueFlush} {
			var res protocol.QueueBulkResult
			if o := clients[name].do(t, verb, protocol.QueueFilter{All: true}); o.Code != "" || json.Unmarshal(o.Data, &res) != nil || res.Matched != 0 || res.Changed != 0 {
				t.Fatalf("%s as %s: %+v %+v, want nothing matched", verb, name, o, res)
			}
		}
	}
	var bulk protocol.QueueBulkResult
	if o := own.do(t, protocol.VerbQueueFlush, protocol.QueueFilter{Mailbox: "secretbox"}); o.Code != "" || json.Unmarshal(o.Data, &bulk) != nil || bulk.Matched != 1 || bulk.Held != 1 || bulk.Changed != 0 {
		t.Fatalf("owner flushing its held item: %+v %+v, want it matched, counted held and left held", o, bulk)
	}

	rows := matrixRows(matrixFixture{owner: owner.Name, messageID: id, sentID: sent.ID, queueID: queueID})
	checkMatrixCoversVerbs(t, rows)
	for _, r := range rows {
		for _, p := range principals {
			want, ok := r.want[p.name]
			if !ok {
				continue
			}
			t.Run(r.verb+"/"+p.name, func(t *testing.T) {
				o := clients[p.name].do(t, r.verb, r.args)
				if o.Code != want {
					t.Fatalf("%s as %s: code %q (%s), want %q", r.verb, p.name, o.Code, o.Msg, orOK(want))
				}
				if p.name == "other" || p.name == "ghost" {
					leak := strings.ToLower(o.Msg + string(o.Data))
					for _, secret := range []string{owner.Name, "confidential", "m1@example.test", "secretbox", "ownhook", sent.ID} {
						if strings.Contains(leak, strings.ToLower(secret)) && !strings.Contains(strings.ToLower(fmt.Sprint(r.args)), strings.ToLower(secret)) {
							t.Errorf("%s as %s leaked %q: %s %s", r.verb, p.name, secret, o.Msg, o.Data)
						}
					}
				}
			})
		}
	}

	// Lists: the others see none of the owner's mailboxes or hooks.
	for _, name := range []string{"other", "ghost"} {
		for _, verb := range []string{protocol.VerbMailboxList, protocol.VerbHookList, protocol.VerbQueueList, protocol.VerbHookRuns} {
			o := clients[name].do(t, verb, nil)
			if o.Code != "" {
				t.Fatalf("%s as %s: %+v", verb, name, o)
			}
			for _, secret := range []string{"secretbox", "ops", "ownhook", "opshook", "byroot"} {
				if strings.Contains(string(o.Data), `"`+secret) {
					t.Errorf("%s as %s reveals %q: %s", verb, name, secret, o.Data)
				}
			}
		}
	}
	var ownList protocol.MailboxList
	o = own.do(t, protocol.VerbMailboxList, nil)
	json.Unmarshal(o.Data, &ownList)
	if names := mailboxNames(ownList); names != "byroot,ops,secretbox" {
		t.Errorf("owner sees %q, want byroot,ops,secretbox", names)
	}
	// Another user may create a mailbox of its own; a uid without a passwd entry may not.
	if o := clients["other"].do(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "otherbox"}); o.Code != "" {
		t.Errorf("other creating its own mailbox: %+v", o)
	}
	// The owner's mail is untouched by the failed attempts.
	m, _, err := td.store.Get("secretbox", "inbox", id)
	if err != nil || m.Subject != "confidential" {
		t.Fatalf("owner's message changed: %v %+v", err, m)
	}
	// Finally the owner may delete its own mailbox with force.
	if o := own.do(t, protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "secretbox", Force: true}); o.Code != "" {
		t.Errorf("owner force delete: %+v", o)
	}
	if _, err := os.Stat(filepath.Join(td.store.Root(), "secretbox")); !os.IsNotExist(err) {
		t.Errorf("mailbox folder still there after delete: %v", err)
	}
}

// matrixFixture is what the matrix rows name: the owner's user name, and its
// message, sent message and held queue item.
type matrixFixture struct {
	owner, messageID, sentID, queueID string
}

// matrixRows is the authorization matrix: one or more rows for every
// registered verb. TestAuthorizationMatrix runs it as real uids;
// TestAuthorizationMatrixCoversEveryVerb checks, as any user, that it has a
// row for each verb.
func matrixRows(fx matrixFixture) []matrixRow {
	all := func(code string) map[string]string {
		return map[string]string{"root": code, "owner": code, "other": code, "ghost": code}
	}
	denied := map[string]string{"root": "", "owner": "", "other": "not_found", "ghost": "not_found"}
	return []matrixRow{
		{protocol.VerbVersion, control.AccessAny, nil, all("")},
		{protocol.VerbStatus, control.AccessAny, nil, all("")},
		{protocol.VerbMailboxList, control.AccessAny, nil, all("")},
		{protocol.VerbMailboxShow, control.AccessRead, protocol.NameArgs{Name: "secretbox"}, denied},
		{protocol.VerbMessageList, control.AccessRead, protocol.MessageListArgs{Mailbox: "secretbox"}, denied},
		{protocol.VerbMessageRead, control.AccessRead, protocol.MessageReadArgs{Mailbox: "secretbox", ID: fx.messageID}, denied},
		{protocol.VerbMessageMark, control.AccessWrite, protocol.MessageMarkArgs{Mailbox: "secretbox", IDs: []string{fx.messageID}, Read: true}, denied},
		{protocol.VerbMessageLabel, control.AccessWrite, protocol.MessageLabelArgs{Mailbox: "secretbox", IDs: []string{fx.messageID}, Add: []string{"x"}, Star: ptrTo(true)}, denied},
		// The message is in the inbox: purging it from trash finds nothing.
		{protocol.VerbMessagePurge, control.AccessWrite, protocol.MessagePurgeArgs{Mailbox: "secretbox", IDs: []string{fx.messageID}}, map[string]string{"root": "not_found", "owner": "not_found", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbMessagePurge, control.AccessWrite, protocol.MessagePurgeArgs{Mailbox: "secretbox", Before: ptrTo(time.Now().Add(time.Hour))}, denied},
		{protocol.VerbHookList, control.AccessRead, protocol.HookListArgs{Mailbox: "secretbox"}, denied},
		{protocol.VerbHookList, control.AccessRead, nil, all("")},
		{protocol.VerbHookCreate, control.AccessWrite, protocol.HookCreateArgs{Mailbox: "secretbox", Event: "after_send", Cmd: []string{"/bin/true"}}, denied},
		{protocol.VerbMailboxDelete, control.AccessManage, protocol.MailboxDeleteArgs{Name: "secretbox"}, map[string]string{"root": "conflict", "owner": "conflict", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbHookDelete, control.AccessWrite, protocol.NameArgs{Name: "ownhook"}, map[string]string{"other": "not_found", "ghost": "not_found"}},
		{protocol.VerbMailboxCreate, control.AccessAny, protocol.MailboxCreateArgs{Name: "forother", Owner: fx.owner}, map[string]string{"other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbMailboxCreate, control.AccessAny, protocol.MailboxCreateArgs{Name: "secretbox"}, map[string]string{"other": "conflict", "ghost": "forbidden"}},
		{protocol.VerbMailboxCreate, control.AccessAny, protocol.MailboxCreateArgs{Name: "byroot", Owner: fx.owner}, map[string]string{"root": ""}},
		{protocol.VerbMailboxPrune, control.AccessRoot, protocol.MailboxPruneArgs{Mailbox: "secretbox", DryRun: true}, map[string]string{"root": "", "owner": "forbidden", "other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbMailboxDelete, control.AccessManage, protocol.MailboxDeleteArgs{Name: "ops"}, map[string]string{"owner": "forbidden", "other": "not_found", "root": "forbidden"}},
		// Owners may set their display name by default, their trusted
		// senders only where the operator allows it; config-declared
		// mailboxes change only in the config.
		{protocol.VerbMailboxUpdate, control.AccessManage, protocol.MailboxUpdateArgs{Name: "secretbox", DisplayName: ptrTo("Secret Box")}, denied},
		{protocol.VerbMailboxUpdate, control.AccessManage, protocol.MailboxUpdateArgs{Name: "secretbox", TrustedSenders: &[]string{"*@x.test"}}, map[string]string{"owner": "forbidden", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbMailboxUpdate, control.AccessManage, protocol.MailboxUpdateArgs{Name: "ops", DisplayName: ptrTo("Ops")}, map[string]string{"owner": "forbidden", "other": "not_found", "root": "forbidden"}},
		// Only root sets a quota, even on the owner's own mailbox.
		{protocol.VerbMailboxUpdate, control.AccessManage, protocol.MailboxUpdateArgs{Name: "secretbox", QuotaBytes: ptrTo(int64(1 << 30))}, map[string]string{"root": "", "owner": "forbidden", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbMailboxUpdate, control.AccessManage, protocol.MailboxUpdateArgs{Name: "secretbox", InheritQuota: true}, map[string]string{"owner": "forbidden", "other": "not_found"}},
		{protocol.VerbHookDelete, control.AccessWrite, protocol.NameArgs{Name: "opshook"}, map[string]string{"owner": "forbidden", "other": "not_found", "root": "forbidden"}},
		{protocol.VerbHookCreate, control.AccessWrite, protocol.HookCreateArgs{Mailbox: "secretbox", Event: "on_receive", Cmd: []string{"/bin/true"}, FireOnUntrusted: true}, map[string]string{"owner": "forbidden", "other": "not_found"}},
		{protocol.VerbWatch, control.AccessRead, protocol.WatchArgs{Mailboxes: []string{"secretbox"}}, denied},
		{protocol.VerbMessageMove, control.AccessWrite, protocol.MessageMoveArgs{Mailbox: "secretbox", ID: fx.messageID, To: "archive"}, map[string]string{"other": "not_found", "ghost": "not_found"}},
		{protocol.VerbHookRuns, control.AccessAny, protocol.HookRunsArgs{}, all("")},
		{protocol.VerbSend, control.AccessWrite, protocol.SendArgs{FromMailbox: "secretbox", To: []string{"x@remote.test"}, Subject: "s", Body: "b", DryRun: true}, denied},
		{protocol.VerbSendStatus, control.AccessRead, protocol.SendStatusArgs{Mailbox: "secretbox", ID: fx.sentID}, denied},
		{protocol.VerbQueueList, control.AccessAny, nil, all("")},
		{protocol.VerbQueueShow, control.AccessRead, protocol.QueueIDArgs{ID: fx.queueID}, denied},
		{protocol.VerbQueueRetry, control.AccessWrite, protocol.QueueIDArgs{ID: fx.queueID}, map[string]string{"root": "conflict", "owner": "conflict", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbQueueApprove, control.AccessRoot, protocol.QueueIDArgs{ID: fx.queueID}, map[string]string{"owner": "forbidden", "other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbQueueApprove, control.AccessRoot, protocol.QueueIDArgs{ID: "secretbox.nosuchitem"}, map[string]string{"root": "not_found", "owner": "forbidden", "other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbIndexRebuild, control.AccessRoot, protocol.Empty{}, map[string]string{"root": "", "owner": "forbidden", "other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbBackupSnapshot, control.AccessRoot, protocol.Empty{}, map[string]string{"root": "", "owner": "forbidden", "other": "forbidden", "ghost": "forbidden"}},
		{protocol.VerbQueueReschedule, control.AccessWrite, protocol.QueueRescheduleArgs{ID: fx.queueID, SendAt: time.Now().Add(time.Hour)}, denied},
		{protocol.VerbDraftCreate, control.AccessWrite, protocol.DraftArgs{Mailbox: "secretbox", Subject: "draft"}, denied},
		{protocol.VerbDraftUpdate, control.AccessWrite, protocol.DraftUpdateArgs{Mailbox: "secretbox", ID: "nosuchdraft", Subject: ptrTo("x")}, map[string]string{"root": "not_found", "owner": "not_found", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbDraftSend, control.AccessWrite, protocol.DraftSendArgs{Mailbox: "secretbox", ID: "nosuchdraft"}, map[string]string{"root": "not_found", "owner": "not_found", "other": "not_found", "ghost": "not_found"}},
		{protocol.VerbDraftDelete, control.AccessWrite, protocol.DraftIDArgs{Mailbox: "secretbox", ID: "nosuchdraft"}, map[string]string{"root": "not_found", "owner": "not_found", "other": "not_found", "ghost": "not_found"}},
		// Bulk verbs: naming another's mailbox reads as not found; without
		// one they match only the caller's items (the owner's held item
		// survives the others' drop: the queue.drop row below needs it).
		{protocol.VerbQueueFlush, control.AccessWrite, protocol.QueueFilter{Mailbox: "secretbox"}, denied},
		{protocol.VerbQueueFlush, control.AccessWrite, protocol.QueueFilter{Domain: "remote.test", State: "held"}, all("")},
		{protocol.VerbQueueDropMatching, control.AccessWrite, protocol.QueueFilter{Mailbox: "secretbox", OlderThan: "1000d"}, denied},
		{protocol.VerbQueueDropMatching, control.AccessWrite, protocol.QueueFilter{Domain: "remote.test"}, map[string]string{"other": "", "ghost": ""}},
		{protocol.VerbQueueDropMatching, control.AccessWrite, protocol.QueueFilter{}, all("invalid_input")},
		{protocol.VerbQueueSummary, control.AccessRead, protocol.QueueSummaryArgs{QueueFilter: protocol.QueueFilter{Mailbox: "secretbox"}}, denied},
		{protocol.VerbQueueSummary, control.AccessRead, nil, all("")},
		{protocol.VerbQueueDrop, control.AccessWrite, protocol.QueueIDArgs{ID: fx.queueID}, map[string]string{"other": "not_found", "ghost": "not_found", "owner": ""}},
	}
}

// TestAuthorizationMatrixCoversEveryVerb fails when a verb registered in the
// verb table has no row in the authorization matrix, or a row's access
// differs from the verb's. It needs no root, so the gap shows in every run,
// not only where TestAuthorizationMatrix can create users.
func TestAuthorizationMatrixCoversEveryVerb(t *testing.T) {
	checkMatrixCoversVerbs(t, matrixRows(matrixFixture{owner: "owner", messageID: "m", sentID: "s", queueID: "q"}))
}

// checkMatrixCoversVerbs fails when a registered verb has no row in the
// matrix, or a row states an access other than the one the verb declares.
func checkMatrixCoversVerbs(t *testing.T, rows []matrixRow) {
	t.Helper()
	covered := map[string]bool{}
	for _, r := range rows {
		acc, ok := control.VerbAccess(r.verb)
		if !ok {
			t.Errorf("matrix row for %s, which the daemon does not register", r.verb)
			continue
		}
		if acc != r.acc {
			t.Errorf("verb %s declares access %s; the matrix expects %s: update both together", r.verb, acc, r.acc)
		}
		covered[r.verb] = true
	}
	for _, v := range control.Verbs() {
		if !covered[v] {
			t.Errorf("verb %s has no row in TestAuthorizationMatrix: add one for root, the owner, another user and a uid without a passwd entry", v)
		}
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
