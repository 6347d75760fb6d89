package main

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon"
	"github.com/mailctl/mailctl/daemon/backup"
	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/registry"
	"github.com/mailctl/mailctl/internal/newfile"
	"github.com/mailctl/mailctl/internal/safeio"
	"github.com/mailctl/mailctl/protocol"
)

func init() {
	register(&command{name: "backup", group: "operate", summary: "write a consistent archive of the mail, queue, registry, keys and config while mail flows (root)", run: cmdBackup})
	register(&command{name: "restore", group: "operate", summary: "restore a backup archive on this host, mapping owners by user name (root, daemon stopped)", run: cmdRestore})
}

// loadHostConfig reads the config at --config (or the default) for a
// command that needs this host's paths.
func loadHostConfig(flagValue string) (*config.Config, error) {
	p := configPath(flagValue)
	cfg, err := config.Load(p)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("no config at %s: this host is not set up; run `sudo mailctl setup`, or pass --config PATH", p)
	}
	return cfg, err
}

func cmdBackup(args []string) int {
	fs := newFlagSet("backup", "backup --output FILE|- [--gzip] [--config PATH] [--socket PATH]", `Writes an archive (tar; with --gzip, or a FILE ending in .gz or .tgz,
compressed) of everything needed to rebuild this host's mail: every mailbox's
messages, the outbound queue and its idempotency keys (a retry after the
restore answers with the message its key made), the sends the rate limits
count (the last day's), the registry (mailboxes and hooks made over the
socket), the bounce key, the DKIM keys and the config. Mail keeps flowing
meanwhile: the daemon links a snapshot together in a moment (each mailbox's
folders locked while their files are linked), so every message acknowledged
before the backup began is in it exactly once, with every queued item, and
nothing half-written. The message index is left out: it is derived, and
rebuilt when the restored daemon starts. The archive is written to an
unnamed file in FILE's directory and named FILE when whole (a temporary
file beside it where the file system has no unnamed files), so an
interrupted backup leaves nothing; with "-" it goes to stdout. Root only, with the daemon running. Restore it with
`+"`mailctl restore`"+`.`)
	out := fs.String("output", "", "archive to write (\"-\": stdout); an existing file is never replaced")
	fs.StringVar(out, "o", "", "short for --output")
	gz := fs.Bool("gzip", false, "compress with gzip")
	cfgPath := fs.String("config", "", "config file (default $MAILCTL_CONFIG, then "+config.DefaultPath+")")
	socket := fs.String("socket", "", "control socket (default: the config's)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 || *out == "" {
		return usageError(fs, "name the archive to write with --output FILE (or --output - for stdout)")
	}
	if os.Geteuid() != 0 {
		// A dev instance's files are its user's, but a backup is of the
		// host's daemon: its archive holds every mailbox and the keys.
		return failure(fs, errors.New("a backup is of the host's daemon and reads its config and DKIM keys, which only root can: run it with sudo; a `mailctl dev` instance keeps everything in its --dir: stop it and copy that directory"))
	}
	cfg, err := loadHostConfig(*cfgPath)
	if err != nil {
		return failure(fs, err)
	}
	compress := *gz || strings.HasSuffix(*out, ".gz") || strings.HasSuffix(*out, ".tgz")
	var w io.Writer = os.Stdout
	var file *newfile.File
	if *out != "-" {
		file, err = newfile.Create(*out, 0o600)
		if errors.Is(err, iofs.ErrExist) {
			return failure(fs, fmt.Errorf("%s exists: name a new file (a backup never replaces one)", *out))
		}
		if err != nil {
			return failure(fs, err)
		}
		defer file.Close()
		w = file
	}
	sock := *socket
	if sock == "" {
		sock = cfg.Paths.Socket
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := protocol.Dial(ctx, sock)
	if err != nil {
		return (&clientFlags{fs: fs}).fail(err)
	}
	defer c.Close()
	var snap protocol.BackupSnapshot
	if err := c.Call(ctx, protocol.VerbBackupSnapshot, protocol.Empty{}, &snap); err != nil {
		return (&clientFlags{fs: fs}).fail(err)
	}
	// The snapshot is this command's to remove; one left by a crash goes
	// at the daemon's next start. Only a directory of the daemon's making
	// is removed, whatever the answer says.
	if filepath.Dir(snap.Dir) != cfg.Paths.MailboxesDir() || !strings.HasPrefix(filepath.Base(snap.Dir), safeio.TempPrefix+"backup-") {
		return failure(fs, fmt.Errorf("the daemon answered a snapshot in %s, not in %s: is --socket the daemon of --config?", snap.Dir, cfg.Paths.MailboxesDir()))
	}
	defer os.RemoveAll(snap.Dir)
	host, _ := os.Hostname()
	src := backup.Source{Snapshot: snap, ConfigFile: cfg.File, DKIMDir: cfg.Paths.DKIMDir, Host: host, Mailctl: version, Now: time.Now(),
		UserName: func(uid uint32) string {
			if n := registry.UserName(uid); n != fmt.Sprint(uid) {
				return n
			}
			return ""
		}}
	var zw *gzip.Writer
	if compress {
		zw = gzip.NewWriter(w)
		w = zw
	}
	st, err := backup.Write(w, src)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err == nil && file != nil {
		err = file.Publish()
	}
	if err != nil {
		return failure(fs, fmt.Errorf("writing the archive: %w", err))
	}
	for _, w := range st.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", inert(w))
	}
	where := *out
	if where == "-" {
		where = "stdout"
	}
	fmt.Fprintf(stderr, "backup of %s written to %s: %d mailbox(es), %d message(s), %d file(s), %d bytes; %d queued item(s); cut at %s\n",
		host, where, st.Mailboxes, st.Messages, st.Files, st.Bytes, snap.QueueItems, snap.CutAt.Format(time.RFC3339))
	return 0
}

