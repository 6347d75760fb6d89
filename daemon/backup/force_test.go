package backup

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
)

// writeFiles writes each path (relative to dir) with its content.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// contents maps the content of every regular file under dir to its path.
func contents(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		got[string(b)] = path
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestForceRestoreKeepsWhatItReplaces: a restore over a store that holds
// mail is refused without --force and changes nothing; a DKIM key of the
// archive's name with other content stops it too, naming the file. With
// --force, everything the store and the key directory held is moved to
// the pre-restore directory, never deleted, and the host's config.toml is
// kept, the archive's written beside it as config.toml.restored
// (docs/operations.md, "Backups and restore").
func TestForceRestoreKeepsWhatItReplaces(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	lookup := func(string) (uint32, uint32, error) { return uid, gid, nil }
	root := t.TempDir()
	idemName := queue.IdempotencyFile("agent", "", "k")
	state, dkim, cfg := filepath.Join(root, "state"), filepath.Join(root, "dkim"), filepath.Join(root, "config.toml")
	old := map[string]string{
		"mailboxes/old/inbox/2026-01-01-000000-o.md":  "old message",
		"mailboxes/old/inbox/2026-01-01-000000-o.eml": "old raw copy",
		"registry/mailboxes/old.json":                 "old registry entry",
		"queue/journal":                               "mailctl queue journal 1\nold queued item",
		"bounce.key":                                  "old bounce key",
		// Copies the old daemon accepted and had not yet synced: the
		// journal goes with the mailboxes they were for.
		"inbound/journal.1":             "mailctl inbound journal 1\nold accepted copy",
		"queue/idempotency/" + idemName: "old idempotency record",
		"ratelimit.log":                 "mailctl ratelimit log 2\n1 0 \"old\"\n",
	}
	writeFiles(t, state, old)
	writeFiles(t, dkim, map[string]string{"ed202601.key": "old dkim key", "rsa202601.key": "kept dkim key"})
	writeFiles(t, root, map[string]string{"config.toml": "old config"})
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + nameConfig, data: "archive config"},
		entry{name: prefix + "dkim/ed202601.key", data: "archive dkim key"},
		entry{name: prefix + "dkim/rsa202601.key", data: "kept dkim key"},
		entry{name: prefix + nameBounceKey, data: "archive bounce key"},
		entry{name: prefix + dirIdem + idemName, data: `{"sent_id":"archive-sent"}`},
		entry{name: prefix + nameRateLog, data: "mailctl ratelimit log 2\n"},
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-02-01-000000-a.md", data: "archive message"})
	opts := RestoreOptions{StateDir: state, DKIMDir: dkim, ConfigFile: cfg, LookupUser: lookup,
		Now: func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }}
	before := contents(t, root)

	_, err := Restore(bytes.NewReader(data), opts)
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("restore over a store with mail: %v, want a refusal that names --force", err)
	}
	if got := contents(t, root); !maps.Equal(got, before) {
		t.Fatalf("a refused restore changed the files:\n-want %v\n+got  %v", before, got)
	}

	// A store without mail, but a DKIM key that differs from the archive's.
	emptyState := filepath.Join(root, "empty")
	_, err = Restore(bytes.NewReader(data), RestoreOptions{StateDir: emptyState, DKIMDir: dkim, ConfigFile: cfg, LookupUser: lookup})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dkim, "ed202601.key")) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("restore over another DKIM key of the same name: %v, want a refusal naming it and --force", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dkim, "ed202601.key")); string(b) != "old dkim key" {
		t.Fatalf("a refused restore changed the DKIM key: %q", b)
	}
	os.RemoveAll(emptyState)

	// A host set up in the backup's month has both keys under the archive's
	// names: the refusal names each one, not only the first.
	bothDKIM := filepath.Join(root, "dkim-both")
	writeFiles(t, bothDKIM, map[string]string{"ed202601.key": "new host ed key", "rsa202601.key": "new host rsa key"})
	_, err = Restore(bytes.NewReader(data), RestoreOptions{StateDir: emptyState, DKIMDir: bothDKIM, ConfigFile: cfg, LookupUser: lookup})
	for _, k := range []string{"ed202601.key", "rsa202601.key"} {
		if err == nil || !strings.Contains(err.Error(), filepath.Join(bothDKIM, k)) {
			t.Errorf("restore over two other DKIM keys: %v, want a refusal naming %s", err, k)
		}
	}
	os.RemoveAll(emptyState)
	os.RemoveAll(bothDKIM)

	opts.Force = true
	res, err := Restore(bytes.NewReader(data), opts)
	if err != nil {
		t.Fatalf("restore --force: %v", err)
	}
	if res.MovedAside != filepath.Join(state, "pre-restore-20260301T120000Z") {
		t.Fatalf("moved aside to %q", res.MovedAside)
	}
	got := contents(t, root)
	for _, data := range append(slices.Collect(maps.Values(old)), "old dkim key") {
		p, ok := got[data]
		if !ok {
			t.Errorf("%q is gone: restore --force deleted it", data)
		} else if !strings.HasPrefix(p, res.MovedAside+"/") {
			t.Errorf("%q is at %s, not in %s", data, p, res.MovedAside)
		}
	}
	for data, want := range map[string]string{
		"archive message":            filepath.Join(state, "mailboxes/agent/inbox/2026-02-01-000000-a.md"),
		"archive bounce key":         filepath.Join(state, "bounce.key"),
		`{"sent_id":"archive-sent"}`: filepath.Join(state, "queue/idempotency", idemName),
		"mailctl ratelimit log 2\n":  filepath.Join(state, "ratelimit.log"),
		"archive dkim key":           filepath.Join(dkim, "ed202601.key"),
		"kept dkim key":              filepath.Join(dkim, "rsa202601.key"),
		"old config":                 cfg,
		"archive config":             cfg + ".restored",
	} {
		if got[data] != want {
			t.Errorf("%q is at %q, want %s", data, got[data], want)
		}
	}
	if res.ConfigTo != cfg+".restored" {
		t.Errorf("ConfigTo %q, want %s.restored", res.ConfigTo, cfg)
	}
}

