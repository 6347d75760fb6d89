package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
	"github.com/mailctl/mailctl/daemon/outbound/queue"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/internal/formats"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
	"github.com/mailctl/mailctl/store"
)

// checkKeys checks the DKIM keys on disk and returns them for the DNS checks.
func checkKeys(f *findings, cfg *config.Config, env Env) []*dkim.Key {
	dir := cfg.Paths.DKIMDir
	keys, err := dkim.LoadKeys(dir)
	if err != nil {
		if _, insecure := errors.AsType[*safeio.SecretError](err); insecure {
			return nil // checkSecrets names the key file and its fix
		}
		if errors.Is(err, fs.ErrPermission) {
			f.add("dkim.unreadable", Info, "run doctor as root", "cannot read the DKIM keys in %s", dir)
			return nil
		}
		f.add("dkim.broken", Fail, "move the broken file out of "+dir+" or restore it from a backup", "%v", err)
		return nil
	}
	if len(keys) == 0 {
		f.add("dkim.missing", Fail, "sudo mailctl setup (generates an Ed25519 and an RSA key)", "no DKIM key in %s: outbound mail is unsigned and will be rejected or junked", dir)
		return nil
	}
	{
		var sels []string
		for _, k := range keys {
			sels = append(sels, k.Selector+" ("+k.Algorithm+")")
		}
		f.add("dkim.keys", OK, "", "DKIM keys %s", strings.Join(sels, ", "))
	}
	return keys
}

// checkSecrets holds every file a secret-bearing config key names to the
// rule the daemon enforces at start and reload (config.SecretFiles): the
// same finding, with the command that fixes it.
func checkSecrets(f *findings, cfg *config.Config) {
	for _, p := range cfg.SecretProblems() {
		se, insecure := errors.AsType[*safeio.SecretError](p.Err)
		switch {
		case insecure:
			f.add("secret.insecure", Fail, se.Fix, "%s: %s %s: the daemon refuses to start or reload until it is fixed", p.Key, p.Path, se.Problem)
		case errors.Is(p.Err, fs.ErrNotExist):
			f.add("secret.missing", Fail, "create "+p.Path+" (owned by root, mode 0600) or fix "+p.Key+" in the config", "%s: %s does not exist: the daemon cannot start", p.Key, p.Path)
		default:
			f.add("secret.unreadable", Fail, "check "+p.Path, "%s: %v", p.Key, p.Err)
		}
	}
	if _, err := cfg.Relay.CertPool(); err != nil {
		f.add("relay.ca_file", Fail, "point relay.ca_file at a PEM file of the relay's certificate authority", "%v", err)
	}
}

// checkInputs warns of a file the daemon trusts without it being secret
// (its config, the certificate it serves, the certificate authorities it
// verifies the relay and MX hosts by) that someone other than root could
// change through the way to it: a directory, a link or the file itself.
// The daemon reads them as they are, so whoever may change one could have
// it serve, or trust, their own.
func checkInputs(f *findings, cfg *config.Config) {
	for _, in := range []struct{ key, path string }{
		{"config", cfg.File}, {"smtp.tls_cert", cfg.SMTP.TLSCert},
		{"relay.ca_file", cfg.Relay.CAFile}, {"delivery.ca_file", cfg.Delivery.CAFile},
	} {
		if in.path == "" {
			continue
		}
		where, why, err := safeio.OthersCanChange(in.path)
		if err != nil || where == "" {
			continue // a file that cannot be read has its own finding
		}
		way := fmt.Sprintf("is reached through %s, which %s", where, why)
		if where == in.path {
			way = why
		}
		f.add("input.changeable", Warn, "keep it below directories only root can change (as /etc/mailctl), owned by root and written by no one else, and point "+in.key+" at it there",
			"%s: %s %s: whoever that is could have the daemon use a file of theirs", in.key, in.path, way)
	}
}

// registered reads the owner of a registry mailbox (registry/mailboxes/<name>.json),
// as the daemon reads it: a link or a FIFO there is none, never followed
// nor waited on.
func registered(cfg *config.Config, name string) (uid uint32, ok bool) {
	data, err := safeio.ReadRegular(filepath.Join(cfg.Paths.RegistryDir(), "mailboxes", name+".json"), registry.MaxEntry)
	if err != nil {
		return 0, false
	}
	var m struct {
		OwnerUID uint32 `json:"owner_uid"`
	}
	if json.Unmarshal(data, &m) != nil {
		return 0, false
	}
	return m.OwnerUID, true
}

