package netns

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/setup"
	"github.com/mailctl/mailctl/internal/testbin"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// hostOptions shape one mailctl host.
type hostOptions struct {
	Mailboxes      []string // declared mailboxes, all owned by the host's throwaway user
	TrustedSenders []string
	Forwarders     []string // [trust] forwarders
	Resolver       string   // [dns] resolver; default the lab's DNS server
	DNS            string   // extra [dns] lines
	Hooks          []string // raw [[hooks]] tables; {HOME} is the owner's home, {SOCK} the control socket
	Hold           bool     // [send] hold
	SMTP           string   // extra [smtp] lines
	Control        string   // extra [control] lines
	NoPublish      bool     // do not publish DNS records for the domain
	Delivery       string   // extra [delivery] lines
	Extra          string   // more top-level tables, before the mailboxes
	BeforeStart    func(h *mailHost)
	Env            []string // extra environment of mailctl serve
	Domains        []string // more domains the host receives for (their DNS records are the test's)
	Hostname       string   // hostname; default mx.<domain>
	// Listen replaces the SMTP listeners ([ip]:25); an empty list means
	// none (the host is then ready when its control socket answers).
	Listen *[]string
}

// mailHost is one `mailctl serve` in its own namespace, answering for one
// domain on port 25 of its address.
type mailHost struct {
	*nsHost
	t      *testing.T
	lab    *lab
	Domain string
	dir    string
	cfg    string
	Sock   string
	State  string
	Owner  testusers.User
	Logs   *testproc.Output
	env    []string
	noSMTP bool // no SMTP listener to wait for at start

	proc testproc.Proc
}

// newMailHost creates a namespace for domain, a DKIM key and certificate,
// publishes the domain's records, and starts the daemon.
func (l *lab) newMailHost(name, domain string, o hostOptions) *mailHost {
	l.t.Helper()
	return l.newMailHostIn(l.addHost(name), domain, o)
}

