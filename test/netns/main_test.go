// Package netns proves mailctl the way an operator would see it: real
// `mailctl serve` daemons in their own network namespaces, each with a
// private address and port 25, a DNS server (dnstestd) publishing MX, A, SPF,
// DKIM and DMARC records for them, and faults injected at the network, DNS,
// disk and process level. Every scenario ends with one "SCENARIO name: ok"
// line. It needs root and a working `ip netns`; otherwise every test skips.
//
//	sudo go test ./test/netns/ -v
package netns

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/testbin"
)

// Binaries built once by TestMain.
var (
	mailctlBin  string
	dnstestdBin string
	// skipReason is set when this machine cannot run the scenarios.
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	// Fuzzing runs only the fuzz targets, in many worker processes: do not
	// build or probe in each of them.
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		skipReason = "not while fuzzing"
		return m.Run()
	}
	skipReason = probe()
	if skipReason != "" {
		return m.Run()
	}
	removeStale()
	defer testbin.Cleanup()
	var err error
	if mailctlBin, err = testbin.Mailctl(); err == nil {
		dnstestdBin, err = testbin.Build("./internal/dnstest/cmd/dnstestd")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// probe says why the scenarios cannot run here, or "" when they can.
func probe() string {
	if os.Geteuid() != 0 {
		return "needs root for network namespaces (run: sudo go test ./test/netns/ -v)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) is not installed"
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		return "useradd is not available"
	}
	name := "mctl-probe-" + randHex(3)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns does not work here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	exec.Command("ip", "netns", "del", name).Run()
	return ""
}

// requireLab skips t when the machine cannot run the scenarios.
func requireLab(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// removeStale deletes namespaces (mctl-<pid>-…) left by an earlier run that
// was killed before its cleanup ran, with whatever still runs inside them.
// Those of a run whose process still lives are left alone.
func removeStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "mctl-") {
			continue
		}
		pidField, _, _ := strings.Cut(strings.TrimPrefix(f[0], "mctl-"), "-")
		if pid, err := strconv.Atoi(pidField); err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			continue
		}
		killNS(f[0])
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// summary reports a scenario's result line in the test log and on stdout,
// where CI collects them; a scenario with failed checks reports FAILED.
func summary(t *testing.T, name, format string, args ...any) {
	t.Helper()
	if t.Failed() {
		line := fmt.Sprintf("SCENARIO %s: FAILED "+format, append([]any{name}, args...)...)
		t.Log(line)
		fmt.Println(line)
		return
	}
	line := fmt.Sprintf("SCENARIO %s: ok "+format, append([]any{name}, args...)...)
	t.Log(line)
	fmt.Println(line)
}