func lookupUID(name string) (uint32, bool) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(n), err == nil
}

// ownerSpec is the OWNER[:GROUP] argument of a chown that gives a mailbox
// back to uid: with the user's primary group, which the store gives its
// files. "UID:" is not it: chown takes a login group from a trailing colon
// only after a user name, and refuses a number so ("invalid spec").
func ownerSpec(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil && u.Gid != "" {
		return fmt.Sprintf("%d:%s", uid, u.Gid)
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// knownUser reports whether owner, a user name or uid, is an account here.
func knownUser(owner string) bool {
	_, ok := lookupUID(owner)
	return ok
}

// checkMailboxes checks every mailbox folder: declared or registered, owned by
// its owner, mode 0700, with every standard folder. The folders are their
// owners' to change: they are read as the store reads them, through its
// directory handles, which never follow a symlink nor cross into a mount
// (an owner's FUSE file system whose daemon never answers would otherwise
// hold doctor, and the daemon's request that runs it, forever).
func checkMailboxes(f *findings, cfg *config.Config, env Env) {
	root := cfg.Paths.MailboxesDir()
	boxes, err := store.OpenDir(root)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) { // a missing root is a paths finding
			f.add("mailbox.unreadable", Info, "run doctor as root", "cannot list %s: %v", root, err)
		}
		return
	}
	defer boxes.Close()
	var names []string
	if err := boxes.EachName(func(name string) error {
		if !strings.HasPrefix(name, ".") {
			names = append(names, name)
		}
		return nil
	}); err != nil {
		f.add("mailbox.unreadable", Info, "run doctor as root", "cannot list %s: %v", root, err)
		return
	}
	slices.Sort(names) // the report in a stable order, as os.ReadDir gave it
	seen := map[string]bool{}
	before := len(*f)
	for _, name := range names {
		seen[name] = true
		checkMailbox(f, cfg, boxes, name)
	}
	for _, m := range cfg.Mailboxes {
		switch {
		case seen[m.Name]:
		case !knownUser(m.Owner):
			// The daemon does not serve it, and a reload would not change that.
			f.add("mailbox.owner_unknown", Fail, "create the user or fix owner in [[mailboxes]]", "mailbox %s is declared for user %q, who does not exist", m.Name, m.Owner)
		default:
			f.add("mailbox.missing", Warn, "reload the daemon, which creates declared mailboxes: "+protocol.ReloadLine(), "declared mailbox %s has no folder yet", m.Name)
		}
	}
	if len(*f) == before {
		f.add("mailbox.ok", OK, "", "%d mailbox folders, owners and modes as expected", len(seen))
	}
}

// mountFinding names path, a mailbox or a folder of one that is a mount:
// the store uses only its own file system (docs/security.md).
func mountFinding(f *findings, path string) {
	f.add("mailbox.mount", Fail, "unmount it (sudo umount "+path+"), then move what it held into the mailbox if it is mail",
		"%s is a mount (another file system than the store's): mailctl neither reads nor writes mail there, and backups leave it out", path)
}

// checkMailbox checks the mailbox directory name of the store's directory
// boxes.
func checkMailbox(f *findings, cfg *config.Config, boxes *store.Dir, name string) {
	path := filepath.Join(boxes.Path(), name)
	st, err := boxes.Lstat(name)
	if errors.Is(err, store.ErrOtherMount) {
		mountFinding(f, path)
		return
	}
	if err != nil {
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		f.add("mailbox.not_dir", Warn, "move "+path+" out of the store", "%s is not a directory", path)
		return
	}
	want, known := expectedOwner(f, cfg, name, path)
	got := st.Uid
	if known && got != want {
		f.add("mailbox.owner_wrong", Fail, "sudo "+protocol.GiveMailboxCommand(ownerSpec(want), path), "mailbox %s belongs to uid %d, expected uid %d", name, got, want)
	}
	if m := fs.FileMode(st.Mode).Perm(); m != store.DirMode {
		f.add("mailbox.mode", Warn, fmt.Sprintf("sudo chmod %04o %s", store.DirMode, path), "mailbox %s has mode %04o, expected %04o", name, m, store.DirMode)
	}
	mb, err := boxes.OpenDir(name)
	if errors.Is(err, store.ErrOtherMount) { // mounted since the lstat
		mountFinding(f, path)
		return
	}
	if err != nil {
		return
	}
	defer mb.Close()
	for _, folder := range store.Folders {
		checkFolder(f, name, mb, folder, got, want, known)
	}
}

