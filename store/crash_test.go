package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashEnv tells a re-executed test binary to act as the crashing writer.
const crashEnv = "MAILCTL_STORE_CRASH_ROOT"

// TestCrashChild is the writer of TestCrashDuringDelivery: it delivers
// messages in a loop and prints each id once Deliver has returned, until it is
// killed.
func TestCrashChild(t *testing.T) {
	root := os.Getenv(crashEnv)
	if root == "" {
		t.Skip("only runs as the child of TestCrashDuringDelivery")
	}
	// The index beside the mailboxes, in the parent's temporary folder:
	// this process is killed, and Open's own temporary index folder would
	// outlive it.
	s, err := OpenIndexed(root, filepath.Join(filepath.Dir(root), "index", IndexFile))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	body := strings.Repeat("line of body text\n", 2000)
	for i := 0; ; i++ {
		m := testMessage(i)
		m.ReceivedAt = time.Now().UTC()
		m.MessageID = fmt.Sprintf("<%d.%d@crash.test>", os.Getpid(), i)
		atts := []AttachmentData{{Filename: "data.bin", Data: []byte(strings.Repeat("A", 50000))}}
		id, _, err := s.Deliver("agent", "inbox", m, body, []byte("raw "+body), atts)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(id)
	}
}

func TestCrashDuringDelivery(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("this is the child")
	}
	root := filepath.Join(t.TempDir(), "mailboxes")
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("agent", os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	s.Close()

	var acked []string
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+root)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 3 + rand.IntN(15)
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "error") {
				t.Fatalf("child: %s", line)
			}
			if ValidID(line) != nil {
				continue // test framework output
			}
			acked = append(acked, line)
			n++
			if n == killAfter {
				// Let the child get into its next write before the kill.
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		cmd.Wait()
		if n < killAfter {
			t.Fatalf("round %d: child stopped after %d messages", round, n)
		}
		verifyAfterCrash(t, root, acked, round+1)
	}
}

// verifyAfterCrash checks, with a fresh store, that every acknowledged message
// is complete and that no partial message is visible.
func verifyAfterCrash(t *testing.T, root string, acked []string, unacked int) {
	t.Helper()
	// What a crash in the middle of a write leaves, in case the kill did
	// not land there this time.
	half := Render(testMessage(99), "half")
	os.WriteFile(filepath.Join(root, "agent", "inbox", TempPrefix+"0123456789abcdef"), half[:len(half)/2], 0o600)
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range acked {
		m, body, err := s.Get("agent", "inbox", id)
		if err != nil {
			t.Fatalf("acknowledged %s: %v", id, err)
		}
		if len(body) != 2000*18 || len(m.Attachments) != 1 {
			t.Errorf("acknowledged %s is incomplete: body %d bytes, %d attachments", id, len(body), len(m.Attachments))
		}
		raw, err := s.Raw("agent", "inbox", id, 1<<20)
		if err != nil || len(raw) != 4+len(body) {
			t.Errorf("raw of %s: %d bytes, %v", id, len(raw), err)
		}
		att, err := os.ReadFile(filepath.Join(root, "agent", "inbox", m.Attachments[0].Path))
		if err != nil || len(att) != 50000 {
			t.Errorf("attachment of %s: %d bytes, %v", id, len(att), err)
		}
	}
	inbox := filepath.Join(root, "agent", "inbox")
	entries, err := os.ReadDir(inbox)
	if err != nil {
		t.Fatal(err)
	}
	mds := 0
	for _, e := range entries {
		id, ok := mdID(e.Name())
		if !ok {
			continue
		}
		mds++
		data, err := os.ReadFile(filepath.Join(inbox, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Parse(data); err != nil {
			t.Errorf("%s is visible but does not parse: %v", id, err)
		}
	}
	total := 0
	q := Query{Limit: MaxLimit}
	for {
		p, err := s.List("agent", "inbox", q)
		if err != nil {
			t.Fatal(err)
		}
		total += len(p.Items)
		if !p.HasMore {
			break
		}
		q.Cursor = p.NextCursor
	}
	// Each killed child may have committed one message it did not print.
	if total != mds || mds < len(acked) || mds > len(acked)+unacked {
		t.Errorf("listed %d, %d .md files, %d acknowledged", total, mds, len(acked))
	}
}