func cmdRestore(args []string) int {
	fs := newFlagSet("restore", "restore [--force] [--map-owner OLD=NEW]... [--config PATH] FILE|-", `Restores an archive `+"`mailctl backup`"+` wrote (from FILE, or stdin with "-") into
the state directory and DKIM directory this host's config names. Owners are
found by user name, since uids differ from host to host: each mailbox goes to
the user of this host with its owner's name (the registry's records are
renumbered to match). When an owner is not a user here, nothing is restored
and every such mailbox is named: create the users, or map each owner with
--map-owner OLD=NEW. A store that holds messages, registry entries or queued
items is not restored over unless --force is given; then what it held is
moved aside (to state_dir/pre-restore-TIME), never deleted. This host's
config (set it up first, with `+"`mailctl setup`"+` or by hand) says where the
state and the keys go and is kept: the archive's config is written beside it
as config.toml.restored, to compare. DKIM keys this host has under other
selectors are kept beside the archive's, and both sets are named: the
daemon signs with every key in dkim_dir. Run it with the daemon stopped; the
index is rebuilt when the daemon starts. Root only.`)
	force := fs.Bool("force", false, "restore over a store that is not empty, moving what it holds aside")
	var maps stringList
	fs.Var(&maps, "map-owner", "OLD=NEW: give the mailboxes of owner OLD (a user name, or #UID) to user NEW of this host (repeatable)")
	cfgPath := fs.String("config", "", "config file (default $MAILCTL_CONFIG, then "+config.DefaultPath+")")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(fs, "name the archive to restore (FILE, or - for stdin)")
	}
	if os.Geteuid() != 0 {
		return failure(fs, errors.New("a restore writes the state and the keys and gives mailboxes to their owners: run it with sudo"))
	}
	mapOwner := map[string]string{}
	for _, m := range maps {
		old, nw, ok := strings.Cut(m, "=")
		if !ok || old == "" || nw == "" {
			return usageError(fs, "--map-owner %q: want OLD=NEW", m)
		}
		mapOwner[old] = nw
	}
	cfg, err := loadHostConfig(*cfgPath)
	if err != nil {
		return failure(fs, err)
	}
	lock, err := daemon.LockState(cfg)
	if err != nil {
		return failure(fs, fmt.Errorf("%w with %s, then restore", err, stopLine(cfg)))
	}
	defer lock.Close()
	var in io.Reader = os.Stdin
	if p := fs.Arg(0); p != "-" {
		f, err := os.Open(p)
		if err != nil {
			return failure(fs, err)
		}
		defer f.Close()
		in = f
	}
	var declared []string
	declaredOwners := map[string]uint32{}
	for _, mb := range cfg.Mailboxes {
		declared = append(declared, mb.Name)
		if uid, _, err := registry.ResolveUser(mb.Owner); err == nil {
			declaredOwners[mb.Name] = uid
		}
	}
	res, err := backup.Restore(in, backup.RestoreOptions{StateDir: cfg.Paths.StateDir, DKIMDir: cfg.Paths.DKIMDir, ConfigFile: cfg.File,
		Force: *force, MapOwner: mapOwner, LookupUser: registry.ResolveUser, Declared: declared, DeclaredOwners: declaredOwners})
	if err != nil {
		return failure(fs, err)
	}
	m := res.Manifest
	fmt.Fprintf(stdout, "restored the backup of %s (cut at %s) into %s: %d mailbox(es), %d file(s), %d bytes; queue journal %d bytes (%d item(s))\n",
		inert(m.Host), m.CutAt.Format(time.RFC3339), cfg.Paths.StateDir, len(res.Mailboxes), res.Files, res.Bytes, res.Journal, m.QueueItems)
	for _, mb := range res.Mailboxes {
		fmt.Fprintf(stdout, "  %s: owner %s (uid %d there) -> %s (uid %d here), %d file(s)\n", mb.Name, inert(mb.From), mb.OldUID, inert(mb.To), mb.NewUID, mb.Files)
	}
	if res.IdemRecords > 0 {
		fmt.Fprintf(stdout, "idempotency keys: %d, each answering a retry with the message it made\n", res.IdemRecords)
	}
	if res.IdemPrior > 0 {
		fmt.Fprintf(stdout, "idempotency keys left out: %d, of earlier owners of mailboxes whose owner here has their uid there\n", res.IdemPrior)
	}
	if res.RateLog {
		fmt.Fprintf(stdout, "send rate limits: %d send(s) of the last day counted again", res.RateSends)
		if res.RateUnowned > 0 {
			fmt.Fprintf(stdout, " (%d of owners that are no users here left out)", res.RateUnowned)
		}
		fmt.Fprintln(stdout)
	}
	for _, k := range res.Keys {
		fmt.Fprintf(stdout, "DKIM key written: %s\n", k)
	}
	for _, n := range res.Dropped {
		fmt.Fprintf(stdout, "registry entry of mailbox %s left out: the mailbox was deleted while the backup was taken\n", inert(n))
	}
	if more := res.DroppedCount - len(res.Dropped); more > 0 {
		fmt.Fprintf(stdout, "%d more registry entries of mailboxes the archive does not hold left out (%d in all)\n", more, res.DroppedCount)
	}
	if res.ConfigTo != "" {
		fmt.Fprintf(stdout, "the archive's config written to %s\n", res.ConfigTo)
	}
	if res.MovedAside != "" {
		fmt.Fprintf(stdout, "what the state directory held before is in %s\n", res.MovedAside)
	}
	if res.UndeclaredCount > 0 {
		from := "config.toml.restored"
		if res.ConfigTo != "" {
			from = res.ConfigTo
		}
		fmt.Fprintf(stdout, "mailboxes not served here: %s: the archive's registry has no entry for them and %s does not declare them, "+
			"so mail to them does not reach them and their queued sends are not recorded in their sent folders; "+
			"copy their [[mailboxes]] tables from %s into %s before starting the daemon\n",
			listed(res.Undeclared, res.UndeclaredCount), cfg.File, from, cfg.File)
	}
	if res.OwnerDiffersCount > 0 {
		fmt.Fprintf(stdout, "mailboxes %s declares for another owner: %s: the daemon does not serve them (their folders and mail are the restored owner's), "+
			"so mail to them is refused; before starting the daemon, change their owner in %s to the restored one, "+
			"or give the declared owner their mail with `sudo %s` for each mailbox's FOLDER\n",
			cfg.File, inert(listed(res.OwnerDiffers, res.OwnerDiffersCount)), cfg.File, protocol.GiveMailboxCommand("UID:GID", "FOLDER"))
	}
	if len(res.DKIMRestored) > 0 && len(res.DKIMBeside) > 0 {
		fmt.Fprintf(stdout, "DKIM keys of two hosts in %s: the archive's (selectors %s) beside this host's (selectors %s); "+
			"the daemon signs every message with every key there, so with both sets, and a signature whose selector your DNS does not publish fails: "+
			"before starting the daemon, move the .key files of the set your domains' DNS does not publish out of %s "+
			"(the archive's are those the old host's DNS published), or publish the records of all of them (`sudo mailctl dkim dns`)\n",
			cfg.Paths.DKIMDir, inert(strings.Join(res.DKIMRestored, ", ")), inert(strings.Join(res.DKIMBeside, ", ")), cfg.Paths.DKIMDir)
	}
	fmt.Fprintf(stdout, "start the daemon (`%s`): it rebuilds the index from the restored files\n", startCommand(cfg.File))
	return 0
}

