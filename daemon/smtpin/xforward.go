package smtpin

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Forwarded is what a front MTA said, with Postfix's XFORWARD command,
// about the client it took the message from: its address (for SPF), its
// name and its HELO.
type Forwarded struct {
	Addr net.IP
	Name string
	Helo string
}

// XFORWARD (https://www.postfix.org/XFORWARD_README.html) is not a
// command go-smtp knows, and go-smtp has no way to add one. On an LMTP
// connection from a uid allowed to forward, the connection itself speaks
// it: it advertises XFORWARD after LHLO, takes each XFORWARD line out of
// the stream and hands go-smtp a NOOP in its place, so that the reply
// comes in order with the other commands; when go-smtp's NOOP reply goes
// out, the attributes are applied (or refused) and the reply rewritten.
// Nothing of this exists on SMTP connections or for other local users: an
// XFORWARD there is an unknown command, and no client can claim another
// client's address.
type xforward struct {
	mu      sync.Mutex
	line    []byte         // the start of a command line not yet complete
	out     []byte         // command bytes ready for go-smtp
	queue   []*xforwardCmd // one per NOOP handed to go-smtp, in order; nil for the client's own
	pending *Forwarded     // given for the next transaction
	data    bool           // message data is flowing: pass it untouched
	inTx    bool           // a mail transaction is open (set by the session)
	chunk   int64          // bytes of a BDAT chunk still to pass untouched
	maxLine int
}

type xforwardCmd struct {
	attrs map[string]string
	err   string // the reply when the command is malformed
}

const (
	maxXForwardValue = 255
	xforwardCapLine  = "250-XFORWARD NAME ADDR PROTO HELO\r\n"
	noopReply        = "250 2.0.0 I have successfully done nothing\r\n"
)

// peerUID reads the uid of a Unix-socket peer from the kernel.
func peerUID(c net.Conn) (uint32, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return cred.Uid, true
}

// read fills b with command bytes from conn, XFORWARD lines replaced, or
// with message data as it comes.
func (x *xforward) read(conn net.Conn, b []byte) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(x.out) == 0 {
		if x.data && len(x.line) == 0 {
			x.mu.Unlock()
			n, err := conn.Read(b)
			x.mu.Lock()
			return n, err
		}
		buf := make([]byte, max(len(b), 4096))
		x.mu.Unlock()
		n, err := conn.Read(buf)
		x.mu.Lock()
		x.line = append(x.line, buf[:n]...)
		x.split()
		if len(x.out) == 0 && err != nil {
			// Hand over what is left so that go-smtp sees the error in place.
			x.out, x.line = append(x.out, x.line...), nil
			if len(x.out) == 0 {
				return 0, err
			}
		}
	}
	n := copy(b, x.out)
	x.out = x.out[n:]
	return n, nil
}

// split moves complete lines from line to out, replacing XFORWARD lines;
// a line past the length limit goes on whole for go-smtp to refuse.
func (x *xforward) split() {
	for {
		if x.data {
			x.out, x.line = append(x.out, x.line...), x.line[:0]
			return
		}
		if x.chunk > 0 {
			n := int(min(x.chunk, int64(len(x.line))))
			x.out, x.line, x.chunk = append(x.out, x.line[:n]...), x.line[n:], x.chunk-int64(n)
			if len(x.line) == 0 {
				return
			}
			continue
		}
		i := bytes.IndexByte(x.line, '\n')
		if i < 0 {
			if len(x.line) > x.maxLine {
				x.out, x.line = append(x.out, x.line...), x.line[:0]
			}
			return
		}
		line := x.line[:i+1]
		verb, rest, _ := strings.Cut(strings.TrimRight(string(line), "\r\n"), " ")
		switch strings.ToUpper(verb) {
		case "XFORWARD":
			x.queue = append(x.queue, parseXForward(rest))
			line = []byte("NOOP\r\n")
		case "NOOP":
			x.queue = append(x.queue, nil)
		case "BDAT":
			// The chunk that follows is message data, never commands.
			var size int64
			if _, err := fmt.Sscan(rest, &size); err == nil && size > 0 {
				x.chunk = size
			}
		}
		x.out = append(x.out, line...)
		x.line = x.line[i+1:]
	}
}

