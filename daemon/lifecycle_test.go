package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/resolver"
	"github.com/mailctl/mailctl/daemon/smtpin"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testwait"
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

func TestAuditLineForEveryRequest(t *testing.T) {
	var buf testproc.Output
	td := startDaemonWith(t, "", Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
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

// TestAuditFloodIsCounted: a client repeating one request costs one audit
// line per kind and window, and the count of the others is written — the
// trail stays complete without a line per request.
func TestAuditFloodIsCounted(t *testing.T) {
	logs := &testproc.Output{}
	td := startDaemonWith(t, "", Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	const n = 300
	for range n {
		td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "nosuch"}, nil)
	}
	td.call(t, protocol.VerbVersion, nil, nil)
	// Stopping the daemon writes what is still counted.
	td.stop()
	out := logs.String()
	// Every request is accounted for: a line of its own, a repeats= on the
	// next line of its kind, or a count= at the end of a window.
	kind := "verb=mailbox.show mailbox=nosuch decision=deny code=not_found"
	lines, total := 0, 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, kind) {
			continue
		}
		lines++
		if strings.Contains(l, "msg=audit ") {
			total++
		}
		for _, key := range []string{" repeats=", " count="} {
			if _, v, ok := strings.Cut(l, key); ok {
				var c int
				fmt.Sscan(v, &c)
				total += c
			}
		}
	}
	if total != n {
		t.Errorf("the log accounts for %d of %d requests:\n%s", total, n, out)
	}
	if lines > 4 {
		t.Errorf("%d log lines for %d identical requests, want a few", lines, n)
	}
	if !strings.Contains(out, "verb=version") {
		t.Errorf("another request was not logged:\n%s", out)
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
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "mine", ID: "x1"}, "")
	ev := testwait.Recv(t, "the event of mine", events)
	if ev.Type != protocol.EventNewMail || ev.ID != "x1" || ev.At.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	// The subscriber filter holds for root too: another mailbox's event is not sent.
	td.ensureMine(t, "theirs")
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "theirs", ID: "x2"}, "")
	td.ctl.Emit(protocol.Event{Type: protocol.EventNewMail, Mailbox: "mine", ID: "x3"}, "")
	if ev := testwait.Recv(t, "the event of mine after one of theirs", events); ev.ID != "x3" {
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
}

