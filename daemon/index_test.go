package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/internal/freeport"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/internal/testwait"
	"github.com/mailctl/mailctl/protocol"
)

// indexDaemon is a daemon whose SMTP port is known in advance, so that a
// copy of it run as a child process (which a test can kill -9) listens
// where the test sends, with DNS lookups that fail at once.
func indexDaemon(t *testing.T) (td *testDaemon, addr string) {
	t.Helper()
	addr = freeport.TCP(t)
	td = startDaemonSMTP(t, "[dns]\nresolver = \"127.0.0.1:9\"\n", fmt.Sprintf("listen = [%q]", addr), Options{})
	td.ensureMine(t, "agent")
	return td, addr
}

// daemonChild runs the daemon of cfg as a child process, with extra
// environment, and returns it once its socket answers.
func daemonChild(t *testing.T, td *testDaemon, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "MAILCTL_TEST_DAEMON="+td.cfg.File), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testwait.For(t, "the daemon's socket", func() bool {
		c, err := protocol.Dial(context.Background(), td.socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd
}

func kill9(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// plainSMTP sends msg without STARTTLS (the test daemon's certificate is
// its own) and reports the server's answer to DATA.
func plainSMTP(addr, from, to, msg string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Mail(from); err != nil {
		return err
	}
	if err := c.Rcpt(to); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte(strings.ReplaceAll(msg, "\n", "\r\n"))); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// listQuery lists the agent mailbox with a query over a fresh connection,
// once the daemon's start-up indexing has read the folder (until then a
// listing answers unavailable).
func listQuery(t *testing.T, socket, query string) protocol.MessageList {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var l protocol.MessageList
	testwait.For(t, "a listing of the indexed folder", func() bool {
		err := c.Call(ctx, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Query: query, Limit: 200}, &l)
		if err != nil && protocol.CodeOf(err) != protocol.CodeUnavailable {
			t.Fatal(err)
		}
		return err == nil
	})
	return l
}

// A sender that never saw our 250 sends the same message again; the daemon
// was killed (kill -9) after the 250, before its index row was written in
// one round and after it in the other. The repeat is stored once.
func TestRepeatAfterKillNineIsStoredOnce(t *testing.T) {
	td, addr := indexDaemon(t)
	td.stop()
	for i, phase := range []struct {
		name string
		hold string
	}{{"killed before the index write", "MAILCTL_TEST_HOLD_INDEX=1"}, {"killed after the index write", "MAILCTL_TEST_HOLD_INDEX="}} {
		word := fmt.Sprintf("repeatword%d", i)
		msg := fmt.Sprintf("From: a@example.org\nTo: agent@example.test\nSubject: %s\nMessage-ID: <repeat%d.%d@example.org>\n\nOnce only.\n", word, i, time.Now().UnixNano())
		cmd := daemonChild(t, td, phase.hold)
		if err := plainSMTP(addr, "a@example.org", "agent@example.test", msg); err != nil {
			t.Fatalf("%s: first delivery: %v", phase.name, err)
		}
		if phase.hold != "MAILCTL_TEST_HOLD_INDEX=" {
			// The row is held: the index does not have it.
			db, err := sql.Open("sqlite", "file:"+td.cfg.Paths.IndexFile()+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			var n int
			err = db.QueryRow("SELECT count(*) FROM messages WHERE subject = ?", word).Scan(&n)
			db.Close()
			if err != nil || n != 0 {
				t.Fatalf("%s: the index has the row already (%d, %v): the test would not test the first case", phase.name, n, err)
			}
		} else if l := listQuery(t, td.socket, word); len(l.Messages) != 1 {
			t.Fatalf("%s: indexed: %d rows", phase.name, len(l.Messages))
		}
		kill9(cmd)

		cmd = daemonChild(t, td)
		if err := plainSMTP(addr, "a@example.org", "agent@example.test", msg); err != nil {
			t.Fatalf("%s: repeat: %v", phase.name, err)
		}
		if l := listQuery(t, td.socket, word); len(l.Messages) != 1 {
			t.Errorf("%s: the repeat gave %d messages, want 1", phase.name, len(l.Messages))
		}
		files, _ := filepath.Glob(filepath.Join(td.store.Path("agent"), "inbox", "*-"+word+"*.md"))
		if len(files) != 1 {
			t.Errorf("%s: %d files: %v", phase.name, len(files), files)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
}

// kill -9 in the middle of a burst of deliveries (index writes in flight)
// leaves an index the restarted daemon uses whole: SQLite's integrity
// check passes and listings and searches show exactly the files.
func TestKillNineDuringIndexWritesLeavesAConsistentIndex(t *testing.T) {
	td, addr := indexDaemon(t)
	td.stop()
	for round := range 2 {
		cmd := daemonChild(t, td)
		var acked atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					msg := fmt.Sprintf("From: b@example.org\nTo: agent@example.test\nSubject: burst r%dw%dn%d\nMessage-ID: <b%d.%d.%d@example.org>\n\nwombat %d\n", round, w, i, round, w, i, i)
					if plainSMTP(addr, "b@example.org", "agent@example.test", msg) != nil {
						return
					}
					acked.Add(1)
				}
			}()
		}
		testwait.For(t, "some deliveries", func() bool { return acked.Load() >= 20 })
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond) // anywhere in the burst
		kill9(cmd)
		close(stop)
		wg.Wait()

		db, err := sql.Open("sqlite", "file:"+td.cfg.Paths.IndexFile()+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var check string
		if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
			t.Fatalf("round %d: integrity_check %q %v", round, check, err)
		}
		db.Close()

		cmd = daemonChild(t, td)
		files, _ := filepath.Glob(filepath.Join(td.store.Path("agent"), "inbox", "*.md"))
		all := listQuery(t, td.socket, "in:inbox")
		found := listQuery(t, td.socket, "wombat")
		if all.Total != len(files) || found.Total != len(files) || int64(len(files)) < acked.Load() {
			t.Errorf("round %d: %d files, %d acknowledged, %d listed, %d found", round, len(files), acked.Load(), all.Total, found.Total)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
}

// index.rebuild is root's: the index is thrown away and read back from the
// files; listings show the same and search finds the same.
func TestIndexRebuildVerb(t *testing.T) {
	testusers.RequireRoot(t)
	td, addr := indexDaemon(t)
	for i := range 5 {
		msg := fmt.Sprintf("From: c@example.org\nTo: agent@example.test\nSubject: rebuild %d\nMessage-ID: <r%d@example.org>\n\nechidna %d\n", i, i, i)
		if err := plainSMTP(addr, "c@example.org", "agent@example.test", msg); err != nil {
			t.Fatal(err)
		}
	}
	before := listQuery(t, td.socket, "echidna")
	u := testusers.Create(t, "mcix")
	user := startClient(t, testusers.Executable(t), td.socket, principal{"user", u.UID, u.GID})
	if o := user.do(t, protocol.VerbIndexRebuild, nil); o.Code != protocol.CodeForbidden {
		t.Errorf("a user rebuilding the index: %+v", o)
	}
	var out protocol.IndexRebuild
	if err := td.call(t, protocol.VerbIndexRebuild, nil, &out); err != nil || !out.Started || out.Mailboxes < 1 {
		t.Fatalf("index.rebuild: %+v %v", out, err)
	}
	// While the files are read back, a listing says so (unavailable);
	// then it lists what it did before.
	var after protocol.MessageList
	testwait.For(t, "the index read back", func() bool {
		err := td.call(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "agent", Query: "echidna"}, &after)
		if err != nil && protocol.CodeOf(err) != protocol.CodeUnavailable {
			t.Fatalf("listing during the rebuild: %v", err)
		}
		return err == nil
	})
	if before.Total != 5 || after.Total != 5 {
		t.Errorf("found %d before the rebuild and %d after, want 5", before.Total, after.Total)
	}
}

// The index is out of every owner's reach: a mailbox owner can neither
// write the database nor put a file into its directory.
func TestIndexOwnerCannotWriteIt(t *testing.T) {
	testusers.RequireRoot(t)
	td, _ := indexDaemon(t)
	listQuery(t, td.socket, "anything")
	u := testusers.Create(t, "mciw")
	idx := td.cfg.Paths.IndexFile()
	for _, script := range []string{
		"echo x >> " + idx,
		"echo x > " + filepath.Join(filepath.Dir(idx), "planted"),
		"ln -s /etc/shadow " + filepath.Join(filepath.Dir(idx), "index.db-wal"),
		"cat " + idx,
	} {
		cmd := testusers.As(exec.Command("/bin/sh", "-c", script), u.UID, u.GID)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("a user ran %q: %s", script, out)
		}
	}
	st, err := os.Stat(filepath.Dir(idx))
	if err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("index directory: %v %v", st.Mode(), err)
	}
}

