// Command fakesock serves internal/fakedaemon on a Unix socket so that the
// end-to-end MCP client (test/mcp/e2e.mjs) can run without a real daemon:
//
//	go run ./test/mcp/fakesock -dir /tmp/fake &   # prints the socket path
//	MAILCTL_SOCKET=/tmp/fake/mailctl.sock node test/mcp/e2e.mjs
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mailctl/mailctl/internal/fakedaemon"
)

func main() {
	dir := flag.String("dir", "", "directory for the socket and mailbox folders (created)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "fakesock: -dir is required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "fakesock:", err)
		os.Exit(1)
	}
	os.Remove(*dir + "/mailctl.sock")
	d, err := fakedaemon.Start(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakesock:", err)
		os.Exit(1)
	}
	fmt.Println(d.Socket())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	d.Close()
}
