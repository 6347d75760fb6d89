package outbound

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/compose"
	"github.com/mailctl/mailctl/daemon/outbound/delivery"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/pycheck"
	"github.com/mailctl/mailctl/protocol"
)

// startSmtpSink runs Postfix's smtp-sink on ip and returns the port and the
// directory it dumps each message into.
func startSmtpSink(t *testing.T, ip string) (int, string) {
	t.Helper()
	bin := "/usr/sbin/smtp-sink"
	if _, err := os.Stat(bin); err != nil {
		t.Skip("smtp-sink not installed (apt install postfix)")
	}
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// smtp-sink drops to nobody when started as root, so its dump directory
	// must be reachable and writable by nobody (t.TempDir's parent is 0700).
	dir, err := os.MkdirTemp("", "smtp-sink-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	args := []string{"-d", dir + "/%M.", net.JoinHostPort(ip, fmt.Sprint(port)), "50"}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "nobody"}, args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting smtp-sink: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("smtp-sink never listened: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return port, dir
}

// sinkMessage waits for the one message smtp-sink dumped and returns it
// without the X- lines smtp-sink puts in front.
func sinkMessage(t *testing.T, dir string) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 1 {
			data, err := os.ReadFile(filepath.Join(dir, ents[0].Name()))
			if err == nil && bytes.Contains(data, []byte("\n\n")) && len(data) > 0 {
				return data
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("smtp-sink dumped %d files", len(ents))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEndToEndToSmtpSink sends through the whole pipeline (compose, sign with
// both keys, store, queue, MX delivery) to Postfix's smtp-sink and checks what
// arrived with independent tools.
func TestEndToEndToSmtpSink(t *testing.T) {
	w := newWorld(t)
	port, dir := startSmtpSink(t, "127.0.0.81")
	w.dm.Set("127.0.0.81:25", net.JoinHostPort("127.0.0.81", fmt.Sprint(port)))
	w.r.SetMX("remote.test", &net.MX{Host: "mx.remote.test", Pref: 10})
	w.r.SetIP("mx.remote.test", "127.0.0.81")
	keys := testKeys(t)
	svc := w.pipeline(t, &Recorder{Store: newMemStore()}, &Service{Keys: func() []*dkim.Key { return keys }, FirstAttemptWait: 10 * time.Second}, queue.Options{})
	subject := "Rapport trimestriel – Grüße 🚀"
	res, err := svc.Send(context.Background(), SendRequest{Mailbox: "bot", FromAddress: "bot@example.com", FromName: "Rapport Bötchen", Policy: defaultPolicy(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: subject, Body: "# Résumé\n\n<script>steal()</script>\n\nSee **attached**.\n",
			Attachments: []protocol.SendAttachment{{Filename: "données 2026.csv", Data: []byte("a,b\n1,2\n")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != queue.StatusDelivered || res.Recipients[0].TLS != delivery.TLSNone {
		t.Fatalf("send result %+v", res)
	}
	got := sinkMessage(t, dir)
	txt := txtRecords("example.com", keys)

	if pycheck.Have(t, "dkim") && pycheck.Have(t, "nacl") {
		bad := bytes.Replace(got, []byte("See **attached**"), []byte("See **attacked**"), 1)
		if bytes.Equal(bad, got) {
			t.Fatal("tampering found nothing to change")
		}
		v := pycheck.VerifyDKIM(t, txt, 2, got, bad)
		if !v[0][0] || !v[0][1] {
			t.Errorf("python3-dkim on the received message: %v, want both signatures valid", v[0])
		}
		if v[1][0] || v[1][1] {
			t.Errorf("python3-dkim accepted a changed body: %v", v[1])
		}
	}
	if rc, reason := opendkimEnv(t, txt); rc == "" {
		t.Log("opendkim-testmsg not run: " + reason)
	} else {
		for _, k := range keys {
			one := onlySignature(got, k.Selector)
			if bytes.Count(bytes.ToLower(one), []byte("dkim-signature:")) != 1 {
				t.Fatalf("could not isolate the %s signature", k.Selector)
			}
			if err := opendkimVerify(t, one, rc); err != nil {
				t.Errorf("opendkim-testmsg, %s signature of the received message: %v", k.Algorithm, err)
			}
			bad := bytes.Replace(one, []byte("See **attached**"), []byte("See **attacked**"), 1)
			if err := opendkimVerify(t, bad, rc); err == nil {
				t.Errorf("opendkim-testmsg accepted a changed body under the %s signature", k.Algorithm)
			}
		}
	}
	p := pycheck.ParseMIME(t, got)
	if p["subject"] != subject {
		t.Errorf("subject decoded as %q", p["subject"])
	}
	if names := p["filenames"].([]any); len(names) != 1 || names[0] != "données 2026.csv" {
		t.Errorf("filename decoded as %v", names)
	}
	if html := strings.ToLower(p["html"].(string)); strings.Contains(html, "<script") || strings.Contains(html, "steal()") {
		t.Errorf("HTML part carries the script:\n%s", html)
	}
}

// dnsServer answers TXT queries from a map over UDP and TCP, enough for
// opendkim's resolver to find test keys.
type dnsServer struct {
	txt map[string]string
}

func (s *dnsServer) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	// Question: labels, then type and class.
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	qend := i + 5
	name := strings.ToLower(strings.Join(labels, "."))
	val, ok := s.txt[name]
	resp := make([]byte, 12, 600)
	copy(resp, q[:2])
	flags := uint16(0x8400) | binary.BigEndian.Uint16(q[2:])&0x0100 // QR, AA, copy RD
	if !ok {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1)
	resp = append(resp, q[12:qend]...)
	if ok && qtype == 16 {
		binary.BigEndian.PutUint16(resp[6:], 1)
		var rdata []byte
		for _, chunk := range dkim.SplitTXT(val) {
			rdata = append(rdata, byte(len(chunk)))
			rdata = append(rdata, chunk...)
		}
		resp = append(resp, 0xc0, 0x0c, 0, 16, 0, 1, 0, 0, 0, 60)
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rdata)))
		resp = append(resp, rdata...)
	}
	return resp
}

func startDNS(t *testing.T, ip string, txt map[string]string) {
	t.Helper()
	s := &dnsServer{txt: txt}
	pc, err := net.ListenPacket("udp", ip+":53")
	if err != nil {
		t.Skipf("cannot listen on %s:53 (needs root): %v", ip, err)
	}
	ln, err := net.Listen("tcp", ip+":53")
	if err != nil {
		pc.Close()
		t.Skipf("cannot listen on %s:53/tcp: %v", ip, err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			resp := s.answer(buf[:n])
			if len(resp) > 512 {
				// Truncated: the resolver retries over TCP.
				resp = append(resp[:12:12], buf[12:n]...)
				binary.BigEndian.PutUint16(resp[2:], binary.BigEndian.Uint16(resp[2:])|0x0200)
				binary.BigEndian.PutUint16(resp[6:], 0)
				binary.BigEndian.PutUint16(resp[10:], 0)
			}
			pc.WriteTo(resp, addr)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				var l [2]byte
				for {
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, q); err != nil {
						return
					}
					resp := s.answer(q)
					c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp))))
					c.Write(resp)
				}
			}()
		}
	}()
}

