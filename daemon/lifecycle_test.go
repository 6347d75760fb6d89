package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/mailctl/mailctl/protocol"
)

func TestReloadKeepsOldConfigOnError(t *testing.T) {
	td := startDaemon(t, "")
	path := td.cfg.File
	orig, _ := os.ReadFile(path)

	if err := os.WriteFile(path, []byte(strings.Replace(string(orig), "[smtp]", "[smtp]\nmax_recipents = 3", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err == nil || !strings.Contains(err.Error(), "max_recipents") {
		t.Fatalf("bad config reload: %v, want an error naming the key", err)
	}
	if td.Daemon.cfg().SMTP.MaxRecipients != 100 {
		t.Fatal("running config changed by a failed reload")
	}
	good := string(orig) + "\n[trust]\ntrusted_senders = [\"*@friend.test\"]\n"
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatalf("good reload: %v", err)
	}
	if s := td.Daemon.cfg().Trust.TrustedSenders; len(s) != 1 || s[0] != "*@friend.test" {
		t.Fatalf("reload did not apply: %v", s)
	}
	var v protocol.VersionInfo
	if err := td.call(t, protocol.VerbVersion, nil, &v); err != nil {
		t.Fatalf("socket after reload: %v", err)
	}
}

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestAuditLineForEveryRequest(t *testing.T) {
	td := startDaemon(t, "")
	var buf syncBuffer
	td.log = slog.New(slog.NewTextHandler(&buf, nil))
	td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "audited"}, nil)
	td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "nosuch"}, nil)
	out := buf.String()
	for _, want := range []string{
		fmt.Sprintf("msg=audit uid=%d gid=%d", os.Getuid(), os.Getgid()), "verb=mailbox.create mailbox=audited decision=allow code=ok duration_ms=",
		"verb=mailbox.show mailbox=nosuch decision=deny code=not_found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit log lacks %q:\n%s", want, out)
		}
	}
}

func TestWatchDeliversOnlyOwnEvents(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "mine")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	events, err := c.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"mine"}})
	if err != nil {
		t.Fatal(err)
	}
	td.emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "mine", ID: "x1"}, "")
	ev := <-events
	if ev.Type != protocol.EventNewMail || ev.ID != "x1" || ev.At.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	// The subscriber filter holds for root too: another mailbox's event is not sent.
	td.ensureMine(t, "theirs")
	td.emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "theirs", ID: "x2"}, "")
	td.emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "mine", ID: "x3"}, "")
	if ev := <-events; ev.ID != "x3" {
		t.Fatalf("got event for another mailbox: %+v", ev)
	}
}

func TestStatusFindings(t *testing.T) {
	td := startDaemon(t, "")
	var st protocol.Status
	if err := td.call(t, protocol.VerbStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Server != "test" || len(st.Findings) == 0 || len(st.Listeners) < 2 {
		t.Fatalf("status: %+v", st)
	}
	if !visibleFinding(protocol.Finding{ID: "dns.mx", Message: "no MX for example.test"}, nil, []string{"bob"}) {
		t.Error("host-wide finding hidden")
	}
	if visibleFinding(protocol.Finding{ID: "mailbox.owner_wrong", Message: "mailbox bob is owned by uid 7"}, []string{"alice"}, []string{"bob"}) {
		t.Error("another user's mailbox finding shown")
	}
	if !visibleFinding(protocol.Finding{ID: "mailbox.folder_missing", Message: "mailbox alice lacks inbox"}, []string{"alice"}, []string{"bob"}) {
		t.Error("own mailbox finding hidden")
	}
	if visibleFinding(protocol.Finding{ID: "paths.mode", Message: "/var/lib/mailctl/mailboxes/bob/inbox mode 0755"}, []string{"alice"}, []string{"bob"}) {
		t.Error("path inside another user's mailbox shown")
	}
}

func TestMetricsEndpoint(t *testing.T) {
	td := startDaemon(t, "[metrics]\nlisten = \"127.0.0.1:0\"\n")
	td.call(t, protocol.VerbMailboxList, nil, nil)
	td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "nosuch"}, nil)
	resp, err := http.Get("http://" + td.metricsS.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`mailctl_socket_requests_total{code="ok",verb="mailbox.list"} 1`,
		`mailctl_socket_requests_total{code="not_found",verb="mailbox.show"} 1`,
		"mailctl_queue_depth 0",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
