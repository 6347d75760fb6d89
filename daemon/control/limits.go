package control

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/protocol"
)

// connSlots counts control connections in total and per uid, so that one
// user holding connections open cannot lock out root or the other users.
type connSlots struct {
	mu    sync.Mutex
	total int
	byUID map[uint32]int
}

// take claims a connection slot for caller, or says why there is none: the
// uid's own limit, or the users' share of the total (root alone may use the
// last ReservedForRoot slots).
func (s *connSlots) take(caller Caller, lim config.Control) *protocol.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUID == nil {
		s.byUID = map[uint32]int{}
	}
	switch {
	case caller.Root() && s.total >= lim.MaxConnections:
		return &protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Message: fmt.Sprintf(
			"the daemon holds its maximum of %d control connections (control.max_connections); retry shortly", lim.MaxConnections)}
	case !caller.Root() && s.byUID[caller.UID] >= lim.MaxConnectionsPerUID:
		return &protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Message: fmt.Sprintf(
			"uid %d already holds %d connections to the daemon, the most one user may (control.max_connections_per_uid): close some (each running `mailctl mcp` holds one, and one more for each `email_wait` it runs, at most 16, and each mailbox it watches for a subscription), or ask the operator to raise the limit",
			caller.UID, s.byUID[caller.UID])}
	case !caller.Root() && s.total >= lim.MaxConnections-lim.ReservedForRoot:
		return &protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Message: fmt.Sprintf(
			"the daemon holds the %d control connections users may open (control.max_connections less control.reserved_for_root); retry shortly, or ask the operator to raise the limit",
			lim.MaxConnections-lim.ReservedForRoot)}
	}
	s.total++
	s.byUID[caller.UID]++
	return nil
}

// give returns caller's slot.
func (s *connSlots) give(caller Caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byUID[caller.UID]--; s.byUID[caller.UID] <= 0 {
		delete(s.byUID, caller.UID)
	}
}

// refuse tells a client why it gets no connection, in place of the
// greeting, so the client prints the reason instead of a protocol error.
func (s *Server) refuse(conn net.Conn, why *protocol.Error) {
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write(mustFrame(protocol.Greeting{Protocol: protocol.Name, Version: protocol.Version, Server: s.version(), Error: why}))
	conn.Close()
}

// idleCloser closes a connection that has had no request in flight for
// the idle timeout (read at each re-arm, so a reload applies to open
// connections). A request in flight (a watch included) holds it open.
type idleCloser struct {
	mu       sync.Mutex
	inFlight int
	idle     func() time.Duration
	t        *time.Timer
}

func newIdleCloser(idle func() time.Duration, close func()) *idleCloser {
	return &idleCloser{idle: idle, t: time.AfterFunc(idle(), close)}
}

// begin marks a request in flight.
func (ic *idleCloser) begin() {
	ic.mu.Lock()
	ic.inFlight++
	ic.t.Stop()
	ic.mu.Unlock()
}

// end marks a request finished; the last one starts the idle clock again.
func (ic *idleCloser) end() {
	ic.mu.Lock()
	if ic.inFlight--; ic.inFlight == 0 {
		ic.t.Reset(ic.idle())
	}
	ic.mu.Unlock()
}

func (ic *idleCloser) stop() { ic.t.Stop() }
