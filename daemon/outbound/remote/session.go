package remote

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// Defaults of the session cache and the per-destination limit.
const (
	defaultPerDestination = 8
	defaultMaxIdle        = 32
	defaultIdleTimeout    = 5 * time.Second
	defaultMaxUses        = 100
	defaultMaxAge         = 5 * time.Minute
)

// session is one SMTP connection ready for MAIL: greeted, TLS as it could be
// had, authenticated for a relay.
type session struct {
	c     *smtp.Client
	conn  net.Conn
	host  string
	tls   string
	key   string
	born  time.Time
	uses  int
	timer *time.Timer // while idle: closes the session when it fires
}

// close says QUIT, briefly, and closes the connection.
func (s *session) close() {
	s.conn.SetDeadline(time.Now().Add(time.Second))
	if s.c.Quit() != nil {
		s.c.Close()
	}
}

// pool caches idle sessions per route and bounds the transactions in
// flight per destination address, as Postfix's connection cache and
// destination concurrency limit do: a burst to one domain shares a few
// connections instead of opening one per message.
type pool struct {
	mu     sync.Mutex
	idle   map[string][]*session // per route key, most recently used last
	nidle  int
	slots  map[string]*slot // per destination address
	closed bool
}

type slot struct {
	ch    chan struct{}
	users int
}

func (d *Client) sessions() *pool {
	d.poolOnce.Do(func() { d.pool = &pool{idle: map[string][]*session{}, slots: map[string]*slot{}} })
	return d.pool
}

func (d *Client) perDestination() int {
	if d.PerDestination > 0 {
		return d.PerDestination
	}
	return defaultPerDestination
}

// acquire waits for one of limit slots of dest and returns its release.
func (p *pool) acquire(ctx context.Context, dest string, limit int) (func(), error) {
	p.mu.Lock()
	s := p.slots[dest]
	if s == nil {
		s = &slot{ch: make(chan struct{}, limit)}
		p.slots[dest] = s
	}
	s.users++
	p.mu.Unlock()
	unuse := func() {
		p.mu.Lock()
		if s.users--; s.users == 0 {
			delete(p.slots, dest)
		}
		p.mu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; unuse() }, nil
	case <-ctx.Done():
		unuse()
		return nil, ctx.Err()
	}
}

// take returns an idle session for key, or nil.
func (p *pool) take(key string) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[key]
	if len(l) == 0 {
		return nil
	}
	s := p.unidle(key, len(l)-1)
	s.timer.Stop() // if it fired already, expire finds nothing to do
	return s
}

// unidle removes the i-th idle session of key from the cache and returns
// it. Call with p.mu held.
func (p *pool) unidle(key string, i int) *session {
	l := p.idle[key]
	s := l[i]
	if len(l) == 1 {
		delete(p.idle, key)
	} else {
		p.idle[key] = slices.Delete(l, i, i+1)
	}
	p.nidle--
	return s
}

// put caches s for another transaction, or closes it when it has carried
// enough, is old, or the cache is full or closed.
func (p *pool) put(s *session, d *Client) {
	maxIdle, idleFor := d.MaxIdle, d.IdleTimeout
	if maxIdle <= 0 {
		maxIdle = defaultMaxIdle
	}
	if idleFor <= 0 {
		idleFor = defaultIdleTimeout
	}
	p.mu.Lock()
	if p.closed || p.nidle >= maxIdle || s.uses >= defaultMaxUses || time.Since(s.born) > defaultMaxAge {
		p.mu.Unlock()
		s.close()
		return
	}
	p.idle[s.key] = append(p.idle[s.key], s)
	p.nidle++
	s.timer = time.AfterFunc(idleFor, func() { p.expire(s) })
	p.mu.Unlock()
}

// expire closes s if it is still idle.
func (p *pool) expire(s *session) {
	p.mu.Lock()
	i := slices.Index(p.idle[s.key], s)
	if i >= 0 {
		p.unidle(s.key, i)
	}
	p.mu.Unlock()
	if i >= 0 {
		s.close()
	}
}

// Close closes the cached sessions; sessions in use close when their
// transaction ends. The Client delivers on afterwards without a cache.
func (d *Client) Close() {
	p := d.sessions()
	p.mu.Lock()
	p.closed = true
	var all []*session
	for _, l := range p.idle {
		all = append(all, l...)
	}
	p.idle = map[string][]*session{}
	p.nidle = 0
	p.mu.Unlock()
	for _, s := range all {
		s.timer.Stop()
		s.close()
	}
}
