package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

// Caller is the kernel-reported identity of a socket peer, read once per
// connection with SO_PEERCRED. Nothing the client sends can change it.
type Caller struct {
	UID, GID uint32
	PID      int32 // for logs only; never used to authorize
}

// Root reports whether the caller is uid 0.
func (c Caller) Root() bool { return c.UID == 0 }

// listener is the socket part of a Server: the listening socket, the
// connections it has open and the limits they are held to.
type listener struct {
	ln     *net.UnixListener
	slots  connSlots
	mem    memBudget
	connMu sync.Mutex
	open   map[net.Conn]struct{}
}

// Listen binds the control socket; the caller holds the daemon's lock. A
// socket file that nothing answers on is stale and replaced; one that
// answers means another daemon runs (one that ignores the lock), and this
// one refuses to start.
func (s *Server) Listen(path string) error {
	if _, err := os.Lstat(path); err == nil {
		c, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			other, err := peerCred(c.(*net.UnixConn))
			c.Close()
			if euid := uint32(os.Geteuid()); err == nil && other.UID != euid {
				// A user put a socket of theirs at the path (a directory
				// others may write, while the daemon was stopped).
				return fmt.Errorf("uid %d's process %d answers on %s, in the daemon's place: stop it, remove %s, and set paths.socket to a directory only uid %d writes (the default, %s)",
					other.UID, other.PID, path, path, euid, protocol.DefaultSocket)
			}
			return fmt.Errorf("another mailctl daemon is answering on %s; stop it first", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("removing stale socket %s: %w", path, err)
		}
		s.log.Info("removed stale control socket", "path", path)
	}
	// Every local user may connect; authorization happens per request by uid.
	ln, err := safeio.ListenSocket(path, 0o666)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	s.ln, s.open = ln, map[net.Conn]struct{}{}
	return nil
}

// closeListener closes the socket and every open connection.
func (s *Server) closeListener() {
	if s.ln == nil {
		return
	}
	s.ln.Close()
	s.connMu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.connMu.Unlock()
}

// Serve accepts connections until Close.
func (s *Server) Serve() error {
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.log.Error("control accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		caller, err := peerCred(conn)
		if err != nil {
			s.log.Error("reading peer credentials", "err", err)
			conn.Close()
			continue
		}
		if why := s.slots.take(caller, s.cfg().Control); why != nil {
			if ok, n := s.opts.LogSum.Allow(fmt.Sprintf("control refused uid=%d: %s", caller.UID, why.Message)); ok {
				s.log.Warn("control connection refused", "uid", caller.UID, "pid", caller.PID, "reason", why.Message, "repeats", n)
			}
			s.opts.Requests.WithLabelValues("connect", protocol.CodeRateLimited).Inc()
			s.refuse(conn, why)
			continue
		}
		s.connMu.Lock()
		s.open[conn] = struct{}{}
		s.connMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.slots.give(caller)
			s.handleConn(conn, caller)
			s.connMu.Lock()
			delete(s.open, conn)
			s.connMu.Unlock()
		}()
	}
}

