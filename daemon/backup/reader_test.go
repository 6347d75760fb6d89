package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
)

// entry is one tar entry a test archive holds.
type entry struct {
	name string
	typ  byte
	data string
	size int64 // when not 0, the header's size (the data may be shorter)
	link string
}

func manifestEntry(mailboxes ...string) entry {
	m := Manifest{Format: Format, Version: Version, Users: map[string]string{}}
	for _, n := range mailboxes {
		m.Mailboxes = append(m.Mailboxes, MailboxOwner{Name: n, Owner: "someone", UID: 1234, GID: 1234})
	}
	b, _ := json.Marshal(m)
	return entry{name: prefix + nameManifest, data: string(b)}
}

func archive(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := int64(len(e.data))
		if e.size != 0 {
			size = e.size
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o600, Linkname: e.link, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.data))
	}
	tw.Flush()
	return buf.Bytes()
}

// readAllEntries reads an archive to its end, returning the first error.
func readAllEntries(data []byte) ([]string, error) {
	rd, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var names []string
	for {
		e, body, err := rd.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return names, err
		}
		if _, err := io.Copy(io.Discard, body); err != nil {
			return names, err
		}
		names = append(names, e.Name)
	}
}

func TestReaderAcceptsWhatWriteMakes(t *testing.T) {
	good := archive(t, manifestEntry("agent"),
		entry{name: prefix + nameConfig, data: "hostname = \"x\"\n"},
		entry{name: prefix + "dkim/sel.key", data: "KEY"},
		entry{name: prefix + dirRegMboxes + "agent.json", data: "{}"},
		entry{name: prefix + nameJournal, data: "mailctl queue journal 1\n"},
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n"},
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.attachments/report.pdf", data: "%PDF"})
	names, err := readAllEntries(good)
	if err != nil || len(names) != 6 {
		t.Fatalf("a well-formed archive: %d entries, %v", len(names), err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(good)
	zw.Close()
	if names, err := readAllEntries(gz.Bytes()); err != nil || len(names) != 6 {
		t.Fatalf("the same archive gzipped: %d entries, %v", len(names), err)
	}
}

// TestReaderRefusesHostileArchives: every way an archive could address a
// path outside the place of its kind, plant a link or a device, or claim
// more than its kind may hold is refused, with an error naming the entry.
func TestReaderRefusesHostileArchives(t *testing.T) {
	mf := manifestEntry("agent")
	cases := map[string]struct {
		data []byte
		want string
	}{
		"traversal":           {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/../../../../etc/cron.d/x", data: "x"}), "entry"},
		"traversal in folder": {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/../registry/x.json", data: "x"}), "entry"},
		"absolute":            {archive(t, mf, entry{name: "/etc/passwd", data: "x"}), "not under"},
		"outside the prefix":  {archive(t, mf, entry{name: "etc/passwd", data: "x"}), "not under"},
		"hidden file":         {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/.tmp-x", data: "x"}), "dot"},
		"deep":                {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a/b/c", data: "x"}), "mailbox file"},
		"not attachments":     {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/sub/x", data: "x"}), "attachment"},
		"symlink":             {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a.md", typ: tar.TypeSymlink, link: "/etc/shadow"}), "symlink"},
		"hard link":           {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a.md", typ: tar.TypeLink, link: prefix + nameConfig}), "hard link"},
		"char device":         {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a.md", typ: tar.TypeChar}), "device"},
		"block device":        {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a.md", typ: tar.TypeBlock}), "device"},
		"fifo":                {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a.md", typ: tar.TypeFifo}), "FIFO"},
		"directory":           {archive(t, mf, entry{name: prefix + "state/mailboxes/agent/", typ: tar.TypeDir}), "directory"},
		"huge file":           {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a.eml", size: MaxFile + 1}), "maximum"},
		"huge config":         {archive(t, mf, entry{name: prefix + nameConfig, size: MaxConfig + 1}), "maximum"},
		"huge key":            {archive(t, mf, entry{name: prefix + "dkim/a.key", size: MaxKey + 1}), "maximum"},
		"cut short":           {archive(t, mf, entry{name: prefix + nameConfig, data: "abc", size: 100}), ""},
		"unknown mailbox":     {archive(t, mf, entry{name: prefix + dirMailboxes + "other/inbox/a.md", data: "x"}), "not in the archive's manifest"},
		"bad mailbox name":    {archive(t, mf, entry{name: prefix + dirMailboxes + "Agent/inbox/a.md", data: "x"}), "upper-case"},
		"second manifest":     {archive(t, mf, mf), "second manifest"},
		"no manifest first":   {archive(t, entry{name: prefix + nameConfig, data: "x"}, mf), "first entry"},
		"empty":               {archive(t), "empty"},
		"not a tar":           {[]byte("hello, this is not an archive at all, but it is long enough to look like one maybe" + strings.Repeat("x", 600)), ""},
		"newer version":       {archive(t, entry{name: prefix + nameManifest, data: `{"format":"mailctl-backup","version":99}`}), "version 99"},
		"not ours":            {archive(t, entry{name: prefix + nameManifest, data: `{"format":"other","version":1}`}), "not a mailctl backup"},
		"manifest traversal":  {archive(t, entry{name: prefix + nameManifest, data: `{"format":"mailctl-backup","version":1,"mailboxes":[{"name":"../x"}]}`}), "manifest names"},
		"registry not json":   {archive(t, mf, entry{name: prefix + dirRegMboxes + "agent.txt", data: "x"}), "registry"},
		"control characters":  {archive(t, mf, entry{name: prefix + dirMailboxes + "agent/inbox/a\x1b[2J.md", data: "x"}), "control"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := readAllEntries(c.data)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestRestoreWritesNothingOfAHostileArchive: a restore of an archive that
// is refused part-way leaves the state directory as it was, and nothing
// lands outside it.
func TestRestoreWritesNothingOfAHostileArchive(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	state := filepath.Join(t.TempDir(), "state")
	outside := filepath.Join(filepath.Dir(state), "escaped")
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n"},
		entry{name: prefix + dirMailboxes + "agent/inbox/../../../escaped", data: "x"})
	_, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, DKIMDir: filepath.Join(t.TempDir(), "dkim"),
		LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
	if err == nil {
		t.Fatal("restored a hostile archive")
	}
	if _, err := os.Stat(outside); err == nil {
		t.Fatal("a file landed outside the state directory")
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Fatalf("the state directory holds %d entries after a refused restore", len(ents))
	}
}

// TestRestoreNamesMissingOwners: mailboxes whose owner is not a user of
// this host are all named, nothing is written, and --map-owner lets the
// restore through.
func TestRestoreNamesMissingOwners(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	data := archive(t, manifestEntry("alpha", "beta"),
		entry{name: prefix + dirMailboxes + "alpha/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n"})
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	lookup := func(name string) (uint32, uint32, error) {
		if name == "here" {
			return uid, gid, nil
		}
		return 0, 0, errors.New("no such user")
	}
	_, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, LookupUser: lookup})
	if err == nil || !strings.Contains(err.Error(), "alpha (owner someone)") || !strings.Contains(err.Error(), "beta (owner someone)") || !strings.Contains(err.Error(), "--map-owner") {
		t.Fatalf("restore with unknown owners: %v", err)
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatal("a refused restore created the state directory")
	}
	res, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, LookupUser: lookup, MapOwner: map[string]string{"someone": "here"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mailboxes) != 2 || res.Files != 1 {
		t.Fatalf("restored %+v", res)
	}
	if _, err := os.Stat(filepath.Join(state, "mailboxes", "alpha", "inbox", "2026-01-01-000000-a.md")); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreRefusesAFileTwice: an archive naming one file twice is
// refused rather than restoring either copy over the other.
func TestRestoreRefusesAFileTwice(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	// Those kept in memory until the end (the config, the keys) as well as
	// those staged as they come.
	for _, name := range []string{prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", prefix + nameConfig, prefix + nameBounceKey, prefix + "dkim/sel.key"} {
		root := t.TempDir()
		data := archive(t, manifestEntry("agent"), entry{name: name, data: "one"}, entry{name: name, data: "two"})
		_, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: filepath.Join(root, "state"), DKIMDir: filepath.Join(root, "dkim"),
			ConfigFile: filepath.Join(root, "config.toml"), LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
		if err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("restore of %s named twice: %v", name, err)
		}
	}
}

// FuzzReader: whatever the bytes, the reader never panics, and every entry
// it hands out has a name inside the layout.
func FuzzReader(f *testing.F) {
	f.Add(archive(f, manifestEntry("agent"), entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n"}))
	f.Add(archive(f, manifestEntry("agent"), entry{name: prefix + dirMailboxes + "agent/inbox/../../x", data: "x"}))
	f.Add(archive(f, manifestEntry("agent"), entry{name: prefix + "dkim/a.key", typ: tar.TypeSymlink, link: "/etc/shadow"}))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		rd, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for range 1000 {
			e, body, err := rd.Next()
			if err != nil {
				return
			}
			if !strings.HasPrefix(e.Name, prefix) || strings.Contains(e.Name, "/../") || strings.Contains(e.Name, "/./") || strings.Contains(e.Name, "//") {
				t.Fatalf("entry %q accepted", e.Name)
			}
			n, err := io.Copy(io.Discard, body)
			if err == nil && n != e.Size {
				t.Fatalf("entry %q: %d bytes read, %d declared", e.Name, n, e.Size)
			}
		}
	})
}

// TestRestoreLeavesOutARegistryEntryWithoutItsMailbox: a mailbox deleted
// while the backup was taken has its registry entry in the archive but not
// its files; the restore leaves the entry out and says so.
func TestRestoreLeavesOutARegistryEntryWithoutItsMailbox(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	state := filepath.Join(t.TempDir(), "state")
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirRegMboxes + "agent.json", data: `{"id":"m1","name":"agent","owner_uid":1234,"owner_gid":1234}`},
		entry{name: prefix + dirRegMboxes + "gone.json", data: `{"id":"m2","name":"gone","owner_uid":1234,"owner_gid":1234}`})
	res, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.DroppedCount != 1 || len(res.Dropped) != 1 || res.Dropped[0] != "gone" {
		t.Fatalf("dropped %v, want [gone]", res.Dropped)
	}
	if _, err := os.Stat(filepath.Join(state, "registry", "mailboxes", "gone.json")); err == nil {
		t.Fatal("the entry of the deleted mailbox was restored")
	}
	var rec map[string]any
	b, err := os.ReadFile(filepath.Join(state, "registry", "mailboxes", "agent.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || rec["owner_uid"] != float64(uid) || rec["id"] != "m1" {
		t.Fatalf("agent's entry: %s (%v), want owner_uid %d and its id kept", b, err, uid)
	}
}

// Regression: the restore named every registry entry it left out, so an
// archive of millions of entries of mailboxes it does not hold (damaged,
// or made to) grew the answer, and the lines the CLI prints, with them.
// It counts them all and names the first MaxListed.
func TestRestoreBoundsTheNamesItLeavesOut(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	const n = 3 * MaxListed
	entries := []entry{manifestEntry("agent")}
	for i := range n {
		name := fmt.Sprintf("gone%04d", i)
		entries = append(entries, entry{name: prefix + dirRegMboxes + name + ".json", data: `{"id":"m` + name + `","name":"` + name + `","owner_uid":1234,"owner_gid":1234}`})
	}
	res, err := Restore(bytes.NewReader(archive(t, entries...)), RestoreOptions{StateDir: filepath.Join(t.TempDir(), "state"),
		LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.DroppedCount != n || len(res.Dropped) != MaxListed || res.Dropped[0] != "gone0000" || res.Dropped[MaxListed-1] != fmt.Sprintf("gone%04d", MaxListed-1) {
		t.Fatalf("dropped %d, named %d (%v...), want %d counted and the first %d named", res.DroppedCount, len(res.Dropped), res.Dropped[:min(3, len(res.Dropped))], n, MaxListed)
	}
}

// Regression: the restore named every restored mailbox this host's config
// does not declare, and every one it declares for another owner, so an
// archive of very many mailboxes grew the answer, and the one line the CLI
// prints of each list, with them. It counts them all and names the first
// MaxListed of each, in name order.
func TestRestoreBoundsTheMailboxesItNames(t *testing.T) {
	const n = MaxListed + 20
	var names []string
	declaredOwners := map[string]uint32{}
	for i := range n {
		names = append(names, fmt.Sprintf("box%04d", i))
		declaredOwners[names[i]] = uint32(os.Getuid()) + 1
	}
	res, err := Restore(bytes.NewReader(archive(t, manifestEntry(names...))), RestoreOptions{StateDir: filepath.Join(t.TempDir(), "state"),
		DeclaredOwners: declaredOwners, LookupUser: selfOwner})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mailboxes) != n {
		t.Fatalf("%d mailboxes restored, want %d", len(res.Mailboxes), n)
	}
	if res.UndeclaredCount != n || !slices.Equal(res.Undeclared, names[:MaxListed]) {
		t.Errorf("undeclared: %d counted, %d named (%v...), want %d counted and the first %d named", res.UndeclaredCount, len(res.Undeclared), res.Undeclared[:min(3, len(res.Undeclared))], n, MaxListed)
	}
	if res.OwnerDiffersCount != n || len(res.OwnerDiffers) != MaxListed ||
		!strings.HasPrefix(res.OwnerDiffers[0], "box0000 (") || !strings.HasPrefix(res.OwnerDiffers[MaxListed-1], fmt.Sprintf("box%04d (", MaxListed-1)) {
		t.Errorf("owner differs: %d counted, %d named (%v...), want %d counted and the first %d named", res.OwnerDiffersCount, len(res.OwnerDiffers), res.OwnerDiffers[:min(3, len(res.OwnerDiffers))], n, MaxListed)
	}
}

// TestRestoreNamesMailboxesThisConfigDoesNotDeclare: a mailbox the old
// host's config declared has no registry entry, and the new host's config
// is kept, so the restored mailbox would not be served (its mail not
// delivered, its sends' outcomes not recorded) without the operator being
// told; the restore names it, and neither a mailbox of the registry nor one
// this host declares.
func TestRestoreNamesMailboxesThisConfigDoesNotDeclare(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	state := filepath.Join(t.TempDir(), "state")
	data := archive(t, manifestEntry("agent", "postmaster", "research"),
		entry{name: prefix + dirRegMboxes + "agent.json", data: `{"id":"m1","name":"agent","owner_uid":1234,"owner_gid":1234}`},
		entry{name: prefix + dirMailboxes + "research/inbox/2026-02-01-000000-r.md", data: "research's message"})
	res, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, Declared: []string{"postmaster", "abuse"},
		LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.UndeclaredCount != 1 || len(res.Undeclared) != 1 || res.Undeclared[0] != "research" {
		t.Fatalf("undeclared %v, want [research]", res.Undeclared)
	}
}

// TestRestoreNamesDKIMSelectorsBesideThisHosts: a host set up before the
// restore has DKIM keys of its own; the archive's are added beside them and
// the daemon signs with every key in dkim_dir, so with both hosts' keys,
// without a word at restore time. The restore names both sets (a key the
// host holds under an archive key's name is the archive's, not beside it).
func TestRestoreNamesDKIMSelectorsBesideThisHosts(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	dir := t.TempDir()
	state, keys := filepath.Join(dir, "state"), filepath.Join(dir, "dkim")
	os.MkdirAll(keys, 0o700)
	for _, n := range []string{"ed202611.key", "rsa202611.key", "ed202601.key", "README", ".hidden.key"} {
		os.WriteFile(filepath.Join(keys, n), []byte("KEY "+n), 0o600)
	}
	data := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirDKIM + "ed202601.key", data: "KEY ed202601.key"},
		entry{name: prefix + dirDKIM + "rsa202601.key", data: "archive's rsa"},
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-02-01-000000-a.md", data: "a message"})
	res, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, DKIMDir: keys,
		LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(res.DKIMRestored, res.DKIMBeside), "[ed202601 rsa202601] [ed202611 rsa202611]"; got != want {
		t.Errorf("restored and beside: %s, want %s", got, want)
	}

	// A host whose keys are the archive's has nothing beside them.
	state2 := filepath.Join(dir, "state2")
	res, err = Restore(bytes.NewReader(archive(t, manifestEntry(), entry{name: prefix + dirDKIM + "ed202601.key", data: "KEY ed202601.key"})),
		RestoreOptions{StateDir: state2, DKIMDir: filepath.Join(dir, "fresh"), LookupUser: func(string) (uint32, uint32, error) { return uid, gid, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DKIMBeside) != 0 || fmt.Sprint(res.DKIMRestored) != "[ed202601]" {
		t.Errorf("restore into an empty dkim_dir: restored %v, beside %v", res.DKIMRestored, res.DKIMBeside)
	}
}

// TestRestoreStampsTheArchivesFormats: the restored registry and mailbox
// tree are stamped with the formats the manifest says, written by the
// release it names, never with this build's own: an archive of version 1,
// which says none, is of version 1 (every release that wrote one wrote
// both so), with no writer. A format newer than this build reads is
// refused before anything is written, and a manifest naming a stamp no
// mailctl writes is refused.
func TestRestoreStampsTheArchivesFormats(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	lookup := func(string) (uint32, uint32, error) { return uid, gid, nil }
	manifest := func(version int, f map[string]FormatStamp) entry {
		m := Manifest{Format: Format, Version: version, Users: map[string]string{}, Formats: f,
			Mailboxes: []MailboxOwner{{Name: "agent", Owner: "someone", UID: 1234, GID: 1234}}}
		b, _ := json.Marshal(m)
		return entry{name: prefix + nameManifest, data: string(b)}
	}
	msg := entry{name: prefix + dirMailboxes + "agent/inbox/2026-02-01-000000-a.md", data: "a message"}
	stamps := func(state string) string {
		var out []string
		for _, k := range []string{formats.KindRegistry, formats.KindMailboxes} {
			st, err := formats.ReadStamp(filepath.Join(state, k, formats.StampName), k)
			out = append(out, fmt.Sprintf("%s %d %q %v", k, st.Version, st.WrittenBy, err))
		}
		return strings.Join(out, "; ")
	}
	for _, tc := range []struct {
		name     string
		manifest entry
		want     string // the stamps, or the refusal
	}{
		{"this release's", manifest(Version, map[string]FormatStamp{formats.KindRegistry: {Version: formats.Registry, WrittenBy: "1.6.0"}, formats.KindMailboxes: {Version: formats.Mailboxes, WrittenBy: "1.6.0"}}),
			fmt.Sprintf(`registry %d "1.6.0" <nil>; mailboxes %d "1.6.0" <nil>`, formats.Registry, formats.Mailboxes)},
		{"archive version 1", manifest(1, nil), `registry 1 "" <nil>; mailboxes 1 "" <nil>`},
		{"newer registry", manifest(Version, map[string]FormatStamp{formats.KindRegistry: {Version: formats.Registry + 1, WrittenBy: "9.0.0"}}),
			fmt.Sprintf("the archive's registry is format version %d, and this mailctl reads versions up to %d: run mailctl 9.0.0 (which wrote it) or later", formats.Registry+1, formats.Registry)},
		{"unknown kind", manifest(Version, map[string]FormatStamp{"index": {Version: 2}}), `the manifest's formats name "index" version 2`},
		{"writer no release", manifest(Version, map[string]FormatStamp{formats.KindMailboxes: {Version: 1, WrittenBy: "1.0\nmailctl registry format 1"}}), "not a mailctl release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			_, err := Restore(bytes.NewReader(archive(t, tc.manifest, msg)), RestoreOptions{StateDir: state, LookupUser: lookup})
			if strings.HasPrefix(tc.want, "registry ") {
				if err != nil {
					t.Fatal(err)
				}
				if got := stamps(state); got != tc.want {
					t.Errorf("stamps:\n got %s\nwant %s", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want a refusal saying %q", err, tc.want)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("a refused restore made %s (%v)", state, err)
			}
		})
	}
}

// TestRestoreChecksTheGzipTrailer: the tar inside a gzip stream ends before
// the stream does, and the stream's CRC-32 and length come after it. A
// restore that stops at the tar's end never reads them: a message whose
// bytes changed on the way (a flipped bit in a stored block decompresses
// without an error) or an archive cut before its trailer would be restored
// as if whole. Both are refused, and nothing is put in place.
func TestRestoreChecksTheGzipTrailer(t *testing.T) {
	content := strings.Repeat("A", 4096)
	plain := archive(t, manifestEntry("agent"),
		entry{name: prefix + dirMailboxes + "agent/inbox/2026-01-01-000000-a.md", data: "+++\n+++\n" + content})
	plain = append(plain, make([]byte, 1024)...) // the end of the archive, as Write and tar(1) write it
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.NoCompression) // stored blocks: the bytes are as they are
	zw.Write(plain)
	zw.Close()
	whole := buf.Bytes()
	flipped := bytes.Clone(whole)
	i := bytes.Index(flipped, []byte(content))
	if i < 0 {
		t.Fatal("the message's bytes are not stored as they are")
	}
	flipped[i+100] ^= 0x01
	cases := map[string][]byte{
		"a flipped bit":      flipped,
		"cut before the CRC": whole[:len(whole)-8],
	}
	if _, err := readAllEntries(whole); err != nil {
		t.Fatalf("the whole archive: %v", err)
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := readAllEntries(data); err == nil {
				t.Error("the reader took the damaged archive for whole")
			}
			state := filepath.Join(t.TempDir(), "state")
			if _, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state, LookupUser: selfOwner}); err == nil {
				t.Fatal("restored the damaged archive")
			}
			if _, err := os.Stat(filepath.Join(state, "mailboxes")); !os.IsNotExist(err) {
				t.Errorf("the refused restore put mailboxes in place: %v", err)
			}
		})
	}
}

// TestRestoreNamesMailboxesDeclaredForAnotherOwner: this host's config
// declares a restored mailbox for another user than the archive's owner of
// it. The daemon does not serve such a declaration (the folder and its mail
// are the archive owner's), so the restore names it, with both owners,
// before the daemon starts refusing its mail; a mailbox of the archive's
// registry is left out (the registry's owner keeps it, as always), and so is
// one declared for the same user.
func TestRestoreNamesMailboxesDeclaredForAnotherOwner(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	data := archive(t, manifestEntry("agent", "ops", "same"),
		entry{name: prefix + dirRegMboxes + "agent.json", data: `{"id":"m1","name":"agent","owner_uid":1234,"owner_gid":1234}`})
	// The archive's owner is the user running the test (a restore gives
	// the mail to that uid); the config declares two for another.
	self, other := uint32(os.Getuid()), uint32(os.Getuid())+4000
	res, err := Restore(bytes.NewReader(data), RestoreOptions{StateDir: state,
		DeclaredOwners: map[string]uint32{"agent": other, "ops": other, "same": self},
		LookupUser:     selfOwner})
	if err != nil {
		t.Fatal(err)
	}
	if res.OwnerDiffersCount != 1 || len(res.OwnerDiffers) != 1 || !strings.Contains(res.OwnerDiffers[0], "ops") || !strings.Contains(res.OwnerDiffers[0], fmt.Sprint(other)) || !strings.Contains(res.OwnerDiffers[0], fmt.Sprint(self)) {
		t.Fatalf("owner differs %q, want one line naming ops, uid %d and uid %d", res.OwnerDiffers, self, other)
	}
}

// TestRestoreMakesTheStateDirUnderAStrictUmask: a restore run from a shell
// with umask 077 made the state directory 0700, through which no owner
// reached a restored mailbox; it is 0711, as the daemon makes it.
func TestRestoreMakesTheStateDirUnderAStrictUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	state := filepath.Join(t.TempDir(), "state")
	if _, err := Restore(bytes.NewReader(archive(t, manifestEntry("agent"))), RestoreOptions{StateDir: state, LookupUser: selfOwner}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("the restored state directory: %v, %v; want mode 711", fi.Mode(), err)
	}
}
