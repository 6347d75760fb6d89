package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"

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
	cp := startClient(t, testusers.Executable(t), td.socket, principal{name: u2.Name, uid: u2.UID, gid: u2.GID})
	o := cp.do(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "opsbox"})
	if o.Code != protocol.CodeNotFound || strings.Contains(string(o.Data), "u1 private") {
		t.Errorf("u2 lists opsbox: code %q, data %s; want not_found", o.Code, o.Data)
	}
}
