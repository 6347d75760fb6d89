// Package dnstest runs a real DNS server in-process for tests and end-to-end
// scenarios: A, AAAA, MX (including the null MX "."), and TXT (long values
// split into 255-byte strings), over UDP and TCP on the same port. Records
// can be changed while it runs, and names can be made to never answer (a
// timeout) or to answer SERVFAIL.
package dnstest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Record is one resource record: Name (with or without the trailing dot),
// Type (A, AAAA, MX, TXT) and Value in text form: an address, "10 mx.example."
// (or "0 ." for a null MX), or the TXT text (any length, no quoting).
type Record struct {
	Name  string
	Type  string
	Value string
}

// Server is a running DNS server.
type Server struct {
	addr string
	udp  *dns.Server
	tcp  *dns.Server

	mu       sync.RWMutex
	records  map[string][]Record // by lowercased FQDN
	hang     map[string]bool
	servfail map[string]bool
}

// Start serves records on 127.0.0.1 at a random port (UDP and TCP) until the
// test ends. It returns the server and its "host:port".
func Start(tb testing.TB, records ...Record) (*Server, string) {
	tb.Helper()
	var s *Server
	var err error
	// The UDP port picked at random may be taken on TCP; try a few.
	for range 20 {
		s, err = Listen("127.0.0.1:0", records)
		if err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("dnstest: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, s.addr
}

// Listen serves records on addr ("host:port"; port 0 picks one) over UDP and
// TCP. Close stops it.
func Listen(addr string, records []Record) (*Server, error) {
	for _, r := range records {
		if err := r.validate(); err != nil {
			return nil, err
		}
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("dnstest: listen udp: %w", err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("dnstest: listen tcp: %w", err)
	}
	s := &Server{addr: pc.LocalAddr().String()}
	s.Replace(records)
	s.udp = &dns.Server{PacketConn: pc, Handler: s}
	s.tcp = &dns.Server{Listener: ln, Handler: s}
	started := make(chan struct{}, 2)
	s.udp.NotifyStartedFunc = func() { started <- struct{}{} }
	s.tcp.NotifyStartedFunc = func() { started <- struct{}{} }
	go s.udp.ActivateAndServe()
	go s.tcp.ActivateAndServe()
	<-started
	<-started
	return s, nil
}

// Addr is the server's "host:port".
func (s *Server) Addr() string { return s.addr }

// Close stops the server.
func (s *Server) Close() error {
	return errors.Join(s.udp.Shutdown(), s.tcp.Shutdown())
}

func fqdn(name string) string { return dns.Fqdn(strings.ToLower(strings.TrimSpace(name))) }

// Replace swaps the whole zone for records. Invalid records are skipped;
// Listen and ParseZone report them.
func (s *Server) Replace(records []Record) {
	m := map[string][]Record{}
	for _, r := range records {
		if r.validate() == nil {
			m[fqdn(r.Name)] = append(m[fqdn(r.Name)], r)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = m
}

// Set replaces the records of one name and type; no values removes them.
func (s *Server) Set(name, typ string, values ...string) error {
	typ = strings.ToUpper(typ)
	var add []Record
	for _, v := range values {
		r := Record{Name: name, Type: typ, Value: v}
		if err := r.validate(); err != nil {
			return err
		}
		add = append(add, r)
	}
	key := fqdn(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	var keep []Record
	for _, r := range s.records[key] {
		if !strings.EqualFold(r.Type, typ) {
			keep = append(keep, r)
		}
	}
	keep = append(keep, add...)
	if len(keep) == 0 {
		delete(s.records, key)
	} else {
		s.records[key] = keep
	}
	return nil
}

// Hang makes queries for name go unanswered (on) or answered again (off),
// so clients see a timeout.
func (s *Server) Hang(name string, on bool) { s.flag(&s.hang, name, on) }

// ServFail makes queries for name answer SERVFAIL (on) or normally (off).
func (s *Server) ServFail(name string, on bool) { s.flag(&s.servfail, name, on) }

func (s *Server) flag(m *map[string]bool, name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *m == nil {
		*m = map[string]bool{}
	}
	if on {
		(*m)[fqdn(name)] = true
	} else {
		delete(*m, fqdn(name))
	}
}

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	if len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.ToLower(q.Name)

	s.mu.RLock()
	hang, servfail := s.hang[name], s.servfail[name]
	recs := s.records[name]
	s.mu.RUnlock()

	if hang {
		return
	}
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	switch {
	case servfail:
		m.Rcode = dns.RcodeServerFailure
	case len(recs) == 0:
		m.Rcode = dns.RcodeNameError
	default:
		for _, r := range recs {
			if rr := r.rr(q.Name, q.Qtype); rr != nil {
				m.Answer = append(m.Answer, rr)
			}
		}
	}

	size := dns.MinMsgSize
	if _, tcp := w.RemoteAddr().(*net.TCPAddr); tcp {
		size = dns.MaxMsgSize
	} else if opt := req.IsEdns0(); opt != nil {
		size = int(opt.UDPSize())
	}
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), false)
	}
	m.Truncate(size)
	w.WriteMsg(m)
}

func (r Record) validate() error {
	bad := func(why string) error {
		return fmt.Errorf("dnstest: %s %s %q: %s", r.Name, r.Type, r.Value, why)
	}
	if _, ok := dns.IsDomainName(fqdn(r.Name)); !ok || strings.TrimSpace(r.Name) == "" {
		return bad("invalid name")
	}
	switch strings.ToUpper(r.Type) {
	case "A":
		if ip := net.ParseIP(r.Value); ip == nil || ip.To4() == nil {
			return bad("not an IPv4 address")
		}
	case "AAAA":
		if ip := net.ParseIP(r.Value); ip == nil || ip.To4() != nil {
			return bad("not an IPv6 address")
		}
	case "MX":
		if _, _, err := parseMX(r.Value); err != nil {
			return bad(err.Error())
		}
	case "TXT":
	default:
		return bad("unsupported type")
	}
	return nil
}

func parseMX(v string) (uint16, string, error) {
	f := strings.Fields(v)
	if len(f) != 2 {
		return 0, "", errors.New(`MX value must be "<preference> <host>"`)
	}
	pref, err := strconv.ParseUint(f[0], 10, 16)
	if err != nil {
		return 0, "", errors.New("bad MX preference")
	}
	host := fqdn(f[1])
	if _, ok := dns.IsDomainName(host); !ok {
		return 0, "", errors.New("bad MX host")
	}
	return uint16(pref), host, nil
}

// rr renders r as the answer to a question of type qtype, or nil when the
// types differ.
func (r Record) rr(owner string, qtype uint16) dns.RR {
	hdr := dns.RR_Header{Name: owner, Class: dns.ClassINET, Ttl: 60}
	switch strings.ToUpper(r.Type) {
	case "A":
		if qtype != dns.TypeA {
			return nil
		}
		hdr.Rrtype = dns.TypeA
		return &dns.A{Hdr: hdr, A: net.ParseIP(r.Value).To4()}
	case "AAAA":
		if qtype != dns.TypeAAAA {
			return nil
		}
		hdr.Rrtype = dns.TypeAAAA
		return &dns.AAAA{Hdr: hdr, AAAA: net.ParseIP(r.Value)}
	case "MX":
		if qtype != dns.TypeMX {
			return nil
		}
		hdr.Rrtype = dns.TypeMX
		pref, host, _ := parseMX(r.Value)
		return &dns.MX{Hdr: hdr, Preference: pref, Mx: host}
	case "TXT":
		if qtype != dns.TypeTXT {
			return nil
		}
		hdr.Rrtype = dns.TypeTXT
		return &dns.TXT{Hdr: hdr, Txt: splitTXT(r.Value)}
	}
	return nil
}

// splitTXT cuts a value into character-strings of at most 255 bytes, as a
// DKIM key record needs. The library reads strings in presentation form, so
// backslashes and quotes are escaped after cutting.
func splitTXT(v string) []string {
	var out []string
	for {
		n := min(len(v), 255)
		chunk := v[:n]
		chunk = strings.ReplaceAll(chunk, `\`, `\\`)
		chunk = strings.ReplaceAll(chunk, `"`, `\"`)
		out = append(out, chunk)
		v = v[n:]
		if v == "" {
			return out
		}
	}
}
