package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/logsum"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// TestAuditFloodOfOneUIDHidesNoOthers: one client makes requests of more
// distinct kinds than the log's summary remembers (each names another
// mailbox). Another user's request right after still gets an audit line
// of its own, naming its uid and verb, instead of being counted under a
// shared "(other)" with the flood: a user cannot blind the audit trail to
// what others, or it, do next.
func TestAuditFloodOfOneUIDHidesNoOthers(t *testing.T) {
	testusers.RequireRoot(t)
	other := testusers.Create(t, "mcau")
	logs := &testproc.Output{}
	td := startDaemonWith(t, "", Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range logsum.DefaultMaxKeys + 10 {
		c.Call(ctx, protocol.VerbMailboxShow, protocol.NameArgs{Name: fmt.Sprintf("nosuch%d", i)}, nil)
	}
	cp := startClient(t, testusers.Executable(t), td.socket, principal{name: other.Name, uid: other.UID, gid: other.GID})
	if o := cp.do(t, protocol.VerbMailboxList, nil); o.Code != "" {
		t.Fatalf("mailbox.list as %s: %+v", other.Name, o)
	}
	want := fmt.Sprintf("msg=audit uid=%d gid=%d", other.UID, other.GID)
	if out := logs.String(); !strings.Contains(out, want) || !strings.Contains(out[strings.Index(out, want):], "verb=mailbox.list") {
		t.Errorf("after another client's flood, uid %d's mailbox.list has no audit line of its own", other.UID)
	}
}

// TestSMTPFloodHidesNoAuditLine: SMTP clients from more addresses than the
// log's summary remembers (each refusal a kind of its own) fill its table;
// a control request after them still gets its audit line.
func TestSMTPFloodHidesNoAuditLine(t *testing.T) {
	logs := &testproc.Output{}
	td := startDaemonWith(t, "", Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	for i := range logsum.DefaultMaxKeys + 10 {
		td.logSum.Allow(fmt.Sprintf("smtp refused 2001:db8:%x::1", i))
	}
	td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "after-the-flood"}, nil)
	if out := logs.String(); !strings.Contains(out, "verb=mailbox.show mailbox=after-the-flood") {
		t.Errorf("after an SMTP flood, a control request has no audit line:\n%.2000s", out)
	}
}
