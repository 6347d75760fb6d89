package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/control"
	"github.com/mailctl/mailctl/protocol"
)

// hook.runs answers a limit past its most with its most (as message.list
// does), not with the default; 0 is the default and a negative limit is
// refused.
func TestHookRunsLimit(t *testing.T) {
	td := startDaemon(t, "")
	// The caller's mailbox, so that its runs are the caller's to list
	// whoever runs the test.
	td.ensureMine(t, "agent")
	rec, ok := td.reg.Mailbox("agent")
	if !ok {
		t.Fatal("agent is not registered")
	}
	for i := range control.MaxHookRuns + 20 {
		if err := td.hookLog.Append(protocol.HookRun{Hook: "h", Mailbox: "agent", MailboxID: rec.ID, Event: protocol.EventOnReceive,
			StartedAt: time.Unix(int64(1e9+i), 0).UTC(), MessageID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for limit, want := range map[int]int{0: 50, 7: 7, control.MaxHookRuns: control.MaxHookRuns, control.MaxHookRuns + 1: control.MaxHookRuns, 1 << 40: control.MaxHookRuns} {
		var runs protocol.HookRuns
		td.call(t, protocol.VerbHookRuns, protocol.HookRunsArgs{Limit: limit}, &runs)
		if len(runs.Runs) != want {
			t.Errorf("limit %d: %d runs, want %d", limit, len(runs.Runs), want)
		}
	}
	if err := td.call(t, protocol.VerbHookRuns, protocol.HookRunsArgs{Limit: -1}, nil); protocol.CodeOf(err) != protocol.CodeInvalidInput {
		t.Errorf("limit -1: %v, want invalid_input", err)
	}
}
