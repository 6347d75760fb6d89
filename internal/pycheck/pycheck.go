// Package pycheck is a test helper: it checks messages with Python's email
// package and python3-dkim, implementations independent of ours. Tests that
// need a module skip, saying which package to install, when it is missing.
package pycheck

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"
)

// Have reports whether /usr/bin/python3 can import mod, logging when not.
func Have(t testing.TB, mod string) bool {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import "+mod).Run(); err != nil {
		t.Logf("python3 module %s missing: not checked", mod)
		return false
	}
	return true
}

const pyEmail = `
import sys, json, email
from email import policy
m = email.message_from_binary_file(sys.stdin.buffer, policy=policy.default)
html = m.get_body(preferencelist=('html',))
text = m.get_body(preferencelist=('plain',))
print(json.dumps({
  "subject": str(m["subject"]),
  "from": str(m["from"]),
  "to": str(m["to"]),
  "bcc": m["bcc"],
  "filenames": [p.get_filename() for p in m.iter_attachments()],
  "attachments": [p.get_content().decode() if isinstance(p.get_content(), bytes) else p.get_content() for p in m.iter_attachments()],
  "html": html.get_content() if html is not None else "",
  "text": text.get_content() if text is not None else "",
}))
`

// ParseMIME decodes a message with Python's email package, an independent
// MIME implementation.
func ParseMIME(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("python3 not installed")
	}
	cmd := exec.Command("/usr/bin/python3", "-c", pyEmail)
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python email: %v\n%s", err, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("python output %q: %v", out, err)
	}
	return m
}

// pythonDKIM verifies every signature of each message (a JSON list of
// base64 messages on stdin) with python3-dkim, one process for all of them
// because importing dkim is slow.
const pythonDKIM = `
import sys, json, base64, dkim
txt = json.loads(sys.argv[1])
n = int(sys.argv[2])
msgs = [base64.b64decode(m) for m in json.load(sys.stdin)]
def dnsfunc(name, timeout=5):
    n_ = name.decode() if isinstance(name, bytes) else name
    return txt.get(n_.rstrip('.'), '').encode()
out = []
for msg in msgs:
    res = []
    for i in range(n):
        try:
            res.append(bool(dkim.DKIM(msg).verify(idx=i, dnsfunc=dnsfunc)))
        except dkim.ValidationError:
            res.append(False)
    out.append(res)
print(json.dumps(out))
`

func Need(t testing.TB, mod string) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import "+mod).Run(); err != nil {
		t.Skipf("python3 module %s not available (apt install python3-%s): %v", mod, mod, err)
	}
}

// VerifyDKIM returns, per message, one verdict per signature.
func VerifyDKIM(t testing.TB, txt map[string]string, n int, msgs ...[]byte) [][]bool {
	t.Helper()
	tj, _ := json.Marshal(txt)
	in, _ := json.Marshal(msgs) // []byte marshals as base64
	cmd := exec.Command("/usr/bin/python3", "-c", pythonDKIM, string(tj), strconv.Itoa(n))
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3-dkim: %v\n%s", err, out)
	}
	var res [][]bool
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || len(res) != len(msgs) {
		t.Fatalf("python3-dkim output %q: %v", out, err)
	}
	return res
}
