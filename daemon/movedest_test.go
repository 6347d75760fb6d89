package daemon

import (
	"testing"
	"time"

	"github.com/mailctl/mailctl/protocol"
)

// message.move takes a message to inbox, archive, trash or junk, as the CLI's
// help, the daemon's own refusal and MessageMoveArgs say: not into sent (an
// inbound message posing as a sent copy, with no delivery status) nor into
// drafts (a stranger's message turned into a draft that drafts send sends).
func TestMessageMoveDestinations(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "alice")
	for _, to := range []string{protocol.FolderSent, protocol.FolderDrafts} {
		id := deliverTo(t, td, "alice", "to-"+to, time.Now(), nil)
		err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: id, To: to}, nil)
		if protocol.CodeOf(err) != protocol.CodeInvalidInput {
			t.Errorf("move an inbox message to %s: %v, want invalid_input", to, err)
		}
		if ids := listIDs(t, td, protocol.MessageListArgs{Mailbox: "alice", Folder: to}); len(ids) != 0 {
			t.Errorf("%s holds %v after a refused move", to, ids)
		}
	}
	id := deliverTo(t, td, "alice", "archived", time.Now(), nil)
	for _, step := range []struct{ from, to string }{{"", "archive"}, {"archive", "trash"}, {"trash", "junk"}, {"junk", "inbox"}} {
		if err := td.call(t, protocol.VerbMessageMove, protocol.MessageMoveArgs{Mailbox: "alice", ID: id, From: step.from, To: step.to}, nil); err != nil {
			t.Errorf("move %s -> %s: %v", step.from, step.to, err)
		}
	}
}
