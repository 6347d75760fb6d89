package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/internal/crashpoint"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/store"
)

// RestoreOptions say where a restore writes and how it finds owners.
type RestoreOptions struct {
	// StateDir and DKIMDir are the new host's (its config's [paths]);
	// ConfigFile is where its config is. An existing config is kept and
	// the archive's is written beside it as ConfigFile + ".restored".
	StateDir, DKIMDir, ConfigFile string
	// Force restores over a store that holds messages, registry entries
	// or queued items: they are moved aside first, not deleted.
	Force bool
	// MapOwner maps an owner of the archive (a user name, or #uid for an
	// owner that had no name) to a user of this host.
	MapOwner map[string]string
	// LookupUser finds a user of this host by name.
	LookupUser func(name string) (uid, gid uint32, err error)
	Now        func() time.Time
	// Declared names the mailboxes this host's config declares
	// ([[mailboxes]]). A restored mailbox that is neither among them nor
	// in the archive's registry is not served here: the result names it.
	Declared []string
	// DeclaredOwners are the uids of the owners this host's config
	// declares its mailboxes for. A restored mailbox declared for another
	// user than its owner here, and not in the archive's registry, is not
	// served by the daemon: the result names it.
	DeclaredOwners map[string]uint32
}

// RestoredMailbox is one mailbox a restore wrote, with its owner there
// and here.
type RestoredMailbox struct {
	Name           string
	From, To       string // owner names: in the archive, on this host
	OldUID, NewUID uint32
	Files          int
}

// RestoreResult says what a restore did.
type RestoreResult struct {
	Manifest  *Manifest
	Mailboxes []RestoredMailbox
	Files     int
	Bytes     int64
	Journal   int64
	// IdemRecords counts the idempotency records restored: a retry with
	// one of their keys answers with the message it made. IdemPrior
	// counts those left out: records an earlier owner of an
	// operator-declared mailbox left under the identity the mailbox has
	// here for its owner now, where they would answer the owner's retries.
	IdemRecords, IdemPrior int
	// RateLog is whether the archive held the send log (one made by a
	// release before backups held it does not, and the send log this
	// host has, if any, is kept); RateSends counts the sends of it still
	// in the limits' longest window, restored, and RateUnowned those of
	// owners that are not users here, left out.
	RateLog                bool
	RateSends, RateUnowned int
	// ConfigTo is where the archive's config went; MovedAside the
	// directory that now holds what the state directory held before.
	ConfigTo   string
	MovedAside string
	Keys       []string
	// DroppedCount counts the registry entries of mailboxes the archive
	// does not hold (deleted while the backup was taken), which are left
	// out, and Dropped names the first MaxListed of them in the archive's
	// order: an archive may hold millions of such entries (a damaged or
	// hostile one), and the answer stays small.
	DroppedCount int
	Dropped      []string
	// UndeclaredCount counts the restored mailboxes that the archive's
	// registry has no entry for and this host's config does not declare
	// (declared in the archive's config.toml, which is not put in place):
	// the daemon does not serve them until this host's config declares
	// them. Undeclared names the first MaxListed of them, in name order.
	UndeclaredCount int
	Undeclared      []string
	// OwnerDiffersCount counts the restored mailboxes this host's config
	// declares for another user than their owner here and the archive's
	// registry has no entry for: the daemon does not serve them (nor
	// hands their mail to the declared owner). OwnerDiffers names the
	// first MaxListed of them, in name order, with both owners.
	OwnerDiffersCount int
	OwnerDiffers      []string
	// DKIMRestored are the selectors of the archive's DKIM keys, and
	// DKIMBeside those of the other keys this host's dkim_dir held (made
	// by mailctl setup, say), which the restore keeps. The daemon signs
	// with every key there: with both set, it signs with both hosts' keys,
	// and DNS publishes the records of one set at most, often.
	DKIMRestored, DKIMBeside []string
}

// owner is a mailbox's owner on this host.
type owner struct {
	oldUID, uid, gid uint32
	from, to         string
}

