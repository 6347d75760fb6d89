package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/testdaemon"
	"github.com/mailctl/mailctl/internal/testproc"
	"github.com/mailctl/mailctl/internal/testwait"
)

// Regression: `mailctl mcp` sent SIGTERM or SIGINT while an email_wait ran
// stayed up until the wait's own timeout (the SDK's session close waits for
// running calls without cancelling them). A signal now cancels every running
// call, closing its daemon watch, and the process exits 0 at once; stdin,
// which the harness may keep open, does not matter.
func TestMCPSignalStopsAWait(t *testing.T) {
	d := testdaemon.Start(t)
	d.Mailbox(t, "agent")
	for name, sig := range map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "mcp", "--socket", d.Socket)
			cmd.Env = append(os.Environ(), "MAILCTL_AS_BINARY=1")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr testproc.Output
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			var p testproc.Proc
			if err := p.Start(cmd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill9)
			io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`+"\n"+
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
				`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"email_wait","arguments":{"mailbox":"agent","timeout_secs":600}}}`+"\n")
			testwait.For(t, "the wait's watch", func() bool { return d.Watchers() > 0 })
			syscall.Kill(p.PID(), sig)
			select {
			case <-p.Done():
			case <-time.After(testwait.Timeout):
				p.Kill9()
				t.Fatalf("mailctl mcp still running %v after %s, held by the wait; stderr:\n%s", testwait.Timeout, name, stderr.String())
			}
			if st := p.State(); st.ExitCode() != 0 {
				t.Errorf("mailctl mcp after %s: %v, want exit 0; stderr:\n%s", name, st, stderr.String())
			}
			testwait.For(t, "the wait's watch to end", func() bool { return d.Watchers() == 0 })
			stdin.Close()
		})
	}
}