// expectedOwner is the uid a mailbox should belong to, from the config or
// the registry; known is false when neither says (and that is a finding).
func expectedOwner(f *findings, cfg *config.Config, name, path string) (want uint32, known bool) {
	if decl := cfg.Mailbox(name); decl != nil {
		if want, known = lookupUID(decl.Owner); !known {
			f.add("mailbox.owner_unknown", Fail, "create the user or fix owner in [[mailboxes]]", "mailbox %s is declared for user %q, who does not exist", name, decl.Owner)
		}
		return want, known
	}
	if uid, ok := registered(cfg, name); ok {
		return uid, true
	}
	f.add("mailbox.orphaned", Warn, fmt.Sprintf("declare it in the config, re-create it (`mailctl mailboxes create %s`), or archive and remove %s", name, path),
		"%s is neither declared in the config nor in the registry: no mail is delivered to it", path)
	return 0, false
}

// checkFolder checks one standard folder of a mailbox, whose directory is
// mb.
func checkFolder(f *findings, name string, mb *store.Dir, folder string, got, want uint32, known bool) {
	fp := filepath.Join(mb.Path(), folder)
	st, err := mb.Lstat(folder)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// The repair makes the folder for the owner the mailbox should
		// have, not for whoever holds its directory now.
		owner := got
		if known {
			owner = want
		}
		f.add("mailbox.folder_missing", Warn, fmt.Sprintf("sudo mailctl mailboxes create %s --owner %d (repairs folders)", name, owner), "mailbox %s has no %s folder", name, folder)
	case errors.Is(err, store.ErrOtherMount):
		mountFinding(f, fp)
	case err != nil:
		return
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		f.add("mailbox.folder_type", Fail, "move "+fp+" away and repair the mailbox", "%s is not a directory (a symlink or file planted in the mailbox?)", fp)
	default:
		if known && st.Uid != want {
			f.add("mailbox.owner_wrong", Fail, "sudo "+protocol.GiveMailboxCommand(ownerSpec(want), mb.Path()), "%s belongs to uid %d, expected uid %d", fp, st.Uid, want)
		}
	}
}

// checkQueue reads the queue journal as a reader (without the daemon's
// lock, while it may be appending): how many items, by state, how old the
// oldest, how many are only waiting to be dropped, and any damage the
// daemon would set aside at its next start.
func checkQueue(f *findings, cfg *config.Config, env Env) {
	dir := cfg.Paths.QueueDir()
	in, err := queue.Inspect(dir)
	switch {
	case errors.Is(err, fs.ErrPermission):
		f.add("queue.unreadable", Info, "run doctor as root", "cannot read the queue")
		return
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, formats.ErrNewer), errors.Is(err, formats.ErrDamaged):
		return // a journal's format is checkFormats' finding
	case err != nil:
		f.add("queue.unreadable", Warn, "check "+dir, "cannot read the queue journal: %v", err)
		return
	}
	before := len(*f)
	if in.Damaged != "" {
		f.add("queue.damaged", Fail, "back up "+filepath.Join(dir, "journal")+", then "+protocol.RestartLine()+": the daemon sets the damaged part aside in "+filepath.Join(dir, "corrupt")+" and delivers the rest",
			"the queue journal is damaged: %s", in.Damaged)
	}
	if in.Skipped > 0 {
		f.add("queue.damaged", Warn, "report it with the journal attached: the daemon skips these records",
			"%d record(s) of the queue journal are not understood", in.Skipped)
	}
	if in.SetAside > 0 {
		f.add("queue.corrupt", Warn, "inspect and remove the files in "+filepath.Join(dir, "corrupt"),
			"%d file(s) in %s: parts of the queue that could not be loaded were set aside there", in.SetAside, filepath.Join(dir, "corrupt"))
	}
	if len(*f) == before {
		msg := fmt.Sprintf("%d item(s) in the queue", in.Items)
		var parts []string
		for _, st := range protocol.QueueStates {
			if n := in.ByState[st]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, st))
			}
		}
		if len(parts) > 0 {
			msg += ": " + strings.Join(parts, ", ") + "; the oldest queued " + env.Now().Sub(in.Oldest).Round(time.Minute).String() + " ago"
		}
		if in.Dropping > 0 {
			// Not mail waiting to go out: the daemon drops them when their
			// attempt ends, or at its next start if it is stopped.
			msg += fmt.Sprintf("; %d more to be dropped because their mailbox was deleted while they were being delivered (when that attempt ends, or at the daemon's next start)", in.Dropping)
		}
		f.add("queue.ok", OK, "", "%s", msg)
	}
}
