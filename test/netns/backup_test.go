package netns

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/internal/testusers"
	"github.com/mailctl/mailctl/protocol"
)

// backupDocCommands are the command lines of docs/operations.md's "Backups
// and restore" section, without their sudo: the test runs the page.
func backupDocCommands(t *testing.T) (backup, restore string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Backups and restore\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "## Backups and restore" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, m := range regexp.MustCompile(`(?m)^sudo (mailctl (?:backup|restore) .*)$`).FindAllStringSubmatch(section, -1) {
		if strings.HasPrefix(m[1], "mailctl backup") && backup == "" {
			backup = m[1]
		}
		if strings.HasPrefix(m[1], "mailctl restore") && restore == "" {
			restore = m[1]
		}
	}
	if backup == "" || restore == "" {
		t.Fatalf("docs/operations.md's backup section shows no `sudo mailctl backup` or `sudo mailctl restore` line (got %q, %q)", backup, restore)
	}
	return backup, restore
}

// runDocLine runs one documented command line in dir with the host's config.
func runDocLine(t *testing.T, line, dir, cfg string) string {
	t.Helper()
	f := strings.Fields(line)
	cmd := exec.Command(mailctlBin, f[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MAILCTL_CONFIG="+cfg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("`%s`: %v\n%s", line, err, out)
	}
	return string(out)
}

// TestBackupUnderLoadRestoredElsewhere: host A receives mail over SMTP from
// four senders while `mailctl backup` runs (the lines of
// docs/operations.md, as written) and holds sends in its queue; host B, a
// second daemon on which the mailbox owner has the same name but another
// uid, is restored from the archive with `mailctl restore` and started.
// Every message acknowledged before the backup began is in B once, no
// message is in B twice, every queued item and its sent copy is there, and
// both mailboxes (one declared, one made over the socket) belong to the
// owner's new uid.
func TestBackupUnderLoadRestoredElsewhere(t *testing.T) {
	requireLab(t)
	backupLine, restoreLine := backupDocCommands(t)
	l := newLab(t)
	client := l.addHost("c")
	a := l.newMailHost("a", "a.test", hostOptions{Hold: true})
	if err := a.call(protocol.VerbMailboxCreate, protocol.MailboxCreateArgs{Name: "made", Owner: a.Owner.Name}, nil); err != nil {
		t.Fatal(err)
	}
	var queued, sentIDs []string // Message-IDs and sent copies of the held sends
	for i := range 5 {
		res := a.send(protocol.SendArgs{FromMailbox: "agent", To: []string{fmt.Sprintf("r%d@elsewhere.test", i)}, Subject: fmt.Sprint("held ", i), Body: "b"})
		queued = append(queued, strings.Trim(res.MessageID, "<>"))
		sentIDs = append(sentIDs, res.ID)
	}

	// Four senders deliver until told to stop; each acknowledged message
	// is recorded with when its session ended.
	type acked struct {
		mid, mailbox string
		at           time.Time
	}
	var mu sync.Mutex
	var acks []acked
	var failures []string
	stop := make(chan struct{})
	flowing := make(chan struct{}, 1000)
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				box := []string{"agent", "made"}[i%2]
				mid := fmt.Sprintf("load-%d-%d@client.test", s, i)
				msg := crlf(fmt.Sprintf("From: s%d@client.test\nTo: %s@a.test\nSubject: load %d %d\nMessage-ID: <%s>\n\nmessage %d of sender %d\n", s, box, s, i, mid, i, s))
				err := smtpDeliver(client.NS, a.Addr(), "client.test", fmt.Sprintf("s%d@client.test", s), box+"@a.test", msg, false)
				mu.Lock()
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					acks = append(acks, acked{mid, box, time.Now()})
				}
				mu.Unlock()
				if err == nil {
					select {
					case flowing <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	// Mail is flowing once 200 messages are in.
	for range 200 {
		select {
		case <-flowing:
		case <-time.After(60 * time.Second):
			t.Fatalf("the senders got no acknowledgements; failures: %v", failures)
		}
	}
	work := testusers.SharedDir(t)
	cutStart := time.Now()
	out := runDocLine(t, backupLine, work, a.cfg)
	t.Logf("%s\n%s", backupLine, out)
	if ents, err := os.ReadDir(work); err != nil {
		t.Fatal(err)
	} else {
		for _, e := range ents {
			if safeio.IsTemp(e.Name()) {
				t.Errorf("the backup left %s beside its archive", e.Name())
			}
		}
	}
	// A few more arrive after the backup, then the senders stop.
	for range 40 {
		select {
		case <-flowing:
		case <-time.After(60 * time.Second):
			t.Fatalf("the senders stopped getting acknowledgements after the backup; failures: %v", failures)
		}
	}
	close(stop)
	wg.Wait()
	a.stop()
	if len(failures) > 0 {
		t.Errorf("%d SMTP sessions failed during the backup, first: %s", len(failures), failures[0])
	}

	// The owner's name on host B is the same, its uid another.
	name, oldUID := a.Owner.Name, a.Owner.UID
	if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
		t.Fatalf("userdel: %v %s", err, out)
	}
	newUID := freeUID(t)
	if out, err := exec.Command("useradd", "-M", "-U", "-u", strconv.Itoa(int(newUID)), "-d", a.Owner.Home, "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(u.Gid)
	ownerB := testusers.User{Name: name, UID: newUID, GID: uint32(gid), Home: a.Owner.Home}
	var restoreOut string
	b := l.newMailHost("b", "a.test", hostOptions{Owner: &ownerB, NoPublish: true, Hold: true, BeforeStart: func(h *mailHost) {
		restoreOut = runDocLine(t, restoreLine, work, h.cfg)
		// Each held send's sent copy is restored: written in the
		// mailbox, or carried by its queue item, which writes it when
		// the daemon starts.
		inJournal := map[string]bool{}
		f, err := os.Open(filepath.Join(h.State, "queue", queue.JournalName))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := queue.RewriteJournal(f, io.Discard, func(st []byte) ([]byte, error) {
			var it struct {
				SentID   string `json:"sent_id"`
				CopySize int64  `json:"copy_size"`
			}
			if json.Unmarshal(st, &it) == nil && it.CopySize > 0 {
				inJournal[it.SentID] = true
			}
			return st, nil
		}); err != nil {
			t.Fatalf("the restored queue journal: %v", err)
		}
		for _, id := range sentIDs {
			if _, err := os.Stat(filepath.Join(h.State, "mailboxes", "agent", "sent", id+".md")); err != nil && !inJournal[id] {
				t.Errorf("sent copy %s is neither in the restored mailbox nor in the restored queue", id)
			}
		}
	}})
	t.Logf("%s\n%s", restoreLine, restoreOut)

	count := map[string]int{}
	for _, box := range []string{"agent", "made"} {
		for _, m := range b.folder(box, "inbox") {
			count[strings.Trim(m.Meta.MessageID, "<>")]++
		}
		ents, _ := os.ReadDir(filepath.Join(b.State, "mailboxes", box, "inbox"))
		for _, e := range ents {
			var st syscall.Stat_t
			syscall.Lstat(filepath.Join(b.State, "mailboxes", box, "inbox", e.Name()), &st)
			if st.Uid != newUID {
				t.Errorf("%s/inbox/%s on B is owned by uid %d, want %d (the owner's uid on B; %d on A)", box, e.Name(), st.Uid, newUID, oldUID)
			}
		}
	}
	before, after := 0, 0
	known := map[string]bool{}
	for _, k := range acks {
		known[k.mid] = true
		if k.at.Before(cutStart) {
			before++
			if count[k.mid] != 1 {
				t.Errorf("%s, acknowledged before the backup began, is in B %d times", k.mid, count[k.mid])
			}
		} else if count[k.mid] > 0 {
			after++
		}
	}
	for mid, n := range count {
		if n > 1 {
			t.Errorf("%s is in B %d times", mid, n)
		}
		if !known[mid] {
			t.Errorf("B holds %s, which no sender had acknowledged", mid)
		}
	}
	items := b.queueIDs()
	for _, mid := range queued {
		if _, ok := items[mid]; !ok {
			t.Errorf("queued send %s is not in B's queue (B has %d items)", mid, len(items))
		}
	}
	if len(items) != len(queued) {
		t.Errorf("B's queue holds %d items, want %d", len(items), len(queued))
	}
	var list protocol.MailboxList
	if err := b.call(protocol.VerbMailboxList, nil, &list); err != nil {
		t.Fatal(err)
	}
	owners := map[string]uint32{}
	for _, m := range list.Mailboxes {
		owners[m.Name] = m.OwnerUID
	}
	for _, box := range []string{"agent", "made"} {
		if uid, ok := owners[box]; !ok || uid != newUID {
			t.Errorf("B's mailbox %s: present %v, owner uid %d, want %d", box, ok, uid, newUID)
		}
	}
	summary(t, "backup-restore", "%d messages acknowledged during the load (%d before the backup began, all in B once; %d after, in B too), %d queued items, 2 mailboxes moved from uid %d to %d",
		len(acks), before, after, len(queued), oldUID, newUID)
}

// freeUID is a uid no user has, from a range of its own, so that a user
// made with it does not take the uid another test asks UnusedUID for.
func freeUID(t *testing.T) uint32 {
	t.Helper()
	for uid := 47000 + uint32(os.Getpid()%1000); uid < 49000; uid++ {
		if _, err := user.LookupId(strconv.Itoa(int(uid))); err != nil {
			return uid
		}
	}
	t.Fatal("no free uid in 47000-49000")
	return 0
}
