package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/policy"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/internal/formats"
)

// sendStateManifest is an archive's manifest with mailbox agent of
// "someone" (uid 1234 there) and uid 555 named "other" by the send log.
func sendStateManifest(version int) entry {
	m := Manifest{Format: Format, Version: version, Users: map[string]string{"555": "other"},
		Mailboxes: []MailboxOwner{{Name: "agent", Owner: "someone", UID: 1234, GID: 1234}}}
	b, _ := json.Marshal(m)
	return entry{name: prefix + nameManifest, data: string(b)}
}

// givesToOtherUsers skips a test whose restore gives mailboxes to
// sendStateUsers' uids, which only root may give files to.
func givesToOtherUsers(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("restores mailboxes to other users' uids, which needs root (chown): run as root (CI does)")
	}
}

// sendStateUsers: someone is uid 2000 here, other 777; nobody else is a user.
func sendStateUsers(name string) (uint32, uint32, error) {
	switch name {
	case "someone":
		return 2000, 2000, nil
	case "other":
		return 777, 777, nil
	}
	return 0, 0, errors.New("no such user")
}

// dayUsed is how many sends of mailbox by uid the daemon's limiter, opened
// on the send log in state at now, counts in the day window.
func dayUsed(t *testing.T, state, mailbox string, uid uint32, now time.Time) int {
	t.Helper()
	rl, err := policy.OpenRateLimiter(filepath.Join(state, rateLogName), func() time.Time { return now }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	for _, u := range rl.Usage(mailbox, uid, config.SendPolicy{PerDay: 100}) {
		if u.Window == "day" {
			return u.Used
		}
	}
	t.Fatal("no day window")
	return 0
}

// TestRestoreCountsTheArchivesSends: the sends of the archive's send log
// count for their owners as this host numbers them, as the daemon reads
// the restored file (a line ending in a carriage return too, as the
// daemon reads its own file); a send older than the longest window has aged out,
// and one of an owner who is no user here counts for no one (its uid may
// be another user's here).
func TestRestoreCountsTheArchivesSends(t *testing.T) {
	givesToOtherUsers(t)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	line := func(ago time.Duration, uid uint32, mailbox string) string {
		return fmt.Sprintf("%d %d %q\n", now.Add(-ago).UnixNano(), uid, mailbox)
	}
	log := "mailctl ratelimit log 2\n" +
		line(time.Hour, 1234, "agent") + line(2*time.Hour, 1234, "agent") + // agent's owner
		strings.TrimSuffix(line(3*time.Hour, 1234, "agent"), "\n") + "\r\n" + // read as the daemon reads it
		line(25*time.Hour, 1234, "agent") + // aged out by the restore's time
		line(time.Hour, 555, "gone") + // a deleted mailbox's, of a user named other
		line(time.Hour, 999, "agent") + // an owner the archive names no user for
		"not a send\n"
	state := filepath.Join(t.TempDir(), "state")
	res, err := Restore(bytes.NewReader(archive(t, sendStateManifest(Version), entry{name: prefix + nameRateLog, data: log})),
		RestoreOptions{StateDir: state, LookupUser: sendStateUsers, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if !res.RateLog || res.RateSends != 4 || res.RateUnowned != 1 {
		t.Errorf("result: send log %v, %d sends, %d unowned; want true, 4, 1", res.RateLog, res.RateSends, res.RateUnowned)
	}
	for _, c := range []struct {
		mailbox string
		uid     uint32
		want    int
	}{{"agent", 2000, 3}, {"agent", 1234, 0}, {"gone", 777, 1}, {"agent", 999, 0}} {
		if got := dayUsed(t, state, c.mailbox, c.uid, now); got != c.want {
			t.Errorf("%s by uid %d: %d sends in the day, want %d", c.mailbox, c.uid, got, c.want)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(state, rateLogName), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 || st.Uid != uint32(os.Getuid()) {
		t.Errorf("restored send log: mode %o, uid %d; want 0600 and the restore's own", st.Mode&0o777, st.Uid)
	}
}

// TestRestoreRefusesANewerSendLog: a send log a later release wrote is
// refused, naming both versions, and what this host had is left as it is.
func TestRestoreRefusesANewerSendLog(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	os.MkdirAll(state, 0o711)
	mine := "mailctl ratelimit log 2\n1 0 \"agent\"\n"
	os.WriteFile(filepath.Join(state, rateLogName), []byte(mine), 0o600)
	newer := fmt.Sprintf("mailctl ratelimit log %d\n", formats.RateLimitLog+1)
	_, err := Restore(bytes.NewReader(archive(t, sendStateManifest(Version), entry{name: prefix + nameRateLog, data: newer})),
		RestoreOptions{StateDir: state, LookupUser: sendStateUsers, Force: true})
	want := fmt.Sprintf("format version %d, and this mailctl reads versions up to %d", formats.RateLimitLog+1, formats.RateLimitLog)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("restore: %v, want a refusal saying %q", err, want)
	}
	if got, _ := os.ReadFile(filepath.Join(state, rateLogName)); string(got) != mine {
		t.Errorf("the host's send log is now %q, want it kept", got)
	}
	if _, err := os.Stat(filepath.Join(state, IncompleteName)); !os.IsNotExist(err) {
		t.Errorf("a refused restore left %s (%v)", IncompleteName, err)
	}
}

// TestRestoreOfAnArchiveWithoutSendState: an archive of a release whose
// backups held neither the send log nor the idempotency records restores,
// says it restored none, and keeps this host's send log rather than taking
// its absence for an empty one.
func TestRestoreOfAnArchiveWithoutSendState(t *testing.T) {
	givesToOtherUsers(t)
	state := filepath.Join(t.TempDir(), "state")
	os.MkdirAll(state, 0o711)
	mine := "mailctl ratelimit log 2\n1 0 \"agent\"\n"
	os.WriteFile(filepath.Join(state, rateLogName), []byte(mine), 0o600)
	res, err := Restore(bytes.NewReader(archive(t, sendStateManifest(2),
		entry{name: prefix + nameJournal, data: "mailctl queue journal 1\n"},
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n"})),
		RestoreOptions{StateDir: state, LookupUser: sendStateUsers, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.RateLog || res.RateSends != 0 || res.RateUnowned != 0 || res.IdemRecords != 0 {
		t.Errorf("result: send log %v, %d sends, %d unowned, %d idempotency records; want none", res.RateLog, res.RateSends, res.RateUnowned, res.IdemRecords)
	}
	if got, _ := os.ReadFile(filepath.Join(state, rateLogName)); string(got) != mine {
		t.Errorf("the host's send log is now %q, want it kept", got)
	}
}

// TestRestoreFilesIdempotencyRecordsUnderTheMailboxHere: a record of an
// operator-declared mailbox, whose identity includes its owner's uid, is
// filed under the identity the mailbox has for its owner here, where a
// retry with its key looks; a record of an older release, which does not
// name its key, keeps its name.
func TestRestoreFilesIdempotencyRecordsUnderTheMailboxHere(t *testing.T) {
	givesToOtherUsers(t)
	there := registry.ConfigMailboxID("agent", 1234)
	rec := func(key string) string {
		r := map[string]string{"sent_id": "2026-11-29-120000-a", "message_id": "<a@x>", "mailbox": "agent", "mailbox_id": there, "key": key}
		b, _ := json.Marshal(r)
		return string(b)
	}
	oldName := queue.IdempotencyFile("agent", there, "old")
	state := filepath.Join(t.TempDir(), "state")
	res, err := Restore(bytes.NewReader(archive(t, sendStateManifest(Version),
		entry{name: prefix + dirIdem + queue.IdempotencyFile("agent", there, "k"), data: rec("k")},
		entry{name: prefix + dirIdem + oldName, data: `{"sent_id":"2026-11-29-120000-b","message_id":"<b@x>"}`})),
		RestoreOptions{StateDir: state, LookupUser: sendStateUsers})
	if err != nil {
		t.Fatal(err)
	}
	if res.IdemRecords != 2 {
		t.Errorf("%d idempotency records restored, want 2", res.IdemRecords)
	}
	dir := filepath.Join(state, "queue", queue.IdempotencyDir)
	here := registry.ConfigMailboxID("agent", 2000)
	data, err := os.ReadFile(filepath.Join(dir, queue.IdempotencyFile("agent", here, "k")))
	if err != nil {
		t.Fatalf("the record is not where a retry from the mailbox here looks: %v", err)
	}
	var got map[string]string
	json.Unmarshal(data, &got)
	if got["mailbox_id"] != here || got["sent_id"] != "2026-11-29-120000-a" {
		t.Errorf("the record here is %s, want it bound to %s", data, here)
	}
	if _, err := os.Stat(filepath.Join(dir, oldName)); err != nil {
		t.Errorf("the older release's record: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d files in %s, want 2", len(ents), dir)
	}
}

// TestRestoreRefusesAnIdempotencyRecordItCannotRead: a record that is not
// one, or one under a name the daemon never makes, stops the restore
// before anything is put in place.
func TestRestoreRefusesAnIdempotencyRecordItCannotRead(t *testing.T) {
	name := queue.IdempotencyFile("agent", "", "k")
	for _, tc := range []struct{ name, data, want string }{
		{name, "not json", "not an idempotency record"},
		{name, `{"message_id":"<a@x>"}`, "no sent_id"},
		{strings.ToUpper(strings.TrimSuffix(name, ".json")) + ".json", `{"sent_id":"a"}`, "not an idempotency record's name"},
		{"../../registry/mailboxes/x.json", `{"sent_id":"a"}`, "not an idempotency record's name"},
	} {
		state := filepath.Join(t.TempDir(), "state")
		_, err := Restore(bytes.NewReader(archive(t, sendStateManifest(Version), entry{name: prefix + dirIdem + tc.name, data: tc.data})),
			RestoreOptions{StateDir: state, LookupUser: sendStateUsers})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want a refusal saying %q", tc.name, tc.data, err, tc.want)
		}
		if _, err := os.Stat(filepath.Join(state, "queue")); !os.IsNotExist(err) {
			t.Errorf("%s %q: a refused restore put the queue in place (%v)", tc.name, tc.data, err)
		}
	}
}

// FuzzRateLog: an archive's send log, whatever it holds, is rewritten or
// refused, never more: what the rewrite writes is a log of this build's
// format whose every line reads back, as many as it says it kept, each
// inside the window and with the uid the mapping gave.
func FuzzRateLog(f *testing.F) {
	head := "mailctl ratelimit log " + fmt.Sprint(formats.RateLimitLog) + "\n"
	now := time.Unix(1_800_000_000, 0)
	f.Add(head + fmt.Sprintf("%d 1234 \"agent\"\n%d 555 \"other\"\n", now.Add(-time.Hour).UnixNano(), now.Add(-48*time.Hour).UnixNano()))
	f.Add(head + "12 x \"a\"\n" + strings.Repeat("9", 5000) + "\n")
	f.Add("mailctl ratelimit log 99\n1 2 \"a\"\n")
	f.Add(head + fmt.Sprintf("%d 7 \"unquoted\n", now.UnixNano()))
	f.Fuzz(func(t *testing.T, log string) {
		var out bytes.Buffer
		kept, unowned, err := rewriteRateLog(strings.NewReader(log), &out, now.Add(-rateLogWindow), func(mailbox string, old uint32) (uint32, bool) {
			return old + 1, old%2 == 0
		})
		if err != nil {
			return
		}
		if kept < 0 || unowned < 0 {
			t.Fatalf("kept %d, unowned %d", kept, unowned)
		}
		read := 0
		if err := readRateLog(&out, func(s policy.LogEntry) error {
			read++
			if !s.At.After(now.Add(-rateLogWindow)) || s.UID%2 != 1 || s.Mailbox == "" {
				t.Fatalf("a send the rewrite should have left out or mapped: %+v", s)
			}
			return nil
		}); err != nil {
			t.Fatalf("the rewritten log does not read back: %v\n%q", err, out.String())
		}
		if read != kept {
			t.Fatalf("the rewrite kept %d sends and wrote %d", kept, read)
		}
	})
}

// TestRestoreLeavesOutAPriorOwnersIdempotencyRecord: an operator-declared
// mailbox's identity includes its owner's uid, and a record an earlier
// owner of the mailbox left there names the identity of that owner's uid
// there. When the mailbox's owner here has that uid, the record would sit
// where the owner's retry with the same key looks, and answer it with the
// earlier owner's message instead of sending; it is left out. With the
// owner's own record for the key beside it, the restore files the owner's.
func TestRestoreLeavesOutAPriorOwnersIdempotencyRecord(t *testing.T) {
	givesToOtherUsers(t)
	there, prior := registry.ConfigMailboxID("agent", 1234), registry.ConfigMailboxID("agent", 2000)
	rec := func(id, key, sent string) entry {
		b, _ := json.Marshal(map[string]string{"sent_id": sent, "message_id": "<" + sent + "@x>", "mailbox": "agent", "mailbox_id": id, "key": key})
		return entry{name: prefix + dirIdem + queue.IdempotencyFile("agent", id, key), data: string(b)}
	}
	here := registry.ConfigMailboxID("agent", 2000) // someone's uid here
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string // the sent_id a retry with "k" finds here, "" for none
	}{
		{"the prior owner's alone", []entry{rec(prior, "k", "2026-01-01-000000-prior")}, ""},
		{"the owner's after the prior owner's", []entry{rec(prior, "k", "2026-01-01-000000-prior"), rec(there, "k", "2026-11-29-120000-own")}, "2026-11-29-120000-own"},
		{"the owner's before the prior owner's", []entry{rec(there, "k", "2026-11-29-120000-own"), rec(prior, "k", "2026-01-01-000000-prior")}, "2026-11-29-120000-own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			res, err := Restore(bytes.NewReader(archive(t, append([]entry{sendStateManifest(Version)}, tc.entries...)...)),
				RestoreOptions{StateDir: state, LookupUser: sendStateUsers})
			if err != nil {
				t.Fatal(err)
			}
			if res.IdemPrior != 1 || res.IdemRecords != len(tc.entries)-1 {
				t.Errorf("%d records restored, %d of the earlier owner left out; want %d and 1", res.IdemRecords, res.IdemPrior, len(tc.entries)-1)
			}
			data, err := os.ReadFile(filepath.Join(state, "queue", queue.IdempotencyDir, queue.IdempotencyFile("agent", here, "k")))
			var got struct {
				SentID string `json:"sent_id"`
			}
			if err == nil {
				json.Unmarshal(data, &got)
			}
			if got.SentID != tc.want {
				t.Errorf("a retry of agent's owner here with key k finds %q (%v), want %q", got.SentID, err, tc.want)
			}
		})
	}
}

// TestRestoreKeepsAnEarlierOwnersBindingsOffTheOwner: a queue item held and
// a hook left dormant since an operator-declared mailbox was given to its
// owner name the earlier owner's identity there. When the earlier owner's
// uid there is the owner's uid here, that identity is the mailbox's here:
// the item would be sent, and the hook's command run, as the owner's. Both
// are bound to an identity no mailbox has instead, and stay as they were;
// the owner's own are bound to the mailbox here.
func TestRestoreKeepsAnEarlierOwnersBindingsOffTheOwner(t *testing.T) {
	givesToOtherUsers(t)
	there, earlier := registry.ConfigMailboxID("agent", 1234), registry.ConfigMailboxID("agent", 2000)
	here := registry.ConfigMailboxID("agent", 2000) // someone's uid here
	hook := func(id string) string {
		b, _ := json.Marshal(map[string]any{"id": "h" + id, "name": "n", "mailbox": "agent", "mailbox_id": id, "event": "on_receive", "cmd": []string{"/bin/true"}, "source": "registry"})
		return string(b)
	}
	state := filepath.Join(t.TempDir(), "state")
	_, err := Restore(bytes.NewReader(archive(t, sendStateManifest(Version),
		entry{name: prefix + dirRegHooks + "own.json", data: hook(there)},
		entry{name: prefix + dirRegHooks + "earlier.json", data: hook(earlier)})),
		RestoreOptions{StateDir: state, LookupUser: sendStateUsers})
	if err != nil {
		t.Fatal(err)
	}
	bound := func(data []byte) string {
		var h struct {
			MailboxID string `json:"mailbox_id"`
		}
		if err := json.Unmarshal(data, &h); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		return h.MailboxID
	}
	for file, wantHere := range map[string]bool{"own.json": true, "earlier.json": false} {
		data, err := os.ReadFile(filepath.Join(state, "registry", "hooks", file))
		if err != nil {
			t.Fatal(err)
		}
		if got := bound(data); (got == here) != wantHere || got == there || got == "" {
			t.Errorf("hook %s is bound to %q; the mailbox here is %q (want bound to it: %v)", file, got, here, wantHere)
		}
	}

	rs := &restorer{owners: map[string]owner{"agent": {oldUID: 1234, uid: 2000, gid: 2000}}}
	for id, wantHere := range map[string]bool{there: true, earlier: false} {
		out, err := rs.renumberItem([]byte(`{"id":"q","mailbox":"agent","mailbox_id":"` + id + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := bound(out); (got == here) != wantHere || got == there || got == "" {
			t.Errorf("item of %s is bound to %q; the mailbox here is %q (want bound to it: %v)", id, got, here, wantHere)
		}
	}
}