// Restore reads the archive from r and puts it in place. Nothing of the
// live state changes until the whole archive has been read and checked:
// entries are written to a directory beside the state, which replaces the
// state's parts (mailboxes, registry, queue, send log, bounce key) at the
// end. The index is not in an archive: the daemon rebuilds it at its
// start. The daemon must not be running (the caller holds its lock).
func Restore(r io.Reader, o RestoreOptions) (*RestoreResult, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	m := rd.Manifest()
	stamps, err := archiveFormats(m)
	if err != nil {
		return nil, err
	}
	owners, err := resolveOwners(m, o)
	if err != nil {
		return nil, err
	}
	if !o.Force {
		if what := nonEmpty(o.StateDir); what != "" {
			return nil, fmt.Errorf("the store in %s is not empty (%s): restoring would replace it; "+
				"restore with --force to move what is there aside (nothing is deleted)", o.StateDir, what)
		}
	}
	// 0711 whatever the umask, as the daemon makes it: owners reach their
	// mailbox folders through it.
	if err := safeio.MkdirAll(o.StateDir, 0o711); err != nil {
		return nil, err
	}
	if _, err := RemoveStaging(o.StateDir); err != nil {
		return nil, fmt.Errorf("removing what an interrupted restore left: %w", err)
	}
	stage, err := os.MkdirTemp(o.StateDir, stagingPrefix)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	res := &RestoreResult{Manifest: m}
	rs := &restorer{o: o, stage: stage, owners: owners, res: res, stamps: stamps, files: map[string]int{}, keys: map[string][]byte{}, registered: map[string]bool{}}
	for {
		e, body, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := rs.entry(e, body); err != nil {
			return nil, err
		}
	}
	if err := rs.finish(); err != nil {
		return nil, err
	}
	return res, nil
}

// archiveFormats are the format stamps the restored registry and mailbox
// tree get: those the manifest says, each a version this build reads (a
// newer one is refused before anything is written). Without one, stamps
// of version 1 with no writer: the manifest says none when the archive
// is of version 1 or the daemon that took it did not put its stamps in
// the snapshot, and every such release wrote both at version 1. Left
// without a stamp, the files would be taken for files written before
// stamps, which is version 1 too; but a stamp of the archive's version
// keeps a later release from taking another version's files for them.
func archiveFormats(m *Manifest) ([]formats.Stamp, error) {
	var out []formats.Stamp
	for _, s := range []struct {
		kind, what string
		current    int
	}{{formats.KindRegistry, "the archive's registry", formats.Registry}, {formats.KindMailboxes, "the archive's mailbox tree", formats.Mailboxes}} {
		st, ok := m.Formats[s.kind]
		if !ok {
			st = FormatStamp{Version: 1}
		}
		if err := formats.Check(s.what, "", st.Version, s.current, st.WrittenBy); err != nil {
			return nil, err
		}
		out = append(out, formats.Stamp{Kind: s.kind, Version: st.Version, WrittenBy: st.WrittenBy})
	}
	return out, nil
}

// rateLogName is the send log's file in the state directory.
const rateLogName = "ratelimit.log"

// stagingPrefix starts the name of a restore's staging directory, in the
// state directory beside what it replaces.
const stagingPrefix = store.TempPrefix + "restore-"

