package protocol

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// SocketPath picks the control socket: an explicit flag value, then
// $MAILCTL_SOCKET, then DefaultSocket.
func SocketPath(flagValue string) string {
	return cmp.Or(flagValue, os.Getenv("MAILCTL_SOCKET"), DefaultSocket)
}

// writeTimeout is how long one request may wait for a daemon that does not
// read.
var writeTimeout = 30 * time.Second

// Client is a connection to the daemon. It is safe for concurrent use: many
// requests may be in flight on one connection, and watches stream alongside.
type Client struct {
	conn     net.Conn
	Greeting Greeting

	writeMu sync.Mutex
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan *Response
	streams map[uint64]bool // ids of watch requests: their data reply does not end them
	closed  error
	done    chan struct{}
}

// Dial connects to the daemon at path, reads its greeting and checks the
// protocol version. A daemon that is not running yields an *Error with code
// CodeUnavailable that says how to start it.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, dialError(path, err)
	}
	if err := checkServer(conn, path); err != nil {
		conn.Close()
		return nil, err
	}
	c := &Client{conn: conn, pending: map[uint64]chan *Response{}, streams: map[uint64]bool{}, done: make(chan struct{})}
	fr := NewFrameReader(conn, MaxFrame)
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	} else {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	}
	line, err := fr.Next()
	if err != nil {
		conn.Close()
		return nil, &Error{Code: CodeUnavailable, Retryable: true, Message: fmt.Sprintf("no greeting from %s: %v", path, err)}
	}
	conn.SetReadDeadline(time.Time{})
	if err := json.Unmarshal(line, &c.Greeting); err != nil {
		conn.Close()
		return nil, fmt.Errorf("malformed greeting from %s: %w", path, err)
	}
	if c.Greeting.Error != nil {
		conn.Close()
		return nil, c.Greeting.Error
	}
	if err := CheckGreeting(c.Greeting); err != nil {
		conn.Close()
		return nil, err
	}
	go c.readLoop(fr)
	return c, nil
}

// checkServer refuses a socket served by a process that is neither root
// (mailctl serve) nor the caller (its own mailctl dev), before anything is
// sent to it or believed of it. A socket in a directory others may write
// to (a config's paths.socket in /tmp, an instance's folder opened to
// others) can be taken by another user while the daemon is stopped:
// root's commands would then show that user's answers as the daemon's
// (a clean doctor, a harmless queue, a draft's path for root's editor),
// and an agent's shim would send it its mail.
func checkServer(conn net.Conn, path string) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("who serves %s: %w", path, cerr)
	}
	if me := uint32(os.Geteuid()); cred.Uid != 0 && cred.Uid != me {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf(
			"%s is served by uid %d, neither root (mailctl serve) nor you (uid %d, your own mailctl dev): it is no daemon of yours, so nothing was sent to it. "+
				"If that user's mailctl dev is the daemon you mean, run the command as that user (sudo -u); else name your daemon's socket with --socket or $MAILCTL_SOCKET",
			path, cred.Uid, me)}
	}
	return nil
}

// dialError says why the socket at path could not be reached. A daemon
// that is not running is told how to start; a socket the caller may not
// open is not a stopped daemon, and starting one would not help: a dev
// instance's folder is private to the user who runs it, and a host's socket
// is open to every user.
func dialError(path string, err error) *Error {
	if errors.Is(err, os.ErrPermission) {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf(
			"cannot reach the mailctl daemon at %s (%v): your user may not open this socket. "+
				"A mailctl dev instance serves only the user who started it: run your own `mailctl dev`, or use that user's account; "+
				"a host's socket is open to every user, so there ask the operator to run `mailctl doctor`", path, errors.Unwrap(err))}
	}
	return &Error{Code: CodeUnavailable, Retryable: true, Message: fmt.Sprintf(
		"the mailctl daemon is not answering at %s (%v): %s", path, errors.Unwrap(err), startAdvice(path))}
}