// startCommand is the line that starts the daemon of the config at cfgFile:
// the unit's, which reads only the default config and only where systemd
// runs, or mailctl serve (as setup says where systemd is not running).
func startCommand(cfgFile string) string {
	if cfgFile != config.DefaultPath {
		return "sudo mailctl serve --config " + protocol.ShellQuote(cfgFile)
	}
	return protocol.StartCommand()
}

// stopLine says how to stop the daemon that holds the state of cfg: the
// unit's stop for the default config where systemd runs (the unit serves
// that one); otherwise a SIGTERM to the daemon answering on the config's
// socket, named by its process id when it answers.
func stopLine(cfg *config.Config) string {
	if cfg.File == config.DefaultPath && protocol.SystemdRuns() {
		return protocol.StopLine()
	}
	if pid := protocol.PIDAt(context.Background(), cfg.Paths.Socket); pid > 1 {
		return fmt.Sprintf("`sudo kill %d` (the daemon answering at %s; SIGTERM drains it and ends it)", pid, protocol.ShellQuote(cfg.Paths.Socket))
	}
	return protocol.StopLine()
}

// listed joins the names a restore gives of count, saying how many more
// there are past them: it names at most backup.MaxListed.
func listed(names []string, count int) string {
	s := strings.Join(names, ", ")
	if more := count - len(names); more > 0 {
		s += fmt.Sprintf(" and %d more (%d in all)", more, count)
	}
	return s
}