func TestMetricsEndpoint(t *testing.T) {
	td := startDaemon(t, "[metrics]\nlisten = \"127.0.0.1:0\"\n")
	td.call(t, protocol.VerbMailboxList, nil, nil)
	td.call(t, protocol.VerbMailboxShow, protocol.NameArgs{Name: "nosuch"}, nil)
	// One message taken: one fsync of the inbound journal made it durable.
	td.ensureMine(t, "metrics")
	env := smtpin.Envelope{Helo: "client.example", MailFrom: "a@sender.example", Rcpts: []string{"metrics@example.test"}}
	if errs := td.inbound.Deliver(context.Background(), env, smtpin.NewMessage([]byte("Subject: m\r\n\r\nbody\r\n"), 0)); errs[0] != nil {
		t.Fatal(errs[0])
	}
	resp, err := http.Get("http://" + td.metricsS.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// Every result and reason is a series before its first event (rate()
	// and alerts need one).
	for _, r := range receivedResults {
		want := fmt.Sprintf(`mailctl_messages_received_total{result=%q} `, r)
		if r == "stored" {
			want += "1"
		} else {
			want += "0"
		}
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, r := range rejectedReasons {
		if want := fmt.Sprintf(`mailctl_recipients_rejected_total{reason=%q} 0`, r); !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, want := range []string{
		`mailctl_socket_requests_total{code="ok",verb="mailbox.list"} 1`,
		`mailctl_socket_requests_total{code="not_found",verb="mailbox.show"} 1`,
		"mailctl_queue_depth 0",
		"mailctl_inbound_journal_fsyncs_total 1",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestReloadSaysWhatItApplied: a reload applies the keys that can change
// live and keeps the running values of those fixed at start, which the
// status (and so `mailctl doctor`) names until the file agrees again.
func TestReloadSaysWhatItApplied(t *testing.T) {
	logs := &testproc.Output{}
	td := startDaemonWith(t, "", Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	path := td.cfg.File
	orig, _ := os.ReadFile(path)
	changed := strings.Replace(string(orig), "[smtp]", "[smtp]\nmax_recipients = 7", 1) +
		"\n[trust]\ntrusted_senders = [\"*@friend.test\"]\n"
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatal(err)
	}
	cfg := td.Daemon.cfg()
	if s := cfg.Trust.TrustedSenders; len(s) != 1 || s[0] != "*@friend.test" {
		t.Errorf("trust.trusted_senders not applied: %v", s)
	}
	if cfg.SMTP.MaxRecipients != 100 {
		t.Errorf("smtp.max_recipients = %d in the running config, want the running 100 until a restart", cfg.SMTP.MaxRecipients)
	}
	pending := func() string {
		var st protocol.Status
		if err := td.call(t, protocol.VerbStatus, nil, &st); err != nil {
			t.Fatal(err)
		}
		for _, f := range st.Findings {
			if f.ID == "config.restart_pending" {
				return f.Message + " / " + f.Fix
			}
		}
		return ""
	}
	if p := pending(); !strings.Contains(p, "smtp.max_recipients") || strings.Contains(p, "trust.trusted_senders") || !strings.Contains(p, "restart") {
		t.Errorf("status finding %q, want smtp.max_recipients named with a restart fix, and nothing applied", p)
	}
	if !strings.Contains(logs.String(), "applied=trust.trusted_senders need_restart=smtp.max_recipients") {
		t.Errorf("the log does not name what the reload applied and what waits for a restart:\n%s", logs.String())
	}
	// The file agrees with the running daemon again: nothing is pending.
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatal(err)
	}
	if p := pending(); p != "" {
		t.Errorf("finding left after the file was put back: %q", p)
	}
}

// TestRestartKeysStayAtRunningValues: whatever the file changes, the config a
// reload installs differs from the running one only in keys that apply live,
// and every other changed key is reported as waiting for a restart.
func TestRestartKeysStayAtRunningValues(t *testing.T) {
	running, err := config.Parse([]byte("hostname = \"mx.a.test\"\ndomains = [\"a.test\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := config.Parse([]byte(`hostname = "mx2.a.test"
domains = ["a.test", "b.test"]
catch_all = "x"
[paths]
state_dir = "/srv/m"
[smtp]
listen = ["127.0.0.1:2526"]
max_recipients = 9
command_timeout = "1m"
[dns]
resolver = "127.0.0.1:53"
[trust]
trusted_senders = ["*@b.test"]
[send]
per_hour = 3
[relay]
host = "smtp.b.test"
port = 587
[delivery]
retry_for = "1d"
max_concurrent = 3
[hook_rules]
max_concurrent = 2
allow_untrusted_for_users = true
[control]
request_timeout = "1m"
[metrics]
listen = "127.0.0.1:9999"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := changedKeys(running, file)
	next, applied, pending := applyReload(file, running)
	for _, k := range changedKeys(running, next) {
		if needsRestart(k) {
			t.Errorf("%s changed in the running config although it needs a restart", k)
		}
	}
	if got := append(append([]string{}, applied...), pending...); len(got) != len(want) {
		t.Errorf("applied %v + pending %v, want every changed key %v", applied, pending, want)
	}
	for _, k := range []string{"hostname", "paths.state_dir", "smtp.max_recipients", "dns.resolver", "relay.host", "delivery.retry_for", "hook_rules.max_concurrent", "metrics.listen"} {
		if !slices.Contains(pending, k) {
			t.Errorf("%s not reported as needing a restart: %v", k, pending)
		}
	}
	for _, k := range []string{"domains", "catch_all", "trust.trusted_senders", "send.per_hour", "hook_rules.allow_untrusted_for_users", "control.request_timeout"} {
		if !slices.Contains(applied, k) {
			t.Errorf("%s not applied live: %v", k, applied)
		}
	}
}

// TestOneLogLinePerMessage: a message taken over SMTP costs one INFO line
// (where it was stored, from which session), not one per protocol step; a
// session that delivered nothing still gets its line.
func TestOneLogLinePerMessage(t *testing.T) {
	logs := &testproc.Output{}
	td := startDaemonSMTP(t, "", `listen = ["127.0.0.1:0"]`, Options{Resolver: &resolver.Map{}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	addr := td.SMTPAddrs()[0]
	td.ensureMine(t, "alice")
	if err := sendSMTP(t, addr, "someone@sender.test", []string{"alice@example.test"}, "Subject: one line\n\nhello\n"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr) // a probe: greeting, QUIT, nothing delivered
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	r.ReadString('\n')
	fmt.Fprintf(c, "QUIT\r\n")
	io.Copy(io.Discard, r)
	c.Close()
	td.stop()
	var stored, smtpLines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(l, `msg="message stored"`):
			stored = append(stored, l)
		case strings.Contains(l, "part=smtp"):
			smtpLines = append(smtpLines, l)
		}
	}
	if len(stored) != 1 || !strings.Contains(stored[0], "mailbox=alice") || !strings.Contains(stored[0], "remote=127.0.0.1") || !strings.Contains(stored[0], "session=") {
		t.Fatalf("stored lines %q, want one naming the mailbox, session and remote", stored)
	}
	_, session, _ := strings.Cut(stored[0], "session=")
	session, _, _ = strings.Cut(session, " ")
	for _, l := range smtpLines {
		if strings.Contains(l, "session="+session) {
			t.Errorf("the delivering session has another INFO line: %s", l)
		}
	}
	if len(smtpLines) != 1 || !strings.Contains(smtpLines[0], `msg="connection closed"`) || !strings.Contains(smtpLines[0], "messages=0") {
		t.Errorf("SMTP lines %q, want only the probe's connection closed", smtpLines)
	}
}

// Regression: a client that closed its connection left its watch registered
// (and the connection's goroutines alive) until the next event failed to send.
func TestWatchEndsWhenTheClientCloses(t *testing.T) {
	td := startDaemon(t, "")
	td.ensureMine(t, "mine")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, td.socket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Watch(ctx, protocol.WatchArgs{Mailboxes: []string{"mine"}}); err != nil {
		t.Fatal(err)
	}
	if n := td.Watchers(); n != 1 {
		t.Fatalf("%d watchers after the watch was acknowledged, want 1", n)
	}
	c.Close()
	for td.Watchers() != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the watch outlived its connection")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestReloadNamesDeclaredMailboxesNotServed: setup.md has the operator
// declare a mailbox in the config and reload to create it. One the daemon
// cannot serve (its owner is not a user here) was only an ERROR line in the
// log, while `mailctl reload` and `systemctl reload` reported success; the
// reload's report names it and why.
func TestReloadNamesDeclaredMailboxesNotServed(t *testing.T) {
	td := startDaemonWith(t, "", Options{})
	path := td.cfg.File
	orig, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(orig, "\n[[mailboxes]]\nname = \"ops\"\nowner = \"mailctl-no-such-user\"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.Reload(path); err != nil {
		t.Fatal(err)
	}
	var v protocol.VersionInfo
	if err := td.call(t, protocol.VerbVersion, nil, &v); err != nil {
		t.Fatal(err)
	}
	if v.Reload == nil || !v.Reload.OK || len(v.Reload.NotServed) != 1 ||
		!strings.Contains(v.Reload.NotServed[0], `"ops"`) || !strings.Contains(v.Reload.NotServed[0], "mailctl-no-such-user") {
		t.Errorf("the reload's report: %+v, want mailbox ops named as not served, with its owner", v.Reload)
	}
}
