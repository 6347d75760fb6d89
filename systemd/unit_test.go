package systemd

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// directives parses a unit file into key → values (a key may repeat).
func directives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("malformed line %q", line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

func TestUnitDirectives(t *testing.T) {
	d := directives(t, "mailctl.service")
	want := map[string]string{
		"Type":                    "notify",
		"ExecStart":               "/usr/bin/mailctl serve",
		"ExecReload":              "/usr/bin/mailctl reload $MAINPID",
		"RuntimeDirectory":        "mailctl",
		"RuntimeDirectoryMode":    "0755",
		"StateDirectory":          "mailctl",
		"StateDirectoryMode":      "0711",
		"ConfigurationDirectory":  "mailctl",
		"Restart":                 "on-failure",
		"ProtectSystem":           "strict",
		"NoNewPrivileges":         "yes",
		"PrivateTmp":              "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectKernelLogs":       "yes",
		"ProtectControlGroups":    "yes",
		"RestrictSUIDSGID":        "yes",
		"LockPersonality":         "yes",
		"RestrictRealtime":        "yes",
		"SystemCallFilter":        "@system-service",
		"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
		"ConditionPathExists":     "/etc/mailctl/config.toml",
	}
	for k, v := range want {
		if got := d[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// The bounding set is exactly what docs/operations.md justifies: nothing
	// like CAP_SYS_ADMIN or CAP_SYS_PTRACE may creep in.
	caps := strings.Fields(strings.Join(d["CapabilityBoundingSet"], " "))
	allowed := map[string]bool{"CAP_NET_BIND_SERVICE": true, "CAP_CHOWN": true, "CAP_FOWNER": true,
		"CAP_DAC_OVERRIDE": true, "CAP_SETUID": true, "CAP_SETGID": true, "CAP_KILL": true}
	if len(caps) != len(allowed) {
		t.Errorf("CapabilityBoundingSet = %v, want exactly %d capabilities", caps, len(allowed))
	}
	for _, c := range caps {
		if !allowed[c] {
			t.Errorf("capability %s is not justified in docs/operations.md", c)
		}
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for c := range allowed {
		if !bytes.Contains(doc, []byte(c)) {
			t.Errorf("docs/operations.md does not explain %s", c)
		}
	}
}

// analyzeUnit copies the unit next to a stand-in executable so that verify's
// "command is not executable" check passes on machines without the package.
func analyzeUnit(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mailctl")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile("mailctl.service")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(unit), "/usr/bin/mailctl", bin)
	if edit != nil {
		text = edit(text)
	}
	path := filepath.Join(dir, "mailctl.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt package systemd): cannot verify the unit here")
	}
	return p
}

func runAnalyze(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, systemdAnalyze(t), args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_COLORS=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSystemdAnalyzeVerify(t *testing.T) {
	systemdAnalyze(t)
	// verify warns (exit 0) about unknown values; any output is a failure.
	out, err := runAnalyze(t, "verify", "--man=no", analyzeUnit(t, nil))
	if err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check above must be able to fail: a typo is reported.
	out, _ = runAnalyze(t, "verify", "--man=no", analyzeUnit(t, func(s string) string {
		return strings.Replace(s, "Type=notify", "Type=notifyy", 1)
	}))
	if !strings.Contains(out, "notifyy") {
		t.Fatalf("verify did not report a broken Type=: %q", out)
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`)

// TestSecurityExposure records the score `systemd-analyze security
// --offline=yes` gives the unit; docs/operations.md quotes it. A score above
// 4.0 means a hardening line was lost.
func TestSecurityExposure(t *testing.T) {
	systemdAnalyze(t)
	out, err := runAnalyze(t, "security", "--offline=yes", "--no-pager", analyzeUnit(t, nil))
	m := exposureRE.FindStringSubmatch(out)
	if m == nil {
		t.Skipf("this systemd-analyze cannot score offline (%v): %s", err, out)
	}
	t.Logf("systemd-analyze security --offline=yes mailctl.service: %s %s", m[1], m[2])
	if score, err := strconv.ParseFloat(m[1], 64); err != nil || score > 4.0 {
		t.Errorf("exposure %s is worse than the 4.0 the docs promise", m[1])
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	// The docs quote the score of one systemd version; other versions weigh
	// settings differently, so only the same version must agree.
	ver, _ := runAnalyze(t, "--version")
	vm := regexp.MustCompile(`^systemd (\d+)`).FindStringSubmatch(ver)
	if vm == nil || !bytes.Contains(doc, []byte("(systemd "+vm[1]+",")) {
		t.Logf("docs/operations.md quotes another systemd version than %q; not comparing scores", strings.SplitN(ver, "\n", 2)[0])
		return
	}
	if !bytes.Contains(doc, []byte("exposure level "+m[1])) {
		t.Errorf("docs/operations.md does not quote the measured exposure level %s", m[1])
	}
}

func TestTmpfiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("systemd-tmpfiles --root chowns to root: run as root")
	}
	p, err := exec.LookPath("systemd-tmpfiles")
	if err != nil {
		t.Skip("systemd-tmpfiles not installed (apt package systemd)")
	}
	root := t.TempDir()
	abs, _ := filepath.Abs("mailctl.tmpfiles")
	if out, err := exec.Command(p, "--create", "--root="+root, abs).CombinedOutput(); err != nil {
		t.Fatalf("systemd-tmpfiles: %v\n%s", err, out)
	}
	for path, mode := range map[string]os.FileMode{
		"run/mailctl": 0o755, "var/lib/mailctl": 0o711, "var/lib/mailctl/registry": 0o700,
		"var/lib/mailctl/queue": 0o700, "var/lib/mailctl/mailboxes": 0o711, "etc/mailctl/dkim": 0o700,
	} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s mode %o, want %o", path, got, mode)
		}
	}
}
