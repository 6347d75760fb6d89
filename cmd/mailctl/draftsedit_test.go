package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestDraftsEditAsRootRunsTheEditorAsTheOwner: root runs `mailctl drafts
// edit` on a mailbox of another user. The draft's path is in a folder its
// owner controls, who may swap the file for a symlink to a root file once
// the daemon has read it; the editor root starts would then edit that file
// with root's rights. It runs as the owner instead: the write through the
// swapped-in link is refused and root's file is unchanged.
func TestDraftsEditAsRootRunsTheEditorAsTheOwner(t *testing.T) {
	testusers.RequireRoot(t)
	owner := testusers.Create(t, "mcedit")
	dir := testusers.SharedDir(t) // the owner must reach its mailbox folder
	cfgPath := serveConfig(t, dir, freePort(t))
	startServe(t, cfgPath)
	env := []string{"MAILCTL_SOCKET=" + filepath.Join(dir, "mailctl.sock")}
	run := func(extra []string, args ...string) string {
		t.Helper()
		out, e, code := mailctl(t, append(env, extra...), args...)
		if code != 0 {
			t.Fatalf("mailctl %s: exit %d: %s%s", strings.Join(args, " "), code, e, out)
		}
		return out
	}
	run(nil, "mailboxes", "create", "edited", "--owner", owner.Name)
	var d protocol.Draft
	if err := json.Unmarshal([]byte(run(nil, "drafts", "create", "edited", "--to", "pat@outside.example", "--subject", "s", "--json")), &d); err != nil {
		t.Fatal(err)
	}

	rootDir := t.TempDir()
	secret := filepath.Join(rootDir, "shadow")
	if err := os.WriteFile(secret, []byte("ROOT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	ranAs := filepath.Join(testusers.SharedDir(t), "uid")
	os.Chmod(filepath.Dir(ranAs), 0o777)
	// The editor: it notes whom it runs as, then does what the owner can do
	// after the daemon's read (put a link to root's file in place of the
	// draft), then saves through the draft's path.
	editor := filepath.Join(testusers.SharedDir(t), "editor")
	script := fmt.Sprintf("#!/bin/sh\nid -u > %s\nln -sf %s \"$1\"\necho edited >> \"$1\"\n", ranAs, secret)
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	mailctl(t, append(env, "VISUAL="+editor), "drafts", "edit", "edited", d.ID)

	if data, err := os.ReadFile(secret); err != nil || string(data) != "ROOT-SECRET" {
		t.Errorf("root's file after drafts edit: %q %v", data, err)
	}
	if uid, err := os.ReadFile(ranAs); err != nil || strings.TrimSpace(string(uid)) != fmt.Sprint(owner.UID) {
		t.Errorf("the editor ran as uid %q (%v), want the owner's %d", uid, err, owner.UID)
	}
}