// opendkimVerify runs opendkim-testmsg on msg in a mount namespace whose
// /etc/resolv.conf points at the test DNS server. It returns nil when the
// message verifies.
func opendkimVerify(t *testing.T, msg []byte, resolvConf string) error {
	t.Helper()
	script := fmt.Sprintf("mount --bind %s /etc/resolv.conf && exec /usr/sbin/opendkim-testmsg", resolvConf)
	cmd := exec.Command("unshare", "--mount", "sh", "-c", script)
	cmd.Stdin = bytes.NewReader(msg)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		return fmt.Errorf("opendkim-testmsg: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// opendkimEnv starts a DNS server publishing txt and returns a resolv.conf
// pointing at it, or "" and why opendkim-testmsg cannot run here.
func opendkimEnv(t *testing.T, txt map[string]string) (string, string) {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/opendkim-testmsg"); err != nil {
		return "", "opendkim-testmsg not installed (apt install opendkim-tools)"
	}
	if os.Geteuid() != 0 {
		return "", "opendkim-testmsg looks keys up in DNS only: the test needs root to serve DNS on port 53 and replace /etc/resolv.conf in a mount namespace"
	}
	if err := exec.Command("unshare", "--mount", "true").Run(); err != nil {
		return "", fmt.Sprintf("cannot create a mount namespace (unshare --mount): %v", err)
	}
	const dnsIP = "127.0.83.53"
	startDNS(t, dnsIP, txt)
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(rc, []byte("nameserver "+dnsIP+"\noptions attempts:1 timeout:2\n"), 0o644)
	return rc, ""
}

// onlySignature keeps the DKIM-Signature field of one selector and drops
// the others; the remaining signature stays valid because signatures do not
// cover each other.
func onlySignature(msg []byte, selector string) []byte {
	end := bytes.Index(msg, []byte("\n\n"))
	if e := bytes.Index(msg, []byte("\r\n\r\n")); e >= 0 && (end < 0 || e < end) {
		end = e
	}
	head, body := msg[:end], msg[end:]
	var res, field []byte
	flush := func() {
		if bytes.HasPrefix(bytes.ToLower(field), []byte("dkim-signature:")) &&
			!bytes.Contains(bytes.Join(bytes.Fields(field), nil), []byte("s="+selector+";")) {
			field = nil
			return
		}
		res = append(res, field...)
		field = nil
	}
	for _, line := range bytes.SplitAfter(head, []byte("\n")) {
		if len(line) > 0 && line[0] != ' ' && line[0] != '\t' {
			flush()
		}
		field = append(field, line...)
	}
	flush()
	return append(res, body...)
}

// TestOpenDKIMVerifiesEachSignature checks the Ed25519 and the RSA signature
// separately (libopendkim reports a message as good when any signature
// passes), then the dual-signed message, then a one-byte change.
func TestOpenDKIMVerifiesEachSignature(t *testing.T) {
	keys := testKeys(t)
	rc, reason := opendkimEnv(t, txtRecords("example.com", keys))
	if rc == "" {
		t.Skip(reason)
	}

	c, err := compose.Build(compose.Input{FromName: "Agent", FromAddress: "agent@example.com", Domain: "example.com", Now: time.Now(),
		Args: protocol.SendArgs{To: []string{"bob@remote.test"}, Subject: "opendkim check ü", Body: "Body with **Markdown**.\n"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		t.Run(k.Algorithm, func(t *testing.T) {
			one, err := dkim.Sign(c.Raw, "example.com", []*dkim.Key{k})
			if err != nil {
				t.Fatal(err)
			}
			if err := opendkimVerify(t, one, rc); err != nil {
				t.Fatalf("%s signature: %v", k.Algorithm, err)
			}
			bad := bytes.Replace(one, []byte("Markdown"), []byte("Markdowm"), 1)
			if err := opendkimVerify(t, bad, rc); err == nil {
				t.Fatalf("%s signature still verifies after a one-byte change", k.Algorithm)
			}
		})
	}
	both, _ := dkim.Sign(c.Raw, "example.com", keys)
	if err := opendkimVerify(t, both, rc); err != nil {
		t.Fatalf("dual-signed message: %v", err)
	}
}