// peerCred reads the connecting process's credentials from the kernel.
func peerCred(conn *net.UnixConn) (Caller, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return Caller{}, err
	}
	var cred *unix.Ucred
	var serr error
	err = raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return Caller{}, err
	}
	return Caller{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

func mustFrame(v any) []byte {
	b, _ := json.Marshal(v)
	return append(b, '\n')
}

// connWriter serializes frames from concurrent requests on one connection.
type connWriter struct {
	mu   sync.Mutex
	conn net.Conn
	// broken is the first write error: a write that failed may have sent
	// part of its frame, so nothing more is written and the connection is
	// closed. The client sees the connection end, not a frame cut short
	// and glued to the next one, nor later answers with earlier ones lost.
	broken error
	// timeout is how long one frame may wait for a client that does not
	// read (writeTimeout).
	timeout time.Duration
}

// writeTimeout is how long one frame may wait for a client that does not
// read.
const writeTimeout = 30 * time.Second

func (w *connWriter) send(r protocol.Response) error {
	frame := mustFrame(r)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != nil {
		return w.broken
	}
	w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
	_, err := w.conn.Write(frame)
	if err != nil {
		w.broken = err
		w.conn.Close()
	}
	return err
}

// maxInFlight bounds concurrent requests on one connection.
const maxInFlight = 32

func (s *Server) handleConn(conn *net.UnixConn, caller Caller) {
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchCtx, cancelWatches := context.WithCancel(ctx)
	defer cancelWatches()
	w := &connWriter{conn: conn, timeout: writeTimeout}
	if err := w.send0(protocol.Greeting{Protocol: protocol.Name, Version: protocol.Version, Server: s.version()}); err != nil {
		return
	}
	fr := protocol.NewFrameReader(conn, protocol.MaxFrame)
	// The frame buffer is charged to the caller as it grows; a frame the
	// budget cannot hold is discarded and refused.
	var refusedWhy *protocol.Error
	fr.Reserve = func(n int) bool {
		refusedWhy = s.mem.take(caller, int64(n), s.cfg().Control)
		return refusedWhy == nil
	}
	fr.Release = func(n int) { s.mem.give(caller, int64(n)) }
	// A frame that has begun must arrive whole within the request timeout
	// (read as it begins, so a reload applies from the next frame): its
	// buffer is charged to the caller, and a client that stopped half-way
	// would otherwise hold it until the idle timeout. Between frames no
	// deadline runs; the idle timeout closes a connection left unused,
	// and a frame that has begun counts as a request in flight for it (its
	// own deadline bounds it).
	idle := newIdleCloser(func() time.Duration { return s.cfg().Control.IdleTimeout.Duration }, func() {
		s.log.Debug("closing an idle control connection", "uid", caller.UID, "pid", caller.PID)
		conn.Close()
	})
	defer idle.stop()
	var frameTimeout time.Duration
	framing := false
	fr.Begin = func() {
		frameTimeout = s.cfg().Control.RequestTimeout.Duration
		conn.SetReadDeadline(time.Now().Add(frameTimeout))
		idle.begin()
		framing = true
	}
	defer fr.Close()
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		frame, err := fr.Next()
		if framing {
			idle.end()
			framing = false
		}
		if err == nil || errors.Is(err, protocol.ErrFrameTooLarge) || errors.Is(err, protocol.ErrFrameRefused) {
			conn.SetReadDeadline(time.Time{})
		}
		switch {
		case errors.Is(err, protocol.ErrFrameTooLarge):
			s.audit(caller, "", "", decisionDeny, protocol.CodeTooLarge, 0)
			w.send(protocol.Response{ID: protocol.ProbeID(fr.Head()), Error: protocol.Errorf(protocol.CodeTooLarge, "request frame exceeds %d bytes", protocol.MaxFrame)})
			continue
		case errors.Is(err, protocol.ErrFrameRefused):
			s.audit(caller, "", "", decisionDeny, protocol.CodeRateLimited, 0)
			w.send(protocol.Response{ID: protocol.ProbeID(fr.Head()), Error: refusedWhy})
			fr.Free()
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The buffer goes back at once, not when the requests still
			// in flight end.
			fr.Close()
			s.audit(caller, "", "", decisionDeny, protocol.CodeTimeout, 0)
			w.send(protocol.Response{ID: protocol.ProbeID(fr.Head()), Error: protocol.Errorf(protocol.CodeTimeout,
				"the request frame did not arrive whole within %s of its first byte (control.request_timeout): the connection is closed; send each request at once", frameTimeout)})
			cancelWatches()
			return
		case err != nil:
			fr.Close()
			// The client is gone (or half-closed): requests in flight may
			// still answer, but a watch would stream to no one and hold
			// the connection open until its next event.
			cancelWatches()
			return
		}
		req, err := protocol.DecodeRequest(frame)
		cost := requestCost("", len(frame))
		if err == nil {
			cost = requestCost(req.Verb, len(frame))
		}
		id := protocol.ProbeID(frame)
		fr.Free() // the request holds a copy of what it needs
		if err != nil {
			s.audit(caller, "", "", decisionDeny, protocol.CodeInvalidInput, 0)
			w.send(protocol.Response{ID: id, Error: protocol.Errorf(protocol.CodeInvalidInput, "bad request: %v", err)})
			continue
		}
		if why := s.mem.take(caller, cost, s.cfg().Control); why != nil {
			s.audit(caller, req.Verb, "", decisionDeny, protocol.CodeRateLimited, 0)
			w.send(protocol.Response{ID: req.ID, Error: why})
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-s.closing:
			s.mem.give(caller, cost)
			w.send(protocol.Response{ID: req.ID, Error: errClosing})
			return
		}
		wg.Add(1)
		idle.begin()
		go func() {
			defer wg.Done()
			defer idle.end()
			defer s.mem.give(caller, cost)
			defer func() { <-sem }()
			rctx := ctx
			if req.Verb == protocol.VerbWatch {
				rctx = watchCtx
			}
			s.serveRequest(rctx, caller, req, w)
		}()
	}
}

func (w *connWriter) send0(g protocol.Greeting) error {
	w.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := w.conn.Write(mustFrame(g))
	return err
}
