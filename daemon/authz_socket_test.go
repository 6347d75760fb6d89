package daemon_test

// Authorization rules tested as users meet them: real processes, each with
// its own uid, make requests on the control socket of a running daemon. The
// tests use nothing but the protocol, the test daemon and test users, so they
// hold wherever the authorization code lives.

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// callerEnv carries one request to TestHelperSocketCaller.
const callerEnv = "MAILCTL_TEST_SOCKET_CALL"

// socketCall is the request a caller process makes.
type socketCall struct {
	Socket string          `json:"socket"`
	Verb   string          `json:"verb"`
	Args   json.RawMessage `json:"args"`
}

// callOutcome is what it reports: Code is "" on success.
type callOutcome struct {
	Code string          `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

const outcomePrefix = "OUTCOME "

// TestHelperSocketCaller is not a test of its own: the tests below run the
// test binary as another user with only this test selected, to make one
// request on a connection of that uid.
func TestHelperSocketCaller(t *testing.T) {
	req := os.Getenv(callerEnv)
	if req == "" {
		t.Skip("a helper process: makes one socket request as the uid it is started with")
	}
	var sc socketCall
	if err := json.Unmarshal([]byte(req), &sc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out callOutcome
	c, err := protocol.Dial(ctx, sc.Socket)
	if err == nil {
		defer c.Close()
		err = c.Call(ctx, sc.Verb, sc.Args, &out.Data)
	}
	if err != nil {
		out.Code, out.Msg = protocol.CodeOf(err), err.Error()
	}
	b, _ := json.Marshal(out)
	os.Stdout.Write(append([]byte(outcomePrefix), append(b, '\n')...))
}

// callAs makes one request on socket as user u, in a process of its own.
func callAs(t *testing.T, bin, socket string, u testusers.User, verb string, args any) callOutcome {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(socketCall{Socket: socket, Verb: verb, Args: raw})
	cmd := testusers.As(exec.Command(bin, "-test.run", "^TestHelperSocketCaller$"), u.UID, u.GID)
	cmd.Env = []string{callerEnv + "=" + string(req), "HOME=" + u.Home, "PATH=/usr/bin:/bin"}
	cmd.Dir = u.Home
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s as %s: %v: %s", verb, u.Name, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), outcomePrefix); ok {
			var o callOutcome
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Fatalf("%s as %s printed %q", verb, u.Name, line)
			}
			return o
		}
	}
	t.Fatalf("%s as %s reported nothing: %s", verb, u.Name, out)
	return callOutcome{}
}

// TestCatchAllIsManagedByRootOnly: a mailbox a user created and the operator
// later made the catch-all (it receives mail for every unknown name at the
// domain) is no longer the user's to rename, retrust or delete; the user
// still reads it and manages its other mailboxes, and root manages it.
func TestCatchAllIsManagedByRootOnly(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mctca")
	td := testdaemon.Start(t)
	bin := testusers.Executable(t)
	as := func(verb string, args any) callOutcome { return callAs(t, bin, td.Socket, u, verb, args) }
	for _, name := range []string{"catchbox", "ownbox"} {
		if o := as(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: name}); o.Code != "" {
			t.Fatalf("creating %s: %s %s", name, o.Code, o.Msg)
		}
	}

	cfg := filepath.Join(td.Dir, "config.toml")
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append([]byte("catch_all = \"catchbox\"\n"), text...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(cfg); err != nil {
		t.Fatal(err)
	}

	name := "Catch all"
	for _, req := range []struct {
		verb string
		args any
	}{
		{protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "catchbox", DisplayName: &name}},
		{protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "catchbox", Force: true}},
	} {
		if o := as(req.verb, req.args); o.Code != protocol.CodeForbidden || !strings.Contains(o.Msg, "catch-all") {
			t.Errorf("%s on the catch-all as its owner: %s %q, want forbidden naming the catch-all", req.verb, o.Code, o.Msg)
		}
	}
	// Still the owner's to read and to steer its mail.
	if o := as(protocol.VerbMailboxShow, protocol.NameArgs{Name: "catchbox"}); o.Code != "" {
		t.Errorf("showing the catch-all as its owner: %s %s", o.Code, o.Msg)
	}
	if o := as(protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "catchbox"}); o.Code != "" {
		t.Errorf("listing the catch-all's mail as its owner: %s %s", o.Code, o.Msg)
	}
	// The owner's other mailbox stays the owner's to manage.
	if o := as(protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "ownbox", DisplayName: &name}); o.Code != "" {
		t.Errorf("updating its own mailbox: %s %s", o.Code, o.Msg)
	}
	if o := as(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "ownbox"}); o.Code != "" {
		t.Errorf("deleting its own mailbox: %s %s", o.Code, o.Msg)
	}
	// Root manages the catch-all.
	if err := td.TryCall(protocol.VerbMailboxUpdate, protocol.MailboxUpdateArgs{Name: "catchbox", DisplayName: &name}, nil); err != nil {
		t.Errorf("root updating the catch-all: %v", err)
	}
	if err := td.TryCall(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "catchbox", Force: true}, nil); err != nil {
		t.Errorf("root deleting the catch-all: %v", err)
	}
}

// TestQueuedMailOfDeletedMailbox: deleting a mailbox drops the mail it had
// queued. Root can still look the item up (what was dropped, for whom) and
// gets a plain answer to acting on it, not an internal error; its former
// owner no longer sees it.
func TestQueuedMailOfDeletedMailbox(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mctqd")
	td := testdaemon.Start(t, testdaemon.Options{Extra: "[send]\nhold = true\n"})
	bin := testusers.Executable(t)
	as := func(verb string, args any) callOutcome { return callAs(t, bin, td.Socket, u, verb, args) }
	if o := as(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "leaving"}); o.Code != "" {
		t.Fatalf("creating the mailbox: %s %s", o.Code, o.Msg)
	}
	o := as(protocol.VerbSend, protocol.SendArgs{FromMailbox: "leaving", To: []string{"someone@remote.test"}, Subject: "held", Body: "held for approval"})
	var sent protocol.SendResult
	if o.Code != "" || json.Unmarshal(o.Data, &sent) != nil || sent.Status != "held" || sent.ID == "" {
		t.Fatalf("send: %s %s %s, want held", o.Code, o.Msg, o.Data)
	}
	o = as(protocol.VerbQueueList, struct{}{})
	var mine protocol.QueueList
	if o.Code != "" || json.Unmarshal(o.Data, &mine) != nil || len(mine.Items) != 1 || mine.Items[0].MessageID != sent.MessageID {
		t.Fatalf("the owner's queue: %s %s %s, want the held message", o.Code, o.Msg, o.Data)
	}
	id := mine.Items[0].ID
	if o := as(protocol.VerbMailboxDelete, protocol.MailboxDeleteArgs{Name: "leaving", Force: true}); o.Code != "" {
		t.Fatalf("deleting the mailbox: %s %s", o.Code, o.Msg)
	}

	if o := as(protocol.VerbQueueShow, protocol.QueueIDArgs{ID: id}); o.Code != protocol.CodeNotFound {
		t.Errorf("the former owner showing the item: %s %s, want not_found", o.Code, o.Msg)
	}
	var item protocol.QueueItem
	if err := td.TryCall(protocol.VerbQueueShow, protocol.QueueIDArgs{ID: id}, &item); err != nil || item.ID != id {
		t.Fatalf("root showing the item of the deleted mailbox: %+v, %v", item, err)
	}
	for _, verb := range []string{protocol.VerbQueueDrop, protocol.VerbQueueApprove} {
		if err := td.TryCall(verb, protocol.QueueIDArgs{ID: id}, nil); protocol.CodeOf(err) != protocol.CodeConflict || !strings.Contains(err.Error(), "already settled") {
			t.Errorf("root: %s on the item of the deleted mailbox: %v, want conflict: already settled", verb, err)
		}
	}
	var l protocol.QueueList
	if err := td.TryCall(protocol.VerbQueueList, struct{}{}, &l); err != nil || len(l.Items) != 0 {
		t.Errorf("the queue after the delete: %+v, %v", l.Items, err)
	}
}

// TestReloadDetailsOnlyForRoot: the outcome of a reload is about the config
// file and the key folder, which only root reads: another user asking for
// the version learns that a reload happened and whether it worked, not the
// keys it changed, why it failed or which DKIM keys sign.
func TestReloadDetailsOnlyForRoot(t *testing.T) {
	testusers.RequireRoot(t)
	u := testusers.Create(t, "mctrl")
	td := testdaemon.Start(t)
	bin := testusers.Executable(t)
	cfgPath := filepath.Join(td.Dir, "config.toml")
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(orig), "trusted_senders = [", `trusted_senders = ["secret-partner@example.org", `, 1)
	if changed == string(orig) {
		t.Fatalf("the test daemon's config has no trusted_senders to change:\n%s", orig)
	}
	if err := os.WriteFile(cfgPath, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(cfgPath); err != nil {
		t.Fatal(err)
	}
	var root protocol.VersionInfo
	td.Call(t, protocol.VerbVersion, nil, &root)
	if r := root.Reload; r == nil || !r.OK || len(r.Applied) == 0 || len(r.DKIMKeys) == 0 {
		t.Fatalf("root's version after a reload: %+v", r)
	}
	o := callAs(t, bin, td.Socket, u, protocol.VerbVersion, nil)
	if o.Code != "" {
		t.Fatalf("version as %s: %s %s", u.Name, o.Code, o.Msg)
	}
	var theirs protocol.VersionInfo
	if err := json.Unmarshal(o.Data, &theirs); err != nil {
		t.Fatal(err)
	}
	if r := theirs.Reload; r == nil || !r.OK || r.Count != root.Reload.Count || r.Applied != nil || r.Pending != nil || r.DKIMKeys != nil || r.Error != "" {
		t.Errorf("%s's version after a reload: %+v, want the count and outcome only", u.Name, r)
	}
	if strings.Contains(string(o.Data), "trust.") || strings.Contains(string(o.Data), "dkim_keys") {
		t.Errorf("%s's version reply names config keys or DKIM keys: %s", u.Name, o.Data)
	}
}
