package daemon

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
)

// portFreeOnBothFamilies finds a port that nothing holds on IPv4 or IPv6.
func portFreeOnBothFamilies(t *testing.T) int {
	t.Helper()
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("this host has no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	for range 20 {
		l4, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l4.Addr().(*net.TCPAddr).Port
		l6, err := net.Listen("tcp6", fmt.Sprintf("[::]:%d", port))
		l4.Close()
		if err == nil {
			l6.Close()
			return port
		}
	}
	t.Fatal("no port free on both IPv4 and IPv6")
	return 0
}

// TestDefaultListenersServeIPv4AndIPv6 starts the daemon on the listeners
// `mailctl setup` and the config default to (0.0.0.0 and [::], on a free
// port instead of 25) and reaches it over both families. With Go's
// dual-stack wildcard sockets the second bind failed on a stock Linux host
// (net.ipv6.bindv6only=0) and the daemon did not start.
func TestDefaultListenersServeIPv4AndIPv6(t *testing.T) {
	port := portFreeOnBothFamilies(t)
	var quoted []string
	for _, a := range config.DefaultSMTPListen {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		quoted = append(quoted, strconv.Quote(net.JoinHostPort(host, strconv.Itoa(port))))
	}
	td := startDaemonSMTP(t, "", "listen = ["+strings.Join(quoted, ", ")+"]", Options{})
	for _, addr := range []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("[::1]:%d", port)} {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dialing %s: %v", addr, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		banner, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(banner, "220 ") {
			t.Errorf("%s: banner %q, %v", addr, banner, err)
		}
	}
	if got := len(td.SMTPAddrs()); got != 2 {
		t.Errorf("%d SMTP listeners up, want 2: %v", got, td.SMTPAddrs())
	}
}