// User B's searches never return user A's messages, whatever the query.
func TestSearchCrossUser(t *testing.T) {
	testusers.RequireRoot(t)
	td, addr := indexDaemon(t)
	a, b := testusers.Create(t, "mcsa"), testusers.Create(t, "mcsb")
	for _, m := range []struct{ name, owner string }{{"alicebox", a.Name}, {"bobbox", b.Name}} {
		if err := td.call(t, protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: m.name, Owner: m.owner}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []struct{ to, body string }{{"alicebox", "alice's secret: aardvarkpass"}, {"bobbox", "bob's note: aardvark"}} {
		msg := fmt.Sprintf("From: d@example.org\nTo: %s@example.test\nSubject: note\nMessage-ID: <%s@example.org>\n\n%s\n", m.to, m.to, m.body)
		if err := plainSMTP(addr, "d@example.org", m.to+"@example.test", msg); err != nil {
			t.Fatal(err)
		}
	}
	bin := testusers.Executable(t)
	alice := startClient(t, bin, td.socket, principal{"alice", a.UID, a.GID})
	bob := startClient(t, bin, td.socket, principal{"bob", b.UID, b.GID})
	count := func(o clientOutcome) int {
		var l protocol.MessageList
		if o.Code != "" || json.Unmarshal(o.Data, &l) != nil {
			return -1
		}
		return l.Total
	}
	if n := count(alice.do(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alicebox", Query: "aardvarkpass"})); n != 1 {
		t.Fatalf("alice finds %d of her own", n)
	}
	for _, q := range []string{"aardvarkpass", "in:anywhere aardvarkpass", "in:anywhere", "aardvarkpass OR -aardvarkpass", "secret"} {
		if n := count(bob.do(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "bobbox", Query: q})); n > 1 || n < 0 ||
			(strings.Contains(q, "aardvarkpass") && !strings.Contains(q, "OR") && n != 0) {
			t.Errorf("bob's %q in his mailbox: %d rows", q, n)
		}
		if o := bob.do(t, protocol.VerbMessageList, protocol.MessageListArgs{Mailbox: "alicebox", Query: q}); o.Code != protocol.CodeNotFound {
			t.Errorf("bob's %q in alice's mailbox: %+v", q, o)
		}
	}
}
