package certs

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testcert"
	"github.com/mailctl/mailctl/internal/testproc"
)

// files is a certificate and key pair on disk, replaced as certbot's deploy
// hook does: each file renamed into place.
type files struct {
	dir, cert, key string
}

func newFiles(t *testing.T) *files {
	dir := t.TempDir()
	return &files{dir: dir, cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem")}
}

func pemOf(t *testing.T, c tls.Certificate) (certPEM, keyPEM []byte) { return testcert.PEM(t, c) }

// put writes what is given (nil: leaves that file) by rename.
func (f *files) put(t *testing.T, certPEM, keyPEM []byte) {
	t.Helper()
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.key, keyPEM, 0o600}, {f.cert, certPEM, 0o644}} {
		if w.data == nil {
			continue
		}
		tmp := w.path + ".new"
		if err := os.WriteFile(tmp, w.data, w.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, w.path); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *files) putPair(t *testing.T, c tls.Certificate) {
	t.Helper()
	cp, kp := pemOf(t, c)
	f.put(t, cp, kp)
}

// server serves TLS with the holder until the test ends; every accepted
// connection echoes lines.
func server(t *testing.T, h *Holder) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: h.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// served connects and returns the certificate the server presented and the
// open connection.
func served(t *testing.T, addr string) (*x509.Certificate, *tls.Conn) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.ConnectionState().PeerCertificates[0], c
}

func echo(t *testing.T, c *tls.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatalf("an open connection broke: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("an open connection broke: %q %v", line, err)
	}
}

// TestRenewedPairInUseAtTheNextHandshake: files replaced (no reload) are
// what the next handshake gets; a connection made before keeps working.
func TestRenewedPairInUseAtTheNextHandshake(t *testing.T) {
	ca := testcert.NewCA(t)
	a, b := ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test")
	f := newFiles(t)
	f.putPair(t, a)
	var logs testproc.Output
	h, err := NewHolder(f.cert, f.key, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := server(t, h)
	got, before := served(t, addr)
	if !bytes.Equal(got.Raw, a.Leaf.Raw) {
		t.Fatal("the first handshake did not get the loaded pair")
	}
	f.putPair(t, b)
	if got, _ := served(t, addr); !bytes.Equal(got.Raw, b.Leaf.Raw) {
		t.Fatalf("after renewal the next handshake got %s, want the new %s", Fingerprint(got), Fingerprint(b.Leaf))
	}
	echo(t, before)
	if n := strings.Count(logs.String(), "TLS certificate now in use"); n != 1 {
		t.Errorf("%d lines say the new certificate is in use, want 1:\n%s", n, logs.String())
	}
	// Unchanged files: no load, no line.
	served(t, addr)
	if n := strings.Count(logs.String(), "TLS certificate now in use"); n != 1 {
		t.Errorf("an unchanged pair was loaded again")
	}
}

// TestBadNewPairRefusedOldStays: a certificate that does not match the key,
// a key others can read, a missing key and an expired certificate are each
// refused with one log line, however many handshakes follow; the pair in
// use stays until a good one arrives.
func TestBadNewPairRefusedOldStays(t *testing.T) {
	ca := testcert.NewCA(t)
	a, b, c := ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test")
	aCert, _ := pemOf(t, a)
	bCert, bKey := pemOf(t, b)
	now := time.Now()
	f := newFiles(t)
	f.putPair(t, a)
	var logs testproc.Output
	h, err := NewHolder(f.cert, f.key, slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	addr := server(t, h)
	_, open := served(t, addr)
	refusals := 0
	for _, bad := range []struct {
		name string
		make func()
		want string
	}{
		{"certificate of another key", func() { f.put(t, bCert, nil) }, "private key does not match public key"},
		{"key others can read", func() { f.put(t, nil, bKey); os.Chmod(f.key, 0o644) }, "chmod 600"},
		{"key missing", func() { os.Remove(f.key) }, "no such file"},
		{"expired", func() { f.putPair(t, c); now = c.Leaf.NotAfter.Add(time.Minute) }, "expired on"},
	} {
		bad.make()
		for range 3 {
			if got, _ := served(t, addr); !bytes.Equal(got.Raw, a.Leaf.Raw) {
				t.Fatalf("%s: served %s, want the pair in use", bad.name, Fingerprint(got))
			}
		}
		refusals++
		if n := strings.Count(logs.String(), "new TLS certificate refused"); n != refusals || !strings.Contains(logs.String(), bad.want) {
			t.Fatalf("%s: %d refusal lines (want %d) saying %q:\n%s", bad.name, n, refusals, bad.want, logs.String())
		}
		if err := h.Reload(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("%s: reload: %v, want a refusal saying %q", bad.name, err, bad.want)
		}
		refusals++ // a reload tries again and says so
	}
	echo(t, open)
	now = time.Now()
	f.put(t, aCert, nil) // what was there: nothing new to use
	f.putPair(t, b)
	if got, _ := served(t, addr); !bytes.Equal(got.Raw, b.Leaf.Raw) {
		t.Fatal("a good pair after refused ones was not taken")
	}
}

// TestReloadReadsTheFilesAgain: a reload loads the pair even when nothing
// about the files' stamps changed (a file system with coarse times).
func TestReloadReadsTheFilesAgain(t *testing.T) {
	ca := testcert.NewCA(t)
	a, b := ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test")
	f := newFiles(t)
	f.putPair(t, a)
	h, err := NewHolder(f.cert, f.key, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.putPair(t, b)
	h.seen.Store(new(h.stamp())) // as if the change had not moved the stamps
	if got, _ := h.GetCertificate(nil); !bytes.Equal(got.Leaf.Raw, a.Leaf.Raw) {
		t.Fatal("the handshake path read files whose stamps did not move")
	}
	if err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Current().Leaf.Raw, b.Leaf.Raw) {
		t.Fatal("a reload did not put the new pair into use")
	}
}

func TestNewHolderRefusesABadPair(t *testing.T) {
	ca := testcert.NewCA(t)
	a, b := ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test")
	_, aKey := pemOf(t, a)
	bCert, _ := pemOf(t, b)
	f := newFiles(t)
	f.put(t, bCert, aKey)
	if _, err := NewHolder(f.cert, f.key, nil, nil); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatched pair: %v", err)
	}
	// A link only root (here: the test's user) could have made is followed,
	// as certbot's are: the key it leads to is read, and does not match.
	link := filepath.Join(f.dir, "privkey.pem")
	os.Symlink(f.key, link)
	if _, err := NewHolder(f.cert, link, nil, nil); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("key through a trusted link: %v", err)
	}
	// One through a directory anyone can write in is not.
	open := filepath.Join(f.dir, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	openLink := filepath.Join(open, "privkey.pem")
	os.Symlink(f.key, openLink)
	if _, err := NewHolder(f.cert, openLink, nil, nil); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("key through a link others could replace: %v", err)
	}
}