// TestForceRestoresInOneSecondKeepBoth: the pre-restore directory is named
// by the second; a second restore --force within it must not put what it
// moves aside over what the first one moved there.
func TestForceRestoresInOneSecondKeepBoth(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	root := t.TempDir()
	state := filepath.Join(root, "state")
	writeFiles(t, state, map[string]string{
		"bounce.key":                  "first bounce key",
		"registry/mailboxes/old.json": "first registry entry",
	})
	archiveWith := func(n string) []byte {
		return archive(t, manifestEntry("agent"),
			entry{name: prefix + nameBounceKey, data: n + " bounce key"},
			entry{name: prefix + dirMailboxes + "agent/inbox/2026-02-01-000000-a.md", data: n + " message"})
	}
	opts := RestoreOptions{StateDir: state, DKIMDir: filepath.Join(root, "dkim"), Force: true,
		LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil },
		Now:        func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }}
	first, err := Restore(bytes.NewReader(archiveWith("second")), opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Restore(bytes.NewReader(archiveWith("third")), opts)
	if err != nil {
		t.Fatalf("a second restore --force in the same second: %v", err)
	}
	if first.MovedAside == second.MovedAside {
		t.Errorf("both restores moved aside into %s", first.MovedAside)
	}
	got := contents(t, root)
	for _, data := range []string{"first bounce key", "first registry entry", "second bounce key", "second message"} {
		if p, ok := got[data]; !ok || !strings.HasPrefix(p, filepath.Join(state, "pre-restore-")) {
			t.Errorf("%q is at %q, want it in a pre-restore directory", data, p)
		}
	}
	if p := got["third message"]; p != filepath.Join(state, "mailboxes/agent/inbox/2026-02-01-000000-a.md") {
		t.Errorf("the last restore's message is at %q", p)
	}
}
