package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestDeclaredOwnerIsNotGivenAnotherUsersFolder: the folder of a declared
// mailbox belongs to another user than the one config.toml now declares (a
// restore gave it to the archive's owner, who this host's config does not
// name; or the operator changed the owner line). The declaration is not
// served, and logged: the declared owner reads none of the mail in it.
func TestDeclaredOwnerIsNotGivenAnotherUsersFolder(t *testing.T) {
	testusers.RequireRoot(t)
	u1 := testusers.Create(t, "mcdo1")
	u2 := testusers.Create(t, "mcdo2")
	declare := func(u testusers.User) string {
		return fmt.Sprintf("\n[[mailboxes]]\nname = \"opsbox\"\nowner = %q\n", u.Name)
	}
	td := startDaemon(t, declare(u1))
	deliverTo(t, td, "opsbox", "u1 private subject", td.now(), nil)
	td.stop()

	path := td.dir + "/config.toml"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = []byte(strings.Replace(string(text), declare(u1), declare(u2), 1))
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	td = runTestDaemon(t, cfg, td.dir, Options{})
	if m, ok := td.lookupMailbox("opsbox"); ok {
		t.Errorf("opsbox is served as %+v; its folder is uid %d's", m, u1.UID)
	}
	var se *smtp.SMTPError
	if rt, err := td.route("opsbox@example.test"); !errors.As(err, &se) || se.Code/100 != 4 {
		t.Errorf("route(opsbox) = %+v, %v; want a temporary refusal until the declaration is mended", rt, err)
	}
	cp := startClient(t, testusers.Executable(t), td.socket, principal{name: u2.Name, uid: u2.UID, gid: u2.GID})
	o := cp.do(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "opsbox"})
	if o.Code != protocol.CodeNotFound || strings.Contains(string(o.Data), "u1 private") {
		t.Errorf("u2 lists opsbox: code %q, data %s; want not_found", o.Code, o.Data)
	}
}

// TestUnservedDeclarationDefersMail: mail to a mailbox the operator declared
// and the daemon does not serve (its owner is not a user here; its folder is
// another user's) waits with a temporary refusal for the declaration to be
// mended. It is not bounced, and it does not reach the catch-all, whose
// owner it was never meant for; unknown names still go there.
func TestUnservedDeclarationDefersMail(t *testing.T) {
	td := startDaemon(t, fmt.Sprintf(`catch_all = "catchall"
[[mailboxes]]
name = "ghost"
owner = "mailctl-no-such-user-x9"
aliases = ["spook", "Boo@example.test"]
[[mailboxes]]
name = "catchall"
owner = %q
`, myName(t)))
	for _, addr := range []string{"ghost@example.test", "Ghost+tag@example.test", "spook@example.test", "boo@example.test"} {
		rt, err := td.route(addr)
		var se *smtp.SMTPError
		if !errors.As(err, &se) || se.Code/100 != 4 {
			t.Errorf("route(%s) = %+v, %v; want a temporary refusal", addr, rt, err)
		}
	}
	if rt, err := td.route("nobody@example.test"); err != nil || rt.Mailbox != "catchall" {
		t.Errorf("route(nobody) = %+v, %v; want the catch-all", rt, err)
	}
}
