package smtpin

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"
)

// probeSession reports what rawData makes of go-smtp's DATA reader.
type probeSession struct{ got chan string }

func (probeSession) AuthPlain(string, string) error       { return nil }
func (probeSession) Mail(string, *smtp.MailOptions) error { return nil }
func (probeSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (probeSession) Reset()                               {}
func (probeSession) Logout() error                        { return nil }
func (p probeSession) Data(r io.Reader) error {
	raw, done := rawData(r)
	defer done()
	if d, ok := raw.(*dotReader); !ok || d.maxLine == 0 {
		p.got <- "not engaged"
		return nil
	}
	b, err := io.ReadAll(raw)
	if err != nil {
		p.got <- "error: " + err.Error()
		return nil
	}
	p.got <- string(b)
	return nil
}

// TestGoSMTPDataReaderLayout fails when go-smtp's DATA reader no longer has
// the layout rawData relies on (after an upgrade): then re-check whether
// go-smtp still drops the CR of "<CRLF>.<CR>x" and adapt or remove
// dotreader.go. It also checks that the session resumes right after the
// end-of-data line, which go-smtp's drain must not read past.
func TestGoSMTPDataReaderLayout(t *testing.T) {
	got := make(chan string, 2)
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return probeSession{got}, nil }))
	srv.Domain = "probe.test"
	srv.AllowInsecureAuth = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	expect := func(prefix string) {
		t.Helper()
		line, err := r.ReadString('\n')
		for err == nil && len(line) > 3 && line[3] == '-' {
			line, err = r.ReadString('\n')
		}
		if err != nil || !strings.HasPrefix(line, prefix) {
			t.Fatalf("got %q (%v), want %s", line, err, prefix)
		}
	}
	expect("220 ")
	for _, cmd := range []string{"EHLO c.test", "MAIL FROM:<a@b.test>", "RCPT TO:<c@d.test>"} {
		c.Write([]byte(cmd + "\r\n"))
		expect("250 ")
	}
	c.Write([]byte("DATA\r\n"))
	expect("354 ")
	c.Write([]byte("Subject: x\r\n\r\n..stuffed\r\n.\rx\r\n.\r\nNOOP\r\n"))
	if body := <-got; body != "Subject: x\r\n\r\n.stuffed\r\n\rx\r\n" {
		t.Fatalf("DATA as read through rawData: %q", body)
	}
	expect("250 ")
	expect("250 ") // the NOOP right after the end of data
}

// TestCutDataStaysFramed: a message cut at the size limit right before
// ".<CRLF>" in the middle of a line. go-smtp drains the rest of the DATA
// from where our reader stopped, mid-line, so that dot does not end the
// data and the bytes after it are never taken for commands.
func TestCutDataStaysFramed(t *testing.T) {
	const max = 1000
	ts := startServer(t, Limits{MaxMessageBytes: max}, nil, false)
	c := dialRaw(t, "tcp", ts.addr)
	c.hello()
	c.pipelineEnvelope()
	prefix := "Subject: big\r\n\r\n"
	smuggled := "MAIL FROM:<evil@attacker.example>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\nSubject: smuggled\r\n\r\nx\r\n.\r\n"
	// The DATA really ends with the smuggled text's own end-of-data line.
	c.send(prefix + strings.Repeat("a", max+1-len(prefix)) + ".\r\n" + smuggled)
	c.expect("552 ")
	c.pipelineEnvelope()
	c.send("Subject: clean\r\n\r\nclean\r\n.\r\n")
	c.expect("250 ")
	for _, d := range ts.be.got() {
		if d.env.MailFrom != "alice@sender.example" {
			t.Errorf("smuggled envelope delivered: %+v", d.env)
		}
	}
	if n := len(ts.be.got()); n != 1 {
		t.Errorf("%d deliveries, want the clean message only", n)
	}
}

// unstuffRef is the unstuffing dotReader does, written out over a whole
// slice, byte by byte: the reference the bulk reader must match. It
// returns the data, the state at the end, and whether the end-of-data line
// was read.
func unstuffRef(in []byte) ([]byte, int, bool) {
	var out []byte
	state := dotBeginLine
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch state {
		case dotBeginLine:
			switch c {
			case '.':
				state = dotDot
				continue
			case '\r':
				state = dotCR
			default:
				state = dotData
			}
		case dotDot:
			if c == '\r' {
				state = dotDotCR
				continue
			}
			state = dotData
		case dotDotCR:
			if c == '\n' {
				return out, dotEOF, true
			}
			out = append(out, '\r') // the CR go-smtp would drop
			state = dotCR
			i-- // c again, after the CR
			continue
		case dotCR:
			if c == '\n' {
				state = dotBeginLine
			} else if c != '\r' {
				state = dotData
			}
		case dotData:
			if c == '\r' {
				state = dotCR
			}
		}
		out = append(out, c)
	}
	return out, state, false
}

// FuzzDotReader: reading DATA in bulk gives the same bytes, the same end
// and the same state as deciding every byte, whatever the buffer sizes.
func FuzzDotReader(f *testing.F) {
	f.Add([]byte("Subject: x\r\n\r\n..leading dot\r\n.\rbare\r\nend\r\n.\r\nafter"), 7, 16)
	f.Add([]byte("a\r\n.\r\n"), 1, 16)
	f.Add([]byte("line\nbare lf\r\r\n.\r\n"), 3, 16)
	f.Add([]byte("no end of data\r\n"), 64, 16)
	f.Fuzz(func(t *testing.T, in []byte, chunk, bufSize int) {
		if chunk < 1 || chunk > 4096 || bufSize < 16 || bufSize > 4096 {
			t.Skip()
		}
		want, wantState, ended := unstuffRef(in)
		d := &dotReader{br: bufio.NewReaderSize(bytes.NewReader(in), bufSize), goState: new(int)}
		var got []byte
		buf := make([]byte, chunk)
		var err error
		for {
			var k int
			k, err = d.Read(buf)
			got = append(got, buf[:k]...)
			if err != nil {
				break
			}
		}
		if err == io.EOF {
			err = nil
		}
		if !bytes.Equal(got, want) || d.state != wantState || (err == nil) != ended || *d.goState != d.state {
			t.Fatalf("bulk read %q (state %d, %v), byte by byte %q (state %d, ended %v)", got, d.state, err, want, wantState, ended)
		}
	})
}
