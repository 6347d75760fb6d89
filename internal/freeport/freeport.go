// Package freeport finds loopback addresses for tests that must name a port
// before the program that listens on it starts (a child process, a config
// file). A port is only free a moment ago: whoever listens on it should fail
// loudly if it was taken since.
package freeport

import (
	"net"
	"testing"
)

// TCP returns "127.0.0.1:port" with a TCP port that was free a moment ago.
func TCP(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TCPAndUDP returns "127.0.0.1:port" with a port that was free a moment ago
// for both TCP and UDP (for a DNS server, which listens on both).
func TCPAndUDP(tb testing.TB) string {
	tb.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr
		}
	}
	tb.Fatal("no loopback port free for both TCP and UDP")
	return ""
}