// TestPairRefusedByAClockAheadIsTakenOnceTheClockIsRight: a renewed pair
// arrives while the clock is a year ahead, which judges it expired, and it
// is refused. Once the clock is stepped back it is valid: the next
// handshake takes it, rather than serve the old pair until the files
// change again (the next renewal, after the old one has truly expired).
// While the clock is wrong, handshakes neither load it again nor log.
func TestPairRefusedByAClockAheadIsTakenOnceTheClockIsRight(t *testing.T) {
	ca := testcert.NewCA(t)
	a, b := ca.Issue(t, "mx.example.test"), ca.Issue(t, "mx.example.test")
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	step := func(to time.Time) { mu.Lock(); defer mu.Unlock(); now = to }
	f := newFiles(t)
	f.putPair(t, a)
	var logs testproc.Output
	h, err := NewHolder(f.cert, f.key, slog.New(slog.NewTextHandler(&logs, nil)), clock)
	if err != nil {
		t.Fatal(err)
	}
	addr := server(t, h)
	step(b.Leaf.NotAfter.AddDate(1, 0, 0)) // a year past the new pair's end
	f.putPair(t, b)
	for range 3 {
		if got, _ := served(t, addr); !bytes.Equal(got.Raw, a.Leaf.Raw) {
			t.Fatalf("with the clock ahead: served %s, want the pair in use", Fingerprint(got))
		}
	}
	if n := strings.Count(logs.String(), "new TLS certificate refused"); n != 1 {
		t.Fatalf("%d refusal lines with the clock ahead, want 1:\n%s", n, logs.String())
	}
	step(time.Now())
	if got, _ := served(t, addr); !bytes.Equal(got.Raw, b.Leaf.Raw) {
		t.Fatalf("with the clock right again: served %s, want the renewed %s", Fingerprint(got), Fingerprint(b.Leaf))
	}
}
