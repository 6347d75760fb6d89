package netns

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeMX is a minimal SMTP server in a namespace that either drops the
// connection once DATA has started, or accepts every message and counts the
// transactions per Message-ID (the store of a real daemon would hide
// duplicates by de-duplicating on Message-ID).
type fakeMX struct {
	l           net.Listener
	dropMidData bool
	dataDelay   time.Duration

	mu    sync.Mutex
	byMID map[string]int
	// confirmed counts transactions whose 250 the client provably read:
	// it sent another command after it.
	confirmed map[string]int
	txns      int
	dropped   int
	// resentAfterAck counts transactions for a Message-ID whose earlier
	// transaction was already acknowledged and read.
	resentAfterAck int
	conns          map[net.Conn]bool
}

func startFakeMX(t *testing.T, ns *nsHost, dropMidData bool, dataDelay time.Duration) *fakeMX {
	t.Helper()
	l, err := listenIn(ns.NS, ns.IP+":25")
	if err != nil {
		t.Fatalf("fake MX listen: %v", err)
	}
	f := &fakeMX{l: l, dropMidData: dropMidData, dataDelay: dataDelay, byMID: map[string]int{}, confirmed: map[string]int{}, conns: map[net.Conn]bool{}}
	go f.serve()
	t.Cleanup(f.Close)
	return f
}

// Close stops listening and drops every open connection.
func (f *fakeMX) Close() {
	f.l.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

func (f *fakeMX) serve() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = true
		f.mu.Unlock()
		go func() {
			f.handle(c)
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
			c.Close()
		}()
	}
}

func (f *fakeMX) handle(c net.Conn) {
	c.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	say := func(s string) bool {
		w.WriteString(s + "\r\n")
		return w.Flush() == nil
	}
	if !say("220 fake.test ESMTP") {
		return
	}
	pending := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if pending != "" {
			f.mu.Lock()
			f.confirmed[pending]++
			f.mu.Unlock()
			pending = ""
		}
		verb := strings.ToUpper(strings.Fields(line + " x")[0])
		switch verb {
		case "EHLO":
			say("250-fake.test\r\n250-8BITMIME\r\n250 SIZE 52428800")
		case "HELO", "MAIL", "RCPT", "RSET", "NOOP":
			say("250 2.0.0 ok")
		case "QUIT":
			say("221 2.0.0 bye")
			return
		case "DATA":
			say("354 go ahead")
			if f.dropMidData {
				// Read a little of the message, then vanish.
				for range 3 {
					if _, err := r.ReadString('\n'); err != nil {
						break
					}
				}
				f.mu.Lock()
				f.dropped++
				f.mu.Unlock()
				return
			}
			mid, ok := readData(r)
			if !ok {
				return
			}
			time.Sleep(f.dataDelay)
			f.mu.Lock()
			if f.confirmed[mid] > 0 {
				f.resentAfterAck++
			}
			f.byMID[mid]++
			f.txns++
			f.mu.Unlock()
			if !say("250 2.0.0 queued as " + randHex(4)) {
				return
			}
			pending = mid
		default:
			say("502 5.5.2 not implemented")
		}
	}
}

// readData reads a message up to the lone dot and returns its Message-ID.
func readData(r *bufio.Reader) (mid string, ok bool) {
	inHeader := true
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", false
		}
		l := strings.TrimRight(line, "\r\n")
		if l == "." {
			return mid, true
		}
		if l == "" {
			inHeader = false
		}
		if inHeader && mid == "" && len(l) > 11 && strings.EqualFold(l[:11], "message-id:") {
			mid = strings.Trim(strings.TrimSpace(l[11:]), "<>")
		}
	}
}

// counts returns a copy of the per-Message-ID counts and the totals.
func (f *fakeMX) counts() (byMID map[string]int, txns, dropped int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byMID = make(map[string]int, len(f.byMID))
	for k, v := range f.byMID {
		byMID[k] = v
	}
	return byMID, f.txns, f.dropped
}

// resends is the number of transactions for messages whose earlier
// transaction the client had acknowledged reading.
func (f *fakeMX) resends() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resentAfterAck
}

// FuzzReadData feeds the fake MX's DATA reader arbitrary input: it must not
// panic, and a Message-ID it finds is one header line's value.
func FuzzReadData(f *testing.F) {
	f.Add("Message-ID: <a@b>\r\nSubject: x\r\n\r\nbody\r\n.\r\n")
	f.Add("message-id:<x@y>\r\n\r\nMessage-ID: <late@y>\r\n.\r\n")
	f.Add("Subject: no end")
	f.Add("Message-ID:\r\n <folded@y>\r\n\r\n.\r\n")
	f.Add(".\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		mid, ok := readData(bufio.NewReader(strings.NewReader(in)))
		if !ok && mid != "" {
			t.Fatalf("no end of data but a Message-ID %q", mid)
		}
		if strings.Contains(mid, "\n") {
			t.Fatalf("Message-ID %q spans lines", mid)
		}
	})
}