// newMailHostIn is newMailHost in an existing namespace.
func (l *lab) newMailHostIn(ns *nsHost, domain string, o hostOptions) *mailHost {
	t := l.t
	t.Helper()
	name := ns.Name
	dir := testusers.SharedDir(t)
	h := &mailHost{nsHost: ns, t: t, lab: l, Domain: domain, dir: dir, cfg: filepath.Join(dir, "config.toml"),
		Sock: filepath.Join(dir, "mailctl.sock"), State: filepath.Join(dir, "state"), Logs: &testproc.Output{}, env: o.Env}
	h.Owner = testusers.Create(t, "mcns")
	dkimDir := filepath.Join(dir, "dkim")
	if err := os.MkdirAll(dkimDir, 0o700); err != nil {
		t.Fatal(err)
	}
	key, err := dkim.GenerateKey(dkimDir, "ns"+name, "ed25519")
	if err != nil {
		t.Fatal(err)
	}
	if !o.NoPublish {
		l.publishDomain(domain, ns.IP, map[string]string{key.Selector: key.TXTValue()})
	}
	cert, keyPath, err := setup.EnsureSelfSigned(filepath.Join(dir, "tls"), "mx."+domain)
	if err != nil {
		t.Fatal(err)
	}
	if o.Resolver == "" {
		o.Resolver = l.DNSIP + ":53"
	}
	if len(o.Mailboxes) == 0 {
		o.Mailboxes = []string{"agent"}
	}
	listen := []string{ns.IP + ":25"}
	if o.Listen != nil {
		listen = *o.Listen
	}
	h.noSMTP = len(listen) == 0
	var b strings.Builder
	fmt.Fprintf(&b, "hostname = %q\ndomains = %s\n\n", cmp.Or(o.Hostname, "mx."+domain), quoteList(append([]string{domain}, o.Domains...)))
	fmt.Fprintf(&b, "[paths]\nstate_dir = %q\nsocket = %q\ndkim_dir = %q\n\n", h.State, h.Sock, dkimDir)
	fmt.Fprintf(&b, "[smtp]\nlisten = %s\ntls_cert = %q\ntls_key = %q\n%s\n", quoteList(listen), cert, keyPath, o.SMTP)
	fmt.Fprintf(&b, "[dns]\nresolver = %q\n%s\n[trust]\ntrusted_senders = %s\n", o.Resolver, o.DNS, quoteList(o.TrustedSenders))
	if len(o.Forwarders) > 0 {
		fmt.Fprintf(&b, "forwarders = %s\n", quoteList(o.Forwarders))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[send]\nper_minute = 10000\nper_hour = 100000\nper_day = 1000000\nhold = %t\n\n", o.Hold)
	fmt.Fprintf(&b, "[delivery]\nconnect_timeout = \"5s\"\ntransaction_timeout = \"30s\"\nfirst_attempt_wait = \"15s\"\n%s\n\n", o.Delivery)
	if o.Control != "" {
		fmt.Fprintf(&b, "[control]\n%s\n\n", o.Control)
	}
	if o.Extra != "" {
		fmt.Fprintf(&b, "%s\n\n", o.Extra)
	}
	for _, m := range o.Mailboxes {
		fmt.Fprintf(&b, "[[mailboxes]]\nname = %q\nowner = %q\n\n", m, h.Owner.Name)
	}
	for _, hk := range o.Hooks {
		fmt.Fprintf(&b, "[[hooks]]\n%s\n\n", strings.NewReplacer("{HOME}", h.Owner.Home, "{SOCK}", h.Sock).Replace(hk))
	}
	if err := os.WriteFile(h.cfg, []byte(b.String()), 0o640); err != nil {
		t.Fatal(err)
	}
	if o.BeforeStart != nil {
		o.BeforeStart(h)
	}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func quoteList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Addr is the host's SMTP address.
func (h *mailHost) Addr() string { return h.IP + ":25" }

// PID is the daemon's process id (`ip netns exec` execs into it).
func (h *mailHost) PID() int { return h.proc.PID() }

// start runs the daemon inside the namespace and waits until SMTP greets
// (or, for a host without SMTP listeners, until its control socket
// answers).
func (h *mailHost) start() {
	t := h.t
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", h.NS, mailctlBin, "serve", "--config", h.cfg)
	cmd.Stdout, cmd.Stderr = h.Logs, h.Logs
	cmd.Env = append(append(os.Environ(), testbin.CoverEnv()...), h.env...)
	if err := h.proc.Start(cmd); err != nil {
		t.Fatalf("starting mailctl serve: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if h.proc.Exited() {
			t.Fatalf("mailctl serve in %s exited at start:\n%s", h.NS, h.Logs)
		}
		if h.noSMTP {
			if h.call(protocol.VerbVersion, nil, nil) == nil {
				return
			}
		} else if c, err := dialIn(h.NS, h.Addr(), time.Second); err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "220 ") {
				if _, err := os.Stat(h.Sock); err == nil {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailctl serve in %s did not greet on %s (or answer on %s) in time:\n%s", h.NS, h.Addr(), h.Sock, h.Logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill9 kills the daemon with SIGKILL and waits until it is gone.
func (h *mailHost) kill9() { h.proc.Kill9() }

// stop ends the daemon with SIGTERM (SIGKILL after a grace period) and
// prints its log when the test failed.
func (h *mailHost) stop() {
	h.proc.Stop(10 * time.Second)
	// A daemon built with -race reports here.
	if strings.Contains(h.Logs.String(), "WARNING: DATA RACE") {
		h.t.Errorf("data race in mailctl serve of %s:\n%s", h.Domain, raceReport(h.Logs.String()))
	}
	// MAILCTL_NETNS_LOGS=DIR keeps every daemon's whole log (CI artifacts).
	if dir := os.Getenv("MAILCTL_NETNS_LOGS"); dir != "" {
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, strings.ReplaceAll(h.t.Name(), "/", "_")+"-"+h.Domain+".log"), []byte(h.Logs.String()), 0o644)
	}
	if h.t.Failed() {
		h.t.Logf("mailctl serve log of %s (%s):\n%s", h.Domain, h.NS, tail(h.Logs.String(), 6000))
	}
}

// raceReport cuts the first race report out of a daemon log.
func raceReport(log string) string {
	i := strings.Index(log, "WARNING: DATA RACE")
	if i < 0 {
		return ""
	}
	r := log[i:]
	if j := strings.Index(r, "=================="); j > 0 {
		r = r[:j]
	}
	return clip(r, 8000)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// call makes one control-socket request as root.
func (h *mailHost) call(verb string, args, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, h.Sock)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, verb, args, out)
}

// send sends a message over the control socket and fails t on a protocol
// error.
func (h *mailHost) send(a protocol.SendArgs) protocol.SendResult {
	h.t.Helper()
	var res protocol.SendResult
	if err := h.call(protocol.VerbSend, a, &res); err != nil {
		h.t.Fatalf("send from %s: %v", h.Domain, err)
	}
	return res
}

// stored is one message as the daemon left it on disk.
type stored struct {
	ID   string
	Meta *store.Message
	Body string
}

// folder reads every message of a mailbox folder, oldest first.
func (h *mailHost) folder(mailbox, folder string) []stored {
	h.t.Helper()
	dir := filepath.Join(h.State, "mailboxes", mailbox, folder)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []stored
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".md")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		md, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // moved or rewritten meanwhile
		}
		m, body, err := store.Parse(md)
		if err != nil {
			h.t.Errorf("%s/%s does not parse: %v", dir, e.Name(), err)
			continue
		}
		out = append(out, stored{ID: id, Meta: m, Body: body})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// byMessageID waits for a message with Message-ID mid in mailbox's folder.
func (h *mailHost) byMessageID(mailbox, folder, mid string, timeout time.Duration) stored {
	h.t.Helper()
	var found *stored
	waitFor(timeout, func() bool {
		for _, m := range h.folder(mailbox, folder) {
			if strings.Trim(m.Meta.MessageID, "<>") == strings.Trim(mid, "<>") {
				found = &m
				return true
			}
		}
		return false
	})
	if found == nil {
		h.t.Fatalf("no message with Message-ID %s in %s/%s on %s after %v; log:\n%s", mid, mailbox, folder, h.Domain, timeout, tail(h.Logs.String(), 6000))
	}
	return *found
}

// sentCopy waits until the sent copy id reaches a delivery status other than
// pending and returns it.
func (h *mailHost) sentCopy(mailbox, id string, want string, timeout time.Duration) stored {
	h.t.Helper()
	var got stored
	ok := waitFor(timeout, func() bool {
		for _, m := range h.folder(mailbox, "sent") {
			if m.ID == id {
				got = m
				return m.Meta.DeliveryStatus == want
			}
		}
		return false
	})
	if !ok {
		st := "<missing>"
		if got.Meta != nil {
			st = got.Meta.DeliveryStatus
		}
		h.t.Fatalf("sent copy %s on %s has delivery_status %s, want %s", id, h.Domain, st, want)
	}
	return got
}

// vmRSS reads the daemon's resident set size in KiB.
func (h *mailHost) vmRSS() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.PID()))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return -1
}

// threadsAndFDs counts the daemon's OS threads and open file descriptors.
func (h *mailHost) threadsAndFDs() (threads, fds int) {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", h.PID()))
	fdEnts, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", h.PID()))
	return len(ents), len(fdEnts)
}
