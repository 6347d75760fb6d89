package smtpin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Listen binds the TCP listeners of addrs in order. An IPv4 literal gets an
// IPv4-only socket and an IPv6 literal an IPv6-only one: Go otherwise opens
// a dual-stack socket for either wildcard, so on a host with
// net.ipv6.bindv6only=0 (the Linux default) "0.0.0.0:25" already takes
// IPv6 and "[::]:25" then fails with "address already in use". A host name
// or an empty host keeps Go's dual-stack socket.
//
// A listener that cannot be bound closes those already bound, and the error
// names the configured address that failed and why: another program on the
// port, or an earlier address of addrs that overlaps it. A host without
// IPv6 skips IPv6 literals with skipped set, as long as another listener
// binds.
func Listen(ctx context.Context, addrs []string) (lns []net.Listener, skipped []string, err error) {
	return listen(ctx, listenerKind{"SMTP", "smtp.listen", "0.0.0.0:25"}, addrs)
}

// ListenLMTP is Listen for lmtp.listen_tcp.
func ListenLMTP(ctx context.Context, addrs []string) (lns []net.Listener, skipped []string, err error) {
	return listen(ctx, listenerKind{"LMTP", "lmtp.listen_tcp", "10.0.0.5:24"}, addrs)
}

// listenerKind names a set of listeners in errors: the protocol, the config
// key and an example address.
type listenerKind struct{ proto, key, example string }

func listen(ctx context.Context, kind listenerKind, addrs []string) (lns []net.Listener, skipped []string, err error) {
	var lc net.ListenConfig
	for i, addr := range addrs {
		ln, lerr := lc.Listen(ctx, listenNetwork(addr), addr)
		if lerr == nil {
			lns = append(lns, ln)
			continue
		}
		if errors.Is(lerr, syscall.EAFNOSUPPORT) && listenNetwork(addr) == "tcp6" {
			skipped = append(skipped, addr)
			continue
		}
		for _, l := range lns {
			l.Close()
		}
		return nil, nil, listenError(kind, addr, addrs[:i], lerr)
	}
	if len(lns) == 0 && len(skipped) > 0 {
		return nil, nil, fmt.Errorf("%s listeners %v: this host has no IPv6 and no other listener is configured; add an IPv4 address such as %s to %s", kind.proto, skipped, kind.example, kind.key)
	}
	return lns, skipped, nil
}

// listenNetwork is the socket family for a listen address.
func listenNetwork(addr string) string {
	host, _, _ := net.SplitHostPort(addr) // no host when it does not split: "tcp"
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return "tcp"
	case ip.To4() != nil:
		return "tcp4"
	}
	return "tcp6"
}

// listenError explains why addr could not be bound.
func listenError(kind listenerKind, addr string, earlier []string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s listener %s: %w", kind.proto, addr, err)
	}
	for _, e := range earlier {
		if overlaps(e, addr) {
			return fmt.Errorf("%s listener %s overlaps listener %s, also in %s (the same port on addresses that cover each other); list each address once", kind.proto, addr, e, kind.key)
		}
	}
	_, port, _ := net.SplitHostPort(addr)
	return fmt.Errorf("%s listener %s: port %s is already taken by another program (`ss -ltnp 'sport = :%s'` shows which): stop it or change %s", kind.proto, addr, port, port, kind.key)
}

// overlaps reports whether two listen addresses of this process would claim
// the same socket address.
func overlaps(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb {
		return false
	}
	na, nb := listenNetwork(a), listenNetwork(b)
	if na == "tcp" || nb == "tcp" {
		// A dual-stack socket (or a name resolving to either family)
		// covers every address of the port.
		return true
	}
	if na != nb {
		return false
	}
	ia, ib := net.ParseIP(ha), net.ParseIP(hb)
	return ia.IsUnspecified() || ib.IsUnspecified() || ia.Equal(ib)
}
