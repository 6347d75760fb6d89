package smtpin

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestListenNamesTheRightListener checks the error a bind failure gives: it
// names the configured address that failed, and says whether an earlier
// address of the same list or another program holds the port.
func TestListenNamesTheRightListener(t *testing.T) {
	held, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()

	for _, tc := range []struct {
		addrs []string
		want  []string
	}{
		{[]string{fmt.Sprintf("127.0.0.1:%d", port)}, []string{fmt.Sprintf("SMTP listener 127.0.0.1:%d: port %d is already taken by another program", port, port), "ss -ltnp"}},
		{[]string{fmt.Sprintf(":%d", freePort), fmt.Sprintf("127.0.0.1:%d", freePort)}, []string{fmt.Sprintf("SMTP listener 127.0.0.1:%d overlaps listener :%d", freePort, freePort)}},
	} {
		lns, _, err := Listen(context.Background(), tc.addrs)
		for _, l := range lns {
			l.Close()
		}
		if err == nil {
			t.Errorf("%v: bound", tc.addrs)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", tc.addrs, err, w)
			}
		}
	}
	// After a failure nothing stays bound.
	lns, _, err := Listen(context.Background(), []string{fmt.Sprintf("127.0.0.1:%d", freePort)})
	if err != nil {
		t.Fatalf("the port of a failed list is still held: %v", err)
	}
	lns[0].Close()
}

func TestListenNetwork(t *testing.T) {
	for addr, want := range map[string]string{"0.0.0.0:25": "tcp4", "[::]:25": "tcp6", "192.0.2.1:25": "tcp4",
		"[2001:db8::1]:25": "tcp6", ":25": "tcp", "localhost:25": "tcp", "[::ffff:192.0.2.1]:25": "tcp4"} {
		if got := listenNetwork(addr); got != want {
			t.Errorf("listenNetwork(%q) = %q, want %q", addr, got, want)
		}
	}
}
