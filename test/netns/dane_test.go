package netns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/protocol"
)

// requireTools skips t when a program it needs is not installed.
func requireTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s is not installed (bash .ci/install-deps installs unbound and ldnsutils)", n)
		}
	}
}

func spkiSHA256(c *x509.Certificate) string {
	h := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(h[:])
}

// signedZone writes zone dane.test with the records given, makes a KSK and
// a ZSK with ldns-keygen, signs it with ldns-signzone, and returns the
// signed file and the trust anchor (the KSK's DS record file).
func signedZone(t *testing.T, dir string, records []string) (signed, anchor string) {
	t.Helper()
	zone := filepath.Join(dir, "dane.test.zone")
	body := "$ORIGIN dane.test.\n$TTL 60\n@ IN SOA ns.dane.test. hostmaster.dane.test. 1 3600 600 86400 60\n@ IN NS ns.dane.test.\n" +
		strings.Join(records, "\n") + "\n"
	if err := os.WriteFile(zone, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	keygen := func(args ...string) string {
		cmd := exec.Command("ldns-keygen", append([]string{"-a", "ECDSAP256SHA256"}, append(args, "dane.test")...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ldns-keygen: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	ksk, zsk := keygen("-k"), keygen()
	cmd := exec.Command("ldns-signzone", zone, zsk, ksk)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ldns-signzone: %v: %s", err, out)
	}
	return zone + ".signed", filepath.Join(dir, ksk+".ds")
}

// startUnbound runs two unbounds on h: an authoritative one on port 5353
// serving the signed zone dane.test, and on port 53 a validating resolver
// that asks it for dane.test (validating against anchor) and the lab's DNS
// server for everything else (unsigned).
func (l *lab) startUnbound(h *nsHost, dir, signed, anchor string) {
	t := l.t
	t.Helper()
	common := fmt.Sprintf(`server:
  interface: %s
  port: %%d
  do-daemonize: no
  username: ""
  chroot: ""
  directory: %q
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 1
  access-control: 10.0.0.0/8 allow
  local-zone: "test." nodefault
`, h.IP, dir)
	auth := fmt.Sprintf(common, 5353) + fmt.Sprintf(`auth-zone:
  name: "dane.test."
  zonefile: %q
  for-downstream: yes
  for-upstream: no
`, signed)
	validating := fmt.Sprintf(common, 53) + fmt.Sprintf(`  trust-anchor-file: %q
  val-log-level: 2
  cache-max-ttl: 5
  cache-max-negative-ttl: 1
forward-zone:
  name: "dane.test."
  forward-addr: %s@5353
forward-zone:
  name: "."
  forward-addr: %s@53
`, anchor, h.IP, l.DNSIP)
	for _, c := range []struct{ name, body string }{{"auth", auth}, {"validating", validating}} {
		conf := filepath.Join(dir, "unbound-"+c.name+".conf")
		if err := os.WriteFile(conf, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("unbound-checkconf", conf).CombinedOutput(); err != nil {
			t.Fatalf("unbound-checkconf %s: %v: %s", c.name, err, out)
		}
		cmd := exec.Command("ip", "netns", "exec", h.NS, "unbound", "-d", "-c", conf)
		logs := &testproc.Output{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting unbound: %v", err)
		}
		name := c.name
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("unbound (%s) log:\n%s", name, tail(logs.String(), 4000))
			}
		})
	}
	// Ready when the resolver answers a validated question.
	ok := waitFor(15*time.Second, func() bool {
		var ad bool
		inNS(h.NS, func() error {
			m := new(dns.Msg)
			m.SetQuestion("dane.test.", dns.TypeSOA)
			m.SetEdns0(1232, true)
			r, _, err := (&dns.Client{Timeout: 500 * time.Millisecond}).Exchange(m, h.IP+":53")
			ad = err == nil && r.AuthenticatedData
			return err
		})
		return ad
	})
	if !ok {
		t.Fatalf("unbound does not answer dane.test validated")
	}
}

// TestOutboundDANE: a.test's resolver is a validating unbound, and dane.test
// is a DNSSEC-signed zone (ldns-signzone) unbound validates; nothing stubs
// the AD bit. Delivery to an MX whose certificate matches its TLSA record
// (DANE-EE 3 1 1, and DANE-TA 2 1 1 through the test CA with the MX name
// checked) is recorded "dane"; a TLSA record of another key defers; so does
// a TLSA record an attacker changed after signing, which unbound refuses.
// doctor says the resolver validates.
func TestOutboundDANE(t *testing.T) {
	requireLab(t)
	requireTools(t, "unbound", "unbound-checkconf", "ldns-keygen", "ldns-signzone")
	start := time.Now()
	l := newLab(t)
	ca := testcert.NewCA(t)
	ub := l.addHost("ub")
	bns := l.addHost("b")
	certPEM, keyPEM, leaf := ca.IssuePEM(t, "mx.ok.dane.test", "mxta.dane.test", "mxbad.dane.test", "mxforged.dane.test")
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherSPKI, _ := x509.MarshalPKIXPublicKey(&otherKey.PublicKey)
	other := sha256.Sum256(otherSPKI)
	records := []string{"ns IN A " + ub.IP}
	for _, d := range []struct{ label, mx, tlsa string }{
		{"ok", "mx.ok", "3 1 1 " + spkiSHA256(leaf)},
		{"ta", "mxta", "2 1 1 " + spkiSHA256(ca.Cert)},
		{"bad", "mxbad", "3 1 1 " + hex.EncodeToString(other[:])},
		{"forged", "mxforged", "3 1 1 " + hex.EncodeToString(other[:])},
	} {
		records = append(records, d.label+" IN MX 10 "+d.mx+".dane.test.", d.mx+" IN A "+bns.IP, "_25._tcp."+d.mx+" IN TLSA "+d.tlsa)
	}
	dir := testDir(t)
	signed, anchor := signedZone(t, dir, records)
	// The attacker's change: forged's TLSA record now matches the MX, but
	// its signature was made over the old one.
	zone, _ := os.ReadFile(signed)
	forged := strings.Replace(string(zone), "_25._tcp.mxforged.dane.test.\t60\tIN\tTLSA\t3 1 1 "+hex.EncodeToString(other[:]),
		"_25._tcp.mxforged.dane.test.\t60\tIN\tTLSA\t3 1 1 "+spkiSHA256(leaf), 1)
	if forged == string(zone) {
		t.Fatalf("the forged record was not found in the signed zone:\n%s", zone)
	}
	os.WriteFile(signed, []byte(forged), 0o644)
	l.startUnbound(ub, dir, signed, anchor)

	b := l.newMailHostIn(bns, "ok.dane.test", hostOptions{NoPublish: true, Domains: []string{"ta.dane.test", "bad.dane.test", "forged.dane.test"},
		BeforeStart: func(h *mailHost) {
			os.WriteFile(filepath.Join(h.dir, "tls", "cert.pem"), certPEM, 0o644)
			os.WriteFile(filepath.Join(h.dir, "tls", "key.pem"), keyPEM, 0o600)
		}})
	a := l.newMailHost("a", "a.test", hostOptions{Mailboxes: []string{"boss"}, Resolver: ub.IP + ":53", DNS: `dnssec_probe = "dane.test"`})
	send := func(to string) protocol.SendResult {
		return a.send(protocol.SendArgs{FromMailbox: "boss", To: []string{to}, Subject: "to " + to, Body: "dane check", WaitMS: 20000})
	}
	var got []string
	for _, to := range []string{"agent@ok.dane.test", "agent@ta.dane.test"} {
		r := send(to)
		if r.Status != "delivered" || r.Recipients[0].TLS != "dane" {
			t.Errorf("%s: %s %+v, want delivered under DANE", to, r.Status, r.Recipients)
			continue
		}
		b.byMessageID("agent", "inbox", r.MessageID, 20*time.Second)
		if sc := a.sentCopy("boss", r.ID, "delivered", 10*time.Second); sc.Meta.DeliveryDetails[0].TLS != "dane" {
			t.Errorf("%s: sent copy tls %q, want dane", to, sc.Meta.DeliveryDetails[0].TLS)
		}
		got = append(got, to+" dane")
	}
	for _, tc := range []struct{ to, detail string }{{"agent@bad.dane.test", "TLSA"}, {"agent@forged.dane.test", "TLSA records of mxforged.dane.test could not be looked up"}} {
		r := send(tc.to)
		if r.Status != "deferred" || !strings.Contains(r.Recipients[0].Detail, tc.detail) {
			t.Errorf("%s: %s %+v, want deferred (%s)", tc.to, r.Status, r.Recipients, tc.detail)
		}
		a.call(protocol.VerbQueueDrop, protocol.QueueIDArgs{ID: "boss." + r.ID}, nil)
		got = append(got, tc.to+" deferred")
	}
	if n := len(b.folder("agent", "inbox")); n != 2 {
		t.Errorf("b stored %d messages, want the two DANE-verified ones", n)
	}
	var st protocol.Status
	if err := a.call(protocol.VerbStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	dnssec := ""
	for _, f := range st.Findings {
		if f.ID == "dns.dnssec" {
			dnssec = f.Severity + ": " + f.Message
		}
	}
	if !strings.HasPrefix(dnssec, "ok: the resolver validates DNSSEC") {
		t.Errorf("doctor's dns.dnssec finding: %q, want ok", dnssec)
	}
	summary(t, "dane", "%s; doctor: %q (%s)", strings.Join(got, ", "), dnssec, time.Since(start).Round(time.Second))
}
