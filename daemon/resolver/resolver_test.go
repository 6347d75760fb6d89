package resolver

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestErrorNamesTheConfiguredServer: with dns.resolver set, a failed lookup
// names that server, not the first of /etc/resolv.conf, which was never asked.
func TestErrorNamesTheConfiguredServer(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := pc.LocalAddr().String()
	pc.Close() // nothing answers there: queries are refused
	_, err = New(server, 2*time.Second).LookupMX(context.Background(), "example.org")
	var de *net.DNSError
	if !errors.As(err, &de) {
		t.Fatalf("lookup through a closed port: %v", err)
	}
	if de.Server != server || !strings.Contains(err.Error(), " on "+server+":") {
		t.Errorf("the error names %q, want the configured %s: %v", de.Server, server, err)
	}
}
