package daemon

import (
	"crypto/tls"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// servedRaw is the certificate a STARTTLS client of addr gets.
func servedRaw(t *testing.T, addr string) []byte {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.StartTLS(&tls.Config{InsecureSkipVerify: true}); err != nil {
		t.Fatal(err)
	}
	st, _ := c.TLSConnectionState()
	c.Quit()
	return st.PeerCertificates[0].Raw
}

// TestReloadPutsTheRenewedCertificateInUse: a reload takes the pair in the
// files into use for the next STARTTLS; a pair that does not match is
// refused, the one in use stays, and the status doctor reads (what a user's
// `mailctl doctor` shows) says the daemon serves another certificate than
// the file's.
func TestReloadPutsTheRenewedCertificateInUse(t *testing.T) {
	ca := testcert.NewCA(t)
	a, b, c := ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test")
	dir := filepath.Join(testusers.SharedDir(t), "tls")
	os.MkdirAll(dir, 0o700)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	put := func(p tls.Certificate, withKey bool) {
		certPEM, keyPEM := testcert.PEM(t, p)
		if withKey {
			if err := os.WriteFile(keyFile+".new", keyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Rename(keyFile+".new", keyFile)
		}
		os.WriteFile(certFile+".new", certPEM, 0o644)
		os.Rename(certFile+".new", certFile)
	}
	put(a, true)
	td := startDaemonSMTP(t, "", "listen = [\"127.0.0.1:0\"]\ntls_cert = \""+certFile+"\"\ntls_key = \""+keyFile+"\"\n", Options{})
	addr := td.SMTPAddrs()[0]
	if string(servedRaw(t, addr)) != string(a.Leaf.Raw) {
		t.Fatal("not serving the first certificate")
	}
	put(b, true)
	if err := td.Reload(td.cfg.File); err != nil {
		t.Fatal(err)
	}
	if string(servedRaw(t, addr)) != string(b.Leaf.Raw) {
		t.Fatal("after the reload: not serving the renewed certificate")
	}

	put(c, false) // c's certificate with b's key
	if err := td.Reload(td.cfg.File); err != nil {
		t.Fatalf("a refused certificate refused the whole reload: %v", err)
	}
	if string(servedRaw(t, addr)) != string(b.Leaf.Raw) {
		t.Fatal("a pair that does not match replaced the one in use")
	}
	var st protocol.Status
	if err := td.call(t, protocol.VerbStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	var differs *protocol.Finding
	for i, f := range st.Findings {
		if f.ID == "tls.served_differs" {
			differs = &st.Findings[i]
		}
	}
	if differs == nil || differs.Severity != "fail" || !strings.Contains(differs.Message, "by the running daemon") {
		t.Fatalf("status findings %+v, want tls.served_differs", st.Findings)
	}
}