// RemoveStaging removes from stateDir the staging directories of restores
// that were killed part-way (a restore that finishes or is refused removes
// its own) and returns how many it removed. Call it only while holding the
// state's lock, as the daemon at its start and a restore do, so that no
// restore is running.
func RemoveStaging(stateDir string) (int, error) {
	// The names first, then the removals: a directory changed while it is
	// listed may list an entry twice or not at all. Only staging
	// directories are kept, one per killed restore.
	var stages []string
	err := safeio.EachEntry(stateDir, func(e fs.DirEntry) error {
		if strings.HasPrefix(e.Name(), stagingPrefix) {
			stages = append(stages, e.Name())
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range stages {
		if err := os.RemoveAll(filepath.Join(stateDir, name)); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// resolveOwners finds every mailbox's owner on this host; the mailboxes
// whose owner is not a user here are named together, with what to do.
func resolveOwners(m *Manifest, o RestoreOptions) (map[string]owner, error) {
	out := map[string]owner{}
	var missing []string
	for _, mb := range m.Mailboxes {
		key := mb.ownerKey()
		to := key
		if mapped, ok := o.MapOwner[key]; ok {
			to = mapped
		} else if mb.Owner == "" {
			missing = append(missing, fmt.Sprintf("%s (owner uid %d had no user name)", mb.Name, mb.UID))
			continue
		}
		uid, gid, err := o.LookupUser(to)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (owner %s)", mb.Name, to))
			continue
		}
		out[mb.Name] = owner{oldUID: mb.UID, uid: uid, gid: gid, from: key, to: to}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("these mailboxes' owners are not users on this host: %s; create the users (useradd NAME), "+
			"or map each owner to a user of this host with --map-owner OLD=NEW (OLD a user name, or #UID)", strings.Join(missing, ", "))
	}
	return out, nil
}

// nonEmpty says what the state directory holds that a restore would
// replace, or "" when it holds nothing of the kind: mailboxes without a
// message file, and a queue journal without a record, count as empty.
func nonEmpty(state string) string {
	if b := mailboxWithFiles(filepath.Join(state, "mailboxes")); b != "" {
		return "mailbox " + b + " has files"
	}
	for _, sub := range []string{"mailboxes", "hooks"} {
		found := false
		safeio.EachEntry(filepath.Join(state, "registry", sub), func(e fs.DirEntry) error {
			found = strings.HasSuffix(e.Name(), ".json")
			if found {
				return safeio.ErrStop
			}
			return nil
		})
		if found {
			return "the registry has " + sub
		}
	}
	if data, err := readHead(filepath.Join(state, "queue", "journal"), 4096); err == nil {
		if i := bytes.IndexByte(data, '\n'); i < 0 || i+1 < len(data) {
			return "the queue journal has records"
		}
	}
	return ""
}

// mailboxWithFiles names a mailbox of the store at root that has a file
// in one of its folders, or is "" when none has. The mailboxes are their
// owners' to fill: a folder is opened as the store opens one, never
// following a symlink (which could point anywhere, another user's mailbox
// or root's directory) nor opening what is not a directory (a FIFO).
func mailboxWithFiles(root string) string {
	boxes, err := store.OpenDir(root)
	if err != nil {
		return ""
	}
	defer boxes.Close()
	found := errors.New("found")
	var name string
	boxes.EachName(func(b string) error {
		if store.ValidMailboxName(b) != nil {
			return nil
		}
		mb, err := boxes.OpenDir(b)
		if errors.Is(err, store.ErrOtherMount) {
			name = b // a mount: what it holds is not looked into
			return found
		}
		if err != nil {
			return nil
		}
		defer mb.Close()
		return mb.EachName(func(f string) error {
			folder, err := mb.OpenDir(f)
			if errors.Is(err, store.ErrOtherMount) {
				name = b
				return found
			}
			if err != nil {
				return nil
			}
			defer folder.Close()
			return folder.EachName(func(x string) error {
				if strings.HasPrefix(x, ".") {
					return nil
				}
				name = b
				return found
			})
		})
	})
	return name
}

// readHead reads at most the first n bytes of the regular file at path:
// a FIFO or a device there is refused, not waited on.
func readHead(path string, n int64) ([]byte, error) {
	f, _, err := safeio.OpenRegular(path, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

type restorer struct {
	o      RestoreOptions
	stage  string
	owners map[string]owner
	res    *RestoreResult
	files  map[string]int
	config []byte
	bounce []byte
	keys   map[string][]byte
	// stamps are the registry's and the mailbox tree's (archiveFormats).
	stamps []formats.Stamp
	// registered holds the mailboxes whose registry entry was restored.
	registered map[string]bool
}

func (rs *restorer) entry(e *Entry, body io.Reader) error {
	// Like a file written to the staging directory, one kept in memory
	// is refused the second time: neither copy is restored over the other.
	twice := fmt.Errorf("the archive holds %s twice", e.Name)
	switch e.Kind {
	case KindConfig:
		if rs.config != nil {
			return twice
		}
		return readAll(&rs.config, body, MaxConfig)
	case KindBounceKey:
		if rs.bounce != nil {
			return twice
		}
		return readAll(&rs.bounce, body, MaxKey)
	case KindDKIM:
		if _, ok := rs.keys[e.File]; ok {
			return twice
		}
		var b []byte
		if err := readAll(&b, body, MaxKey); err != nil {
			return err
		}
		rs.keys[e.File] = b
		return nil
	case KindRegistryMailbox, KindRegistryHook:
		var b []byte
		if err := readAll(&b, body, MaxRegistry); err != nil {
			return err
		}
		sub := "mailboxes"
		if e.Kind == KindRegistryHook {
			sub = "hooks"
		}
		out, err := rs.renumber(e.Kind, e.File, b)
		if err != nil {
			return fmt.Errorf("entry %q: %w", e.Name, err)
		}
		if out == nil {
			return nil
		}
		return rs.write(filepath.Join("registry", sub, e.File), out, -1, -1)
	case KindJournal:
		pr, pw := io.Pipe()
		go func() {
			_, err := queue.RewriteJournal(body, pw, rs.renumberItem)
			pw.CloseWithError(err)
		}()
		n, err := rs.copy(filepath.Join("queue", queue.JournalName), pr, -1, -1)
		pr.CloseWithError(io.ErrClosedPipe)
		rs.res.Journal = n
		if err != nil {
			return fmt.Errorf("entry %q: %w", e.Name, err)
		}
		return nil
	case KindIdempotency:
		var b []byte
		if err := readAll(&b, body, MaxIdemRecord); err != nil {
			return err
		}
		file, out, err := rs.renumberIdem(e.File, b)
		if err != nil {
			return fmt.Errorf("entry %q: %w", e.Name, err)
		}
		if file == "" {
			rs.res.IdemPrior++
			return nil
		}
		rs.res.IdemRecords++
		return rs.write(filepath.Join("queue", queue.IdempotencyDir, file), out, -1, -1)
	case KindRateLog:
		pr, pw := io.Pipe()
		done := make(chan [2]int, 1)
		go func() {
			kept, unowned, err := rewriteRateLog(body, pw, rs.o.Now().Add(-rateLogWindow), rs.senderUID)
			pw.CloseWithError(err)
			done <- [2]int{kept, unowned}
		}()
		_, err := rs.copy(rateLogName, pr, -1, -1)
		pr.CloseWithError(io.ErrClosedPipe)
		n := <-done
		if err != nil {
			return fmt.Errorf("entry %q: %w", e.Name, err)
		}
		rs.res.RateLog, rs.res.RateSends, rs.res.RateUnowned = true, n[0], n[1]
		return nil
	case KindMailboxFile:
		ow := rs.owners[e.Mailbox]
		n, err := rs.copy(filepath.Join(append([]string{"mailboxes", e.Mailbox}, e.Path...)...), body, int(ow.uid), int(ow.gid))
		if err != nil {
			return err
		}
		rs.files[e.Mailbox]++
		rs.res.Files++
		rs.res.Bytes += n
		return nil
	}
	return fmt.Errorf("entry %q is not expected here", e.Name)
}

func readAll(dst *[]byte, r io.Reader, max int64) error {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > max {
		return fmt.Errorf("an entry is larger than %d bytes", max)
	}
	*dst = b
	return nil
}

// write and copy create rel in the staging directory (never replacing
// anything: an archive naming a file twice is refused), owned by uid:gid
// when they are not -1.
func (rs *restorer) write(rel string, data []byte, uid, gid int) error {
	_, err := rs.copy(rel, bytes.NewReader(data), uid, gid)
	return err
}

func (rs *restorer) copy(rel string, r io.Reader, uid, gid int) (int64, error) {
	path := filepath.Join(rs.stage, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrExist) {
		return 0, fmt.Errorf("the archive holds %s twice", rel)
	}
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	crashpoint.Hit("restore-staged")
	return n, err
}

// renumber rewrites the uids of a registry file for this host: a
// mailbox's owner and creator, and a hook's binding to an
// operator-declared mailbox (whose identity includes its owner's uid).
func (rs *restorer) renumber(kind Kind, file string, data []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a registry file: %w", err)
	}
	str := func(k string) string {
		var s string
		json.Unmarshal(doc[k], &s)
		return s
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		doc[k] = b
	}
	if kind == KindRegistryMailbox {
		name := strings.TrimSuffix(file, ".json")
		ow, ok := rs.owners[name]
		if !ok {
			// Deleted between the snapshot of the registry and that of
			// the mailboxes: it was gone at the cut.
			rs.res.DroppedCount++
			if len(rs.res.Dropped) < MaxListed {
				rs.res.Dropped = append(rs.res.Dropped, name)
			}
			return nil, nil
		}
		var oldUID, createdBy uint32
		if err := json.Unmarshal(doc["owner_uid"], &oldUID); err != nil {
			return nil, errors.New("no owner_uid")
		}
		json.Unmarshal(doc["created_by"], &createdBy)
		if str("id") == "" { // an entry from before ids: keep the identity it had
			var created time.Time
			json.Unmarshal(doc["created_at"], &created)
			set("id", registry.DerivedID("m", "registry", name, strconv.FormatUint(uint64(oldUID), 10), created.UTC().Format(time.RFC3339Nano)))
		}
		rs.registered[name] = true
		set("owner_uid", ow.uid)
		set("owner_gid", ow.gid)
		if createdBy != 0 {
			set("created_by", rs.mapUID(createdBy, ow.uid))
		}
	} else if mb := str("mailbox"); mb != "" {
		if id, ok := rs.rebind(mb, str("mailbox_id")); ok {
			set("mailbox_id", id)
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// renumberItem rewrites a queue item's binding to an operator-declared
// mailbox, whose identity includes its owner's uid, for the owner's uid
// here; an item of a mailbox the socket made keeps its identity (the
// registry keeps the mailbox's).
func (rs *restorer) renumberItem(state []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(state, &doc); err != nil {
		return nil, fmt.Errorf("an item's state does not parse: %w", err)
	}
	var mailbox, id string
	json.Unmarshal(doc["mailbox"], &mailbox)
	json.Unmarshal(doc["mailbox_id"], &id)
	id, ok := rs.rebind(mailbox, id)
	if !ok {
		return state, nil
	}
	doc["mailbox_id"], _ = json.Marshal(id)
	return json.Marshal(doc)
}

// rebind is the identity here of what the archive binds to id, an identity
// of mailbox there, and whether it differs. An operator-declared mailbox's
// identity includes its owner's uid: its owner's identity there becomes
// its owner's here. An earlier owner's identity there (a queue item held,
// a hook left dormant since the mailbox was given to its owner) that is
// the identity the mailbox has here, because the earlier owner's uid
// there is the owner's uid here, becomes one no mailbox has: else the
// item would be sent, and the hook run, as the owner's.
func (rs *restorer) rebind(mailbox, id string) (string, bool) {
	ow, ok := rs.owners[mailbox]
	switch {
	case !ok || id == "" || ow.oldUID == ow.uid:
		return id, false
	case id == registry.ConfigMailboxID(mailbox, ow.oldUID):
		return registry.ConfigMailboxID(mailbox, ow.uid), true
	case id == registry.ConfigMailboxID(mailbox, ow.uid):
		return registry.DerivedID("c", "config", mailbox, "earlier owner, uid "+strconv.FormatUint(uint64(ow.uid), 10)+" there"), true
	}
	return id, false
}

// renumberIdem files an idempotency record under the identity its mailbox
// has here: an operator-declared mailbox's includes its owner's uid, so a
// record of one whose owner has another uid here moves to the name the
// key has with the new identity. A record of an older release, which does
// not say its key, keeps its name: it still answers while the identity is
// the same. A record of an earlier owner of the mailbox whose uid there
// is the owner's uid here names the identity the mailbox has here: it is
// left out (file ""), else it would answer the owner's retries with the
// earlier owner's message.
func (rs *restorer) renumberIdem(file string, data []byte) (string, []byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return "", nil, fmt.Errorf("not an idempotency record: %w", err)
	}
	var sentID, mailbox, id, key string
	json.Unmarshal(doc["sent_id"], &sentID)
	json.Unmarshal(doc["mailbox"], &mailbox)
	json.Unmarshal(doc["mailbox_id"], &id)
	json.Unmarshal(doc["key"], &key)
	if sentID == "" {
		return "", nil, errors.New("not an idempotency record: no sent_id")
	}
	ow, ok := rs.owners[mailbox]
	if !ok || id == "" || ow.oldUID == ow.uid {
		return file, data, nil
	}
	if id == registry.ConfigMailboxID(mailbox, ow.uid) {
		return "", nil, nil
	}
	if key == "" || id != registry.ConfigMailboxID(mailbox, ow.oldUID) {
		return file, data, nil
	}
	id = registry.ConfigMailboxID(mailbox, ow.uid)
	doc["mailbox_id"], _ = json.Marshal(id)
	out, err := json.Marshal(doc)
	return queue.IdempotencyFile(mailbox, id, key), out, err
}

// senderUID renumbers the owner of a send the send log counted: the
// mailbox's owner here when the send was its owner's, else the user of
// the same name (Manifest.Users). A send of an owner that is no user here
// is not counted for anyone.
func (rs *restorer) senderUID(mailbox string, old uint32) (uint32, bool) {
	if ow, ok := rs.owners[mailbox]; ok && ow.oldUID == old {
		return ow.uid, true
	}
	// Another mailbox of the same owner: every mailbox of one owner there
	// has one owner here (--map-owner maps owners, not mailboxes).
	for _, ow := range rs.owners {
		if ow.oldUID == old {
			return ow.uid, true
		}
	}
	name := rs.res.Manifest.Users[strconv.FormatUint(uint64(old), 10)]
	if mapped, ok := rs.o.MapOwner[name]; ok {
		name = mapped
	}
	if name == "" {
		return 0, false
	}
	uid, _, err := rs.o.LookupUser(name)
	return uid, err == nil
}

// mapUID renumbers a uid the archive's registry names by its user name;
// one that cannot be renumbered becomes fallback (the mailbox's owner).
func (rs *restorer) mapUID(old, fallback uint32) uint32 {
	name := rs.res.Manifest.Users[strconv.FormatUint(uint64(old), 10)]
	if mapped, ok := rs.o.MapOwner[name]; ok {
		name = mapped
	}
	if name == "" {
		return fallback
	}
	uid, _, err := rs.o.LookupUser(name)
	if err != nil {
		return fallback
	}
	return uid
}
