package smtpin

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"
)

// screenTimeout bounds a Screener's work for one client; the Screener's own
// per-list deadline is shorter.
const screenTimeout = 10 * time.Second

// screenBeforeGreeting holds the greeting back for the pregreet wait and the
// Screener's verdict, watching the socket meanwhile: an honest SMTP client
// waits for the greeting (RFC 5321 §3.1), so a client that talks first is a
// bot that does not, and is refused, as Postfix's postscreen does. A listed
// client is refused with 554 5.7.1 naming the lists. It reports whether the
// session goes on; when not, the connection is closed.
func (c *trackedConn) screenBeforeGreeting() bool {
	s := c.s
	var verdict chan Screening
	if s.cfg.Screener != nil && c.ip != nil {
		verdict = make(chan Screening, 1)
		ctx, cancel := context.WithTimeout(context.Background(), screenTimeout)
		defer cancel()
		go func() { verdict <- s.cfg.Screener.Screen(ctx, c.ip) }()
	}
	// The read below waits for the client's first byte; this goroutine
	// ends it (with a deadline in the past) once the wait is over and the
	// verdict is in. got is written before woken is closed.
	var got Screening
	woken, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(woken)
		t := time.NewTimer(s.cfg.PregreetWait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
			return
		}
		if verdict != nil {
			select {
			case got = <-verdict:
			case <-stop:
				return
			}
		}
		_ = c.Conn.SetReadDeadline(time.Now())
	}()
	_ = c.Conn.SetReadDeadline(time.Now().Add(s.cfg.PregreetWait + screenTimeout + time.Second))
	var one [1]byte
	n, err := c.Conn.Read(one[:])
	close(stop)
	switch {
	case n > 0:
		c.log.Info("client talked before the greeting (pregreet), refused")
		c.refuseScreened("554 5.5.1 Protocol error: talking before the greeting")
		return false
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		// The client left, or the server is shutting down.
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			c.log.Info("connection lost before the greeting", "err", err)
		}
		c.Close()
		return false
	}
	<-woken
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.screen = got
	if got.Refuse != "" {
		if ok, n := s.summarize("smtp listed " + c.ip.String()); ok {
			c.log.Info("client refused at connect", "reason", got.Refuse, "listed", got.Listed, "repeats", n)
		}
		c.refuseScreened("554 5.7.1 " + got.Refuse)
		return false
	}
	if len(got.Listed) > 0 {
		c.log.Info("client listed below the threshold: its mail goes to junk", "listed", got.Listed, "junk", got.Junk != "")
	}
	return true
}

// refuseScreened answers with reply instead of the greeting and closes.
func (c *trackedConn) refuseScreened(reply string) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c.Conn, reply+"\r\n")
	c.errors.Add(1)
	c.Close()
}