// Close ends the connection and every request and watch on it.
func (c *Client) Close() error { return c.conn.Close() }

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) readLoop(fr *FrameReader) {
	var err error
	for {
		var line []byte
		line, err = fr.Next()
		if err != nil {
			break
		}
		var resp Response
		if jerr := json.Unmarshal(line, &resp); jerr != nil {
			err = fmt.Errorf("malformed reply from daemon: %w", jerr)
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		if ch != nil && resp.Event == nil && (!c.streams[resp.ID] || resp.Error != nil) {
			delete(c.pending, resp.ID)
			delete(c.streams, resp.ID)
		}
		c.mu.Unlock()
		if ch != nil {
			if resp.Event != nil {
				select {
				case ch <- &resp:
				default: // a watcher that does not keep up loses events, not the connection
				}
			} else {
				ch <- &resp
			}
		}
	}
	c.mu.Lock()
	c.closed = &Error{Code: CodeUnavailable, Retryable: true, Message: "lost the connection to the mailctl daemon: " + err.Error()}
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

func (c *Client) send(ctx context.Context, verb string, args any, buffer int) (uint64, chan *Response, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return 0, nil, err
	}
	if args == nil {
		raw = nil
	}
	req := Request{Verb: verb, Args: raw}
	if dl, ok := ctx.Deadline(); ok {
		ms := time.Until(dl).Milliseconds()
		if ms <= 0 {
			return 0, nil, &Error{Code: CodeTimeout, Retryable: true, Message: "deadline passed before the request was sent"}
		}
		req.TimeoutMS = int(min(ms, MaxTimeoutMS))
	}
	ch := make(chan *Response, buffer)
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return 0, nil, c.closed
	}
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	if verb == VerbWatch {
		c.streams[req.ID] = true
	}
	c.mu.Unlock()
	frame, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	if len(frame) > MaxFrame {
		c.forget(req.ID)
		return 0, nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("request of %d bytes exceeds the %d-byte frame limit", len(frame), MaxFrame)}
	}
	frame = append(frame, '\n')
	c.writeMu.Lock()
	c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = c.conn.Write(frame)
	if err != nil {
		// The write may have sent part of the frame: a later one would be
		// glued to it, so the connection ends here (every request on it
		// fails as unavailable, and the caller dials again).
		c.conn.Close()
	}
	c.writeMu.Unlock()
	if err != nil {
		c.forget(req.ID)
		return 0, nil, &Error{Code: CodeUnavailable, Retryable: true, Message: "writing to the mailctl daemon: " + err.Error()}
	}
	return req.ID, ch, nil
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	delete(c.streams, id)
	c.mu.Unlock()
}

// Call sends one request and decodes its data into out (which may be nil).
// Errors from the daemon are returned as *Error.
func (c *Client) Call(ctx context.Context, verb string, args any, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeoutMS*time.Millisecond)
		defer cancel()
	}
	id, ch, err := c.send(ctx, verb, args, 1)
	if err != nil {
		return err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.closed
		}
		if resp.Error != nil {
			return resp.Error
		}
		if out != nil && len(resp.Data) > 0 {
			if err := json.Unmarshal(resp.Data, out); err != nil {
				return fmt.Errorf("decoding %s reply: %w", verb, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return ended(ctx, verb)
	}
}

// ended is the error of a call whose context ended before the daemon's
// reply: a timeout when its deadline passed, else the caller cancelled it.
func ended(ctx context.Context, verb string) *Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Code: CodeTimeout, Retryable: true, Message: fmt.Sprintf("%s: no reply from the daemon in time", verb)}
	}
	return &Error{Code: CodeUnavailable, Retryable: true, Message: fmt.Sprintf("%s: cancelled before the daemon replied", verb)}
}

// Watch starts a watch stream. Events arrive on the returned channel until ctx
// ends, the daemon ends the watch, or the connection closes; then the channel
// is closed. Cancelling ctx closes the connection's interest in the watch only
// on the client side; use a dedicated Client for a watch you intend to stop.
func (c *Client) Watch(ctx context.Context, args WatchArgs) (<-chan Event, error) {
	id, ch, err := c.send(context.Background(), VerbWatch, args, 256)
	if err != nil {
		return nil, err
	}
	// The first reply acknowledges the watch (or refuses it).
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, c.closed
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer c.forget(id)
		for {
			select {
			case resp, ok := <-ch:
				if !ok || resp.Event == nil {
					return
				}
				select {
				case out <- *resp.Event:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// VersionAt asks the daemon at socket who it is (its version, process id,
// whether it is a dev instance), on a connection of its own.
func VersionAt(ctx context.Context, socket string) (VersionInfo, error) {
	var v VersionInfo
	c, err := Dial(ctx, socket)
	if err != nil {
		return v, err
	}
	defer c.Close()
	err = c.Call(ctx, VerbVersion, nil, &v)
	return v, err
}

// PIDAt is the process id of the daemon answering at socket, asked with a
// timeout of its own (2 s): 0 when none answers there in time.
func PIDAt(ctx context.Context, socket string) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := VersionAt(ctx, socket)
	if err != nil {
		return 0
	}
	return v.PID
}
