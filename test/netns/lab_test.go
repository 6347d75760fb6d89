package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/testproc"
)

// lab is one private network: a "dns" namespace holding a bridge and the DNS
// server, and one namespace per host, each joined to the bridge by a veth
// pair. Addresses are 10.231.N.x/24 and exist only inside the namespaces.
type lab struct {
	t      *testing.T
	id     string
	subnet string // "10.231.N"
	dnsNS  string
	DNSIP  string
	dir    string

	mu       sync.Mutex
	nextIP   int
	records  []string
	serial   int
	zoneFile string
	dnsCmd   *exec.Cmd
	dnsDone  chan struct{}
}

// nsHost is one namespace with its address.
type nsHost struct {
	Name string // short name, e.g. "a"
	NS   string // namespace name
	IP   string
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ipCmd runs ip with args and fails t on error.
func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// killNS kills every process inside namespace ns: only processes this
// package started live there.
func killNS(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		// The test process itself shows up when one of its threads sits
		// in the namespace (see inNS).
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// newLab creates the dns namespace, its bridge and a running dnstestd.
func newLab(t *testing.T) *lab {
	t.Helper()
	requireLab(t)
	b := make([]byte, 1)
	rand.Read(b)
	// The pid in every name lets a later run tell namespaces of a dead run
	// (removed at start) from those of a run still going.
	l := &lab{t: t, id: fmt.Sprintf("%d-%s", os.Getpid(), randHex(2)), subnet: fmt.Sprintf("10.231.%d", b[0]), nextIP: 10, dir: t.TempDir()}
	l.dnsNS = "mctl-" + l.id + "-dns"
	l.DNSIP = l.subnet + ".1"
	ipCmd(t, "netns", "add", l.dnsNS)
	t.Cleanup(func() {
		killNS(l.dnsNS)
		exec.Command("ip", "netns", "del", l.dnsNS).Run()
	})
	ipCmd(t, "-n", l.dnsNS, "link", "set", "lo", "up")
	// A fixed address: otherwise the bridge takes the lowest address of its
	// ports, changes it when a host joins later, and the hosts' ARP entries
	// for the DNS server point nowhere until they expire.
	ipCmd(t, "-n", l.dnsNS, "link", "add", "br0", "address", "02:00:0a:e7:00:01", "type", "bridge")
	ipCmd(t, "-n", l.dnsNS, "addr", "add", l.DNSIP+"/24", "dev", "br0")
	ipCmd(t, "-n", l.dnsNS, "link", "set", "br0", "up")
	l.zoneFile = filepath.Join(l.dir, "zone.txt")
	l.writeZone()
	l.startDNS()
	return l
}

// startDNS runs dnstestd in the dns namespace and waits until it answers.
func (l *lab) startDNS() {
	t := l.t
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.dnsNS, dnstestdBin, "-listen", l.DNSIP+":53", "-zone", l.zoneFile)
	logs := &testproc.Output{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dnstestd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	l.mu.Lock()
	l.dnsCmd, l.dnsDone = cmd, done
	l.mu.Unlock()
	t.Cleanup(func() { l.stopDNS() })
	l.waitSerial(logs)
}

// stopDNS stops the DNS server (a DNS outage for every host).
func (l *lab) stopDNS() {
	l.mu.Lock()
	cmd, done := l.dnsCmd, l.dnsDone
	l.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// addHost creates a namespace joined to the lab's bridge with the next free
// address.
func (l *lab) addHost(name string) *nsHost {
	t := l.t
	t.Helper()
	l.mu.Lock()
	n := l.nextIP
	l.nextIP++
	l.mu.Unlock()
	h := &nsHost{Name: name, NS: "mctl-" + l.id + "-" + name, IP: fmt.Sprintf("%s.%d", l.subnet, n)}
	ipCmd(t, "netns", "add", h.NS)
	t.Cleanup(func() {
		killNS(h.NS)
		exec.Command("ip", "netns", "del", h.NS).Run()
	})
	peer := "p-" + name
	ipCmd(t, "-n", h.NS, "link", "set", "lo", "up")
	ipCmd(t, "-n", h.NS, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", l.dnsNS)
	ipCmd(t, "-n", l.dnsNS, "link", "set", peer, "master", "br0")
	ipCmd(t, "-n", l.dnsNS, "link", "set", peer, "up")
	ipCmd(t, "-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
	ipCmd(t, "-n", h.NS, "link", "set", "eth0", "up")
	return h
}

// publish adds zone lines ("name TYPE value") and waits until the DNS
// server serves them.
func (l *lab) publish(lines ...string) {
	l.t.Helper()
	l.mu.Lock()
	l.records = append(l.records, lines...)
	l.mu.Unlock()
	l.writeZone()
	l.mu.Lock()
	cmd := l.dnsCmd
	l.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGHUP)
	}
	l.waitSerial(nil)
}

// publishDomain publishes MX, A, SPF and DMARC for a mail domain whose MX
// is ip, plus the DKIM record of each selector/TXT value pair.
func (l *lab) publishDomain(domain, ip string, dkim map[string]string) {
	l.t.Helper()
	lines := []string{
		domain + " MX 10 mx." + domain + ".",
		"mx." + domain + " A " + ip,
		domain + " TXT v=spf1 ip4:" + ip + " -all",
		"_dmarc." + domain + " TXT v=DMARC1; p=reject; adkim=r; aspf=r",
	}
	for sel, v := range dkim {
		lines = append(lines, sel+"._domainkey."+domain+" TXT "+v)
	}
	l.publish(lines...)
}

// writeZone writes the records plus a serial record that tells a reload
// apart from the previous zone.
func (l *lab) writeZone() {
	l.mu.Lock()
	l.serial++
	body := strings.Join(l.records, "\n") + fmt.Sprintf("\nserial.lab TXT %d\n", l.serial)
	l.mu.Unlock()
	if err := os.WriteFile(l.zoneFile+".new", []byte(body), 0o644); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(l.zoneFile+".new", l.zoneFile); err != nil {
		l.t.Fatal(err)
	}
}

// waitSerial waits until the DNS server answers with the current serial.
func (l *lab) waitSerial(logs *testproc.Output) {
	t := l.t
	t.Helper()
	l.mu.Lock()
	want := strconv.Itoa(l.serial)
	l.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got string
		inNS(l.dnsNS, func() error {
			m := new(dns.Msg)
			m.SetQuestion("serial.lab.", dns.TypeTXT)
			c := &dns.Client{Timeout: 300 * time.Millisecond}
			r, _, err := c.Exchange(m, l.DNSIP+":53")
			if err == nil && len(r.Answer) == 1 {
				if txt, ok := r.Answer[0].(*dns.TXT); ok {
					got = strings.Join(txt.Txt, "")
				}
			}
			return err
		})
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			extra := ""
			if logs != nil {
				extra = logs.String()
			}
			t.Fatalf("DNS server does not serve zone serial %s (got %q) %s", want, got, extra)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// init keeps the main goroutine on the main thread, so that inNS never
// joins the main thread to a namespace: a locked goroutine that exits ends
// its thread, but the main thread cannot end and would stay there.
func init() { runtime.LockOSThread() }

// inNS runs f on a thread that has joined namespace ns. Sockets f creates
// belong to that namespace for their whole life, whichever thread later
// reads them; goroutines f starts do not inherit it. The thread is never
// unlocked, so it ends with the goroutine instead of going back to the pool
// in the wrong namespace.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("opening namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("joining namespace %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// dialIn connects to addr from inside namespace ns.
func dialIn(ns, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := inNS(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}

// listenIn listens on addr inside namespace ns.
func listenIn(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNS(ns, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