// parseXForward reads "attr=value ..." (values in xtext, RFC 3461).
func parseXForward(args string) *xforwardCmd {
	cmd := &xforwardCmd{attrs: map[string]string{}}
	fields := strings.Fields(args)
	if len(fields) == 0 {
		return &xforwardCmd{err: "501 5.5.4 XFORWARD needs attribute=value pairs\r\n"}
	}
	for _, f := range fields {
		name, value, ok := strings.Cut(f, "=")
		name = strings.ToUpper(name)
		v, decoded := xtextDecode(value)
		switch {
		case !ok || !decoded || len(v) > maxXForwardValue:
			return &xforwardCmd{err: "501 5.5.4 Bad XFORWARD attribute syntax\r\n"}
		case name != "NAME" && name != "ADDR" && name != "PORT" && name != "PROTO" && name != "HELO" && name != "IDENT" && name != "SOURCE":
			return &xforwardCmd{err: fmt.Sprintf("501 5.5.4 Unknown XFORWARD attribute %.20s\r\n", safeHelo(name))}
		}
		if v == "[UNAVAILABLE]" || v == "[TEMPUNAVAIL]" {
			v = ""
		}
		if name == "ADDR" && v != "" {
			ip := net.ParseIP(strings.TrimPrefix(strings.TrimPrefix(v, "IPV6:"), "ipv6:"))
			if ip == nil {
				return &xforwardCmd{err: "501 5.5.4 Bad XFORWARD address\r\n"}
			}
			v = ip.String()
		}
		cmd.attrs[name] = v
	}
	return cmd
}

// xtextDecode decodes RFC 3461 xtext: "+XX" is the byte with hex code XX.
func xtextDecode(s string) (string, bool) {
	if !strings.Contains(s, "+") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '+' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		var c byte
		if _, err := fmt.Sscanf(s[i+1:i+3], "%02X", &c); err != nil {
			return "", false
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), true
}

// rewrite adjusts what go-smtp writes: XFORWARD joins the LHLO
// capabilities, and the reply to each NOOP that stood for an XFORWARD
// becomes that command's reply. It also notes where message data begins.
func (x *xforward) rewrite(b []byte) []byte {
	x.mu.Lock()
	defer x.mu.Unlock()
	if bytes.HasPrefix(b, []byte("354 ")) {
		x.data = true
	}
	if i := bytes.Index(b, []byte("250-PIPELINING\r\n")); i >= 0 && bytes.HasPrefix(b, []byte("250-")) {
		at := i + len("250-PIPELINING\r\n")
		b = append(append(append([]byte(nil), b[:at]...), xforwardCapLine...), b[at:]...)
	}
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(noopReply))
		if i < 0 || len(x.queue) == 0 {
			return b
		}
		i += off
		cmd := x.queue[0]
		x.queue = x.queue[1:]
		if cmd == nil {
			off = i + len(noopReply)
			continue
		}
		reply := x.apply(cmd)
		b = append(append(append([]byte(nil), b[:i]...), reply...), b[i+len(noopReply):]...)
		off = i + len(reply)
	}
}

// apply records an XFORWARD command's attributes for the next transaction
// and returns its reply.
func (x *xforward) apply(cmd *xforwardCmd) string {
	switch {
	case cmd.err != "":
		return cmd.err
	case x.inTx:
		return "503 5.5.1 XFORWARD is not allowed during a mail transaction\r\n"
	}
	if x.pending == nil {
		x.pending = &Forwarded{}
	}
	for name, v := range cmd.attrs {
		switch name {
		case "ADDR":
			x.pending.Addr = net.ParseIP(v)
		case "NAME":
			x.pending.Name = v
		case "HELO":
			x.pending.Helo = v
		}
	}
	return "250 2.0.0 Ok\r\n"
}

// begin opens a mail transaction and takes the attributes given for it.
func (x *xforward) begin() *Forwarded {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.inTx = true
	f := x.pending
	x.pending = nil
	return f
}

// end closes the transaction; message data, if any, is over.
func (x *xforward) end() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.inTx = false
	x.data = false
}
