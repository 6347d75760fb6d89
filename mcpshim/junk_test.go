package mcpshim

import (
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/protocol"
)

// TestJunkFolder: junk is left out of a listing unless asked for by name,
// and an agent can list, read and mark mail there, send a message to junk
// and take one back out to the inbox.
func TestJunkFolder(t *testing.T) {
	e := newEnv(t)
	id := e.deliver("agent", testdaemon.Message{Subject: "You won a prize"})
	keep := e.deliver("agent", testdaemon.Message{Subject: "Meeting notes"})

	var mv MoveData
	e.ok("email_move", map[string]any{"mailbox": "agent", "id": id, "action": "junk"}, &mv)
	if mv.From != protocol.FolderInbox || mv.To != protocol.FolderJunk {
		t.Fatalf("move to junk: %+v", mv)
	}
	var list EmailListData
	e.ok("email_list", map[string]any{"mailbox": "agent"}, &list)
	if len(list.Messages) != 1 || list.Messages[0].ID != keep {
		t.Fatalf("default listing shows junk: %+v", list.Messages)
	}
	e.ok("email_list", map[string]any{"mailbox": "agent", "folder": "junk"}, &list)
	if len(list.Messages) != 1 || list.Messages[0].ID != id || list.Messages[0].Folder != protocol.FolderJunk {
		t.Fatalf("junk listing: %+v", list.Messages)
	}
	var msg EmailReadData
	e.ok("email_read", map[string]any{"mailbox": "agent", "id": id, "folder": "junk"}, &msg)
	if !strings.Contains(msg.Subject, "You won a prize") || msg.Folder != protocol.FolderJunk {
		t.Fatalf("read in junk: %+v", msg)
	}
	var mark MarkData
	e.ok("email_mark_read", map[string]any{"mailbox": "agent", "id": id, "folder": "junk"}, &mark)
	if len(mark.Changed) != 1 {
		t.Fatalf("mark in junk: %+v", mark)
	}
	e.ok("email_move", map[string]any{"mailbox": "agent", "id": id, "action": "restore", "folder": "junk"}, &mv)
	if mv.From != protocol.FolderJunk || mv.To != protocol.FolderInbox {
		t.Fatalf("restore from junk: %+v", mv)
	}
	e.ok("email_list", map[string]any{"mailbox": "agent"}, &list)
	if len(list.Messages) != 2 {
		t.Fatalf("after restoring: %+v", list.Messages)
	}
	e.ok("email_list", map[string]any{"mailbox": "agent", "folder": "junk"}, &list)
	if len(list.Messages) != 0 {
		t.Fatalf("junk after restoring: %+v", list.Messages)
	}
	e.fail("email_move", map[string]any{"mailbox": "agent", "id": id, "action": "restore", "folder": "junk"}, protocol.CodeNotFound)
}
