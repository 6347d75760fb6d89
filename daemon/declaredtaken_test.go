package daemon

import (
	"fmt"
	"os"
	"testing"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestDeclarationDoesNotTakeAUsersMailbox: a user created mailbox "taken"
// over the socket; the operator then declares "taken" for another user. The
// declaration is not served (and logged): the mailbox, its mail and its
// address stay the first user's, and the declared owner sees none of it.
func TestDeclarationDoesNotTakeAUsersMailbox(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcdt1")
	u2 := testusers.Create(t, "mcdt2")
	td := startDaemon(t, "")
	if err := td.EnsureMailbox("taken", u1.UID, u1.GID); err != nil {
		t.Fatal(err)
	}
	deliverTo(t, td, "taken", "u1 private subject", td.now(), nil)
	td.stop()

	path := td.dir + "/config.toml"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, fmt.Sprintf("\n[[mailboxes]]\nname = \"taken\"\nowner = %q\n", u2.Name)...)
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	td = runTestDaemon(t, cfg, td.dir, Options{})
	m, ok := td.lookupMailbox("taken")
	if !ok || m.UID != u1.UID {
		t.Fatalf("taken is now %+v, want u1's (uid %d)", m, u1.UID)
	}
	for _, b := range td.allMailboxes() {
		if b.Name == "taken" && b.UID != u1.UID {
			t.Errorf("mailboxes list taken for uid %d too", b.UID)
		}
	}
	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "taken"}, &l); err != nil || len(l.Messages) != 1 {
		t.Errorf("u1's mail in taken: %v %+v", err, l.Messages)
	}
}

// TestDeclaredAliasDoesNotTakeAUsersMailbox: the operator declares, on
// another user's mailbox, an alias that is the name of a mailbox a user
// created. Routing gives aliases first, so serving it would divert that
// user's mail; the alias is not served (and logged), the rest is.
func TestDeclaredAliasDoesNotTakeAUsersMailbox(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcda1")
	u2 := testusers.Create(t, "mcda2")
	td := startDaemon(t, "")
	if err := td.EnsureMailbox("usersbox", u1.UID, u1.GID); err != nil {
		t.Fatal(err)
	}
	path := td.cfg.File
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, fmt.Sprintf("\n[[mailboxes]]\nname = \"opsbox\"\nowner = %q\naliases = [\"usersbox\", \"UsersBox@example.test\", \"help\"]\n", u2.Name)...)
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{"usersbox@example.test": "usersbox", "usersbox+tag@example.test": "usersbox", "help@example.test": "opsbox", "opsbox@example.test": "opsbox"} {
		if rt, err := td.route(addr); err != nil || rt.Mailbox != want {
			t.Errorf("%s routes to %+v, %v; want %s", addr, rt, err, want)
		}
	}
	deliverTo(t, td, "usersbox", "u1 private subject", td.now(), nil)
	var l protocol.MessageList
	if err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "usersbox"}, &l); err != nil || len(l.Messages) != 1 {
		t.Errorf("u1's mail in usersbox: %v %+v", err, l.Messages)
	}
}
