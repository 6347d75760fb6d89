package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// TestReloadAndCreateOfANameDoNotInterleave: the operator declares "decl"
// for one user and reloads; meanwhile root creates "decl" over the socket
// for another user, after the reload found the name free and before it put
// the declaration in place. The create waits for the reload and is refused,
// so the name is the declared owner's alone. Were they to interleave, the
// created mailbox would be registered to its user while the declaration,
// served first, handed its mail and address to the declared owner.
func TestReloadAndCreateOfANameDoNotInterleave(t *testing.T) {
	testusers.RequireRoot(t)
	creator := testusers.Create(t, "mcrc1")
	declared := testusers.Create(t, "mcrc2")
	td := startDaemon(t, "")
	path := td.dir + "/config.toml"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, fmt.Sprintf("\n[[mailboxes]]\nname = \"decl\"\nowner = %q\n", declared.Name)...)
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}

	built, resume := make(chan struct{}), make(chan struct{})
	keep := reloadBuilt
	reloadBuilt = func() {
		close(built)
		<-resume
	}
	t.Cleanup(func() { reloadBuilt = keep })
	waiting := nameWaits(t, "decl")

	reloaded := make(chan error, 1)
	go func() { reloaded <- td.Reload(path) }()
	testwait.Recv(t, "the reload to build its new state", built)
	created := td.callAsync(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "decl", Owner: creator.Name})
	var createErr error
	select {
	case <-waiting: // the create waits for the reload
		close(resume)
		createErr = testwait.Recv(t, "the create to be answered once the reload went on", created)
	case createErr = <-created:
		t.Errorf("a create of a name a reload is declaring did not wait for the reload (%v)", createErr)
		close(resume)
	case <-time.After(testwait.Timeout):
		close(resume)
		t.Fatal("the create of a name a reload is declaring neither waited for the reload nor was answered")
	}
	if err := testwait.Recv(t, "the reload to return", reloaded); err != nil {
		t.Fatalf("reload: %v", err)
	}

	m, ok := td.lookupMailbox("decl")
	if !ok {
		t.Fatal("decl is no mailbox")
	}
	r, registered := td.reg.Mailbox("decl")
	if registered && r.OwnerUID != m.UID {
		t.Errorf("decl is registered to uid %d and served to uid %d: the declaration took the mailbox a user was given", r.OwnerUID, m.UID)
	}
	if createErr == nil {
		t.Errorf("the create after the declaration succeeded; want conflict")
	} else if protocol.CodeOf(createErr) != protocol.CodeConflict {
		t.Errorf("create: %v, want conflict", createErr)
	}
	if m.UID != declared.UID {
		t.Errorf("decl is served to uid %d, want the declared owner's %d", m.UID, declared.UID)
	}
}

// TestReloadEndsWatchesOfAMailboxItStopsDeclaring: a mailbox the operator
// takes out of config.toml is gone as a deleted one is: a watch on it
// hears so and ends, instead of staying open on a name that may be given
// to someone else.
func TestReloadEndsWatchesOfAMailboxItStopsDeclaring(t *testing.T) {
	declared := fmt.Sprintf("\n[[mailboxes]]\nname = \"decl\"\nowner = %q\n", myName(t))
	td := startDaemon(t, declared)
	ctx, events := td.watch(t, "decl")
	path := td.dir + "/config.toml"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(text), declared, "\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := td.lookupMailbox("decl"); ok {
		t.Fatal("decl is still served after the reload")
	}
	var got []string
	for ev := range events {
		got = append(got, ev.Type+" "+ev.Mailbox)
	}
	if ctx.Err() != nil || len(got) != 1 || got[0] != protocol.EventMailboxDeleted+" decl" {
		t.Errorf("the watch on decl after the reload: %q (%v), want its deletion, then its end", got, ctx.Err())
	}
}
