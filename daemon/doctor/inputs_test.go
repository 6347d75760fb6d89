package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInputsOthersCanChangeAreNamed: a certificate authority the daemon
// verifies MX hosts by, kept in a folder anyone may write in, lets anyone
// have the daemon trust a CA of theirs. doctor names the folder; once only
// root can change it, nothing is said.
func TestInputsOthersCanChangeAreNamed(t *testing.T) {
	in := newInstall(t)
	pem, err := os.ReadFile(in.cfg.SMTP.TLSCert)
	if err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(open, "ca.pem")
	if err := os.WriteFile(ca, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	appendFile(t, in.cfg.File, fmt.Sprintf("\n[delivery]\nca_file = %q\n", ca))

	changeable := func() []string {
		var out []string
		for _, x := range in.check(t) {
			if x.ID == "input.changeable" {
				out = append(out, x.Severity+" "+x.Message)
			}
		}
		return out
	}
	got := changeable()
	if len(got) != 1 || !strings.HasPrefix(got[0], Warn+" delivery.ca_file: "+ca+" is reached through "+open+", which has mode 0777") {
		t.Errorf("a CA in a folder anyone writes in: %q", got)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ca, 0o666); err != nil {
		t.Fatal(err)
	}
	if got := changeable(); len(got) != 1 || !strings.Contains(got[0], ca+" has mode 0666") {
		t.Errorf("a CA file anyone writes: %q", got)
	}
	if err := os.Chmod(ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := changeable(); len(got) != 0 {
		t.Errorf("a CA only its owner can change: %q", got)
	}
}
