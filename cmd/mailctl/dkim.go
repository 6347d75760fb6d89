package main

import (
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"
	"time"

	"github.com/mailctl/mailctl/daemon/config"
	"github.com/mailctl/mailctl/daemon/outbound/dkim"
)

func init() {
	register(&command{name: "dkim", group: "operate", summary: "generate DKIM keys and print their DNS records", run: cmdDKIM})
}

const dkimHelp = `Usage: mailctl dkim SUBCOMMAND [flags]

  keygen [--selector S] [--algorithm ed25519|rsa]   create a key in paths.dkim_dir
  list                                              keys the daemon signs with
  dns [--domain D]                                  TXT records to publish

The daemon signs every message with every key in paths.dkim_dir (Ed25519 and
RSA side by side). Rotate by adding a key under a new selector, publishing its
record, waiting for DNS, then removing the old key file. These commands work on
files: run them as root. All take --config PATH (default $MAILCTL_CONFIG, then
` + config.DefaultPath + `). docs/dkim.md has the details.`

func cmdDKIM(args []string) int {
	return dispatch("dkim", dkimHelp, args, map[string]func([]string) int{
		"keygen": dkimKeygen,
		"list":   dkimList,
		"ls":     dkimList,
		"dns":    dkimDNS,
	})
}

// dkimConfig adds --config to fs and returns a loader for it.
func dkimConfig(fs *flag.FlagSet) func() (*config.Config, error) {
	path := fs.String("config", "", "config file (default $MAILCTL_CONFIG, then "+config.DefaultPath+")")
	return func() (*config.Config, error) {
		p := configPath(*path)
		cfg, err := config.Load(p)
		if errors.Is(err, iofs.ErrNotExist) {
			return nil, fmt.Errorf("no config at %s: this host is not set up; run `sudo mailctl setup` (it writes the config and the keys), or pass --config PATH", p)
		}
		return cfg, err
	}
}

// dkimKeys parses args, then reads the config and the keys in its dkim_dir.
// ok is false when the command is done, with code its exit code.
func dkimKeys(fs *flag.FlagSet, args []string, load func() (*config.Config, error)) (*config.Config, []*dkim.Key, int, bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return nil, nil, code, false
	}
	cfg, err := load()
	var keys []*dkim.Key
	if err == nil {
		keys, err = dkim.LoadKeys(cfg.Paths.DKIMDir)
	}
	if err != nil {
		return nil, nil, failure(fs, err), false
	}
	return cfg, keys, 0, true
}

func dkimKeygen(args []string) int {
	fs := newFlagSet("dkim keygen", "dkim keygen [--selector S] [--algorithm ed25519|rsa] [--config PATH]",
		"Creates a DKIM key (PKCS#8 PEM, root 0600) in paths.dkim_dir and prints the DNS record to publish. An existing selector is never overwritten.")
	alg := fs.String("algorithm", "ed25519", "ed25519 or rsa (RSA-2048)")
	sel := fs.String("selector", "", "selector (default: ed|rsa + YYYYMM, e.g. ed202611)")
	load := dkimConfig(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *alg != "ed25519" && *alg != "rsa" {
		return usageError(fs, "--algorithm must be ed25519 or rsa")
	}
	cfg, err := load()
	if err != nil {
		return failure(fs, err)
	}
	if *sel == "" {
		prefix := "ed"
		if *alg == "rsa" {
			prefix = "rsa"
		}
		*sel = prefix + time.Now().UTC().Format("200601")
	}
	k, err := dkim.GenerateKey(cfg.Paths.DKIMDir, *sel, *alg)
	if errors.Is(err, os.ErrPermission) && os.Geteuid() != 0 {
		err = fmt.Errorf("%w: the keys in %s are root's: run it with sudo", err, cfg.Paths.DKIMDir)
	}
	if err != nil {
		return failure(fs, err)
	}
	fmt.Fprintf(stdout, "created %s (%s, selector %s)\n", k.Path, k.Algorithm, k.Selector)
	if len(cfg.Domains) > 0 {
		fmt.Fprintln(stdout, "\nPublish this record before the daemon starts signing with the key:")
		for _, d := range cfg.Domains {
			fmt.Fprintln(stdout, dkim.TXTRecord(d, k))
		}
	}
	return 0
}

func dkimList(args []string) int {
	fs := newFlagSet("dkim list", "dkim list [--config PATH]", "Lists the DKIM keys in paths.dkim_dir: the daemon signs with each one from its next start or reload after the key was added.")
	load := dkimConfig(fs)
	cfg, keys, code, ok := dkimKeys(fs, args, load)
	if !ok {
		return code
	}
	if len(keys) == 0 {
		fmt.Fprintf(stdout, "no keys in %s: create them with `sudo mailctl dkim keygen --algorithm ed25519` and `--algorithm rsa`\n", cfg.Paths.DKIMDir)
		return 0
	}
	tw := table("SELECTOR\tALGORITHM\tFILE\tMODIFIED")
	for _, k := range keys {
		mod := "-"
		if st, err := os.Stat(k.Path); err == nil {
			mod = st.ModTime().Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Selector, k.Algorithm, k.Path, mod)
	}
	tw.Flush()
	return 0
}

func dkimDNS(args []string) int {
	fs := newFlagSet("dkim dns", "dkim dns [--domain D] [--config PATH]", "Prints the zone-file TXT record of every key for every configured domain (or just --domain). Long values are split into 255-byte strings.")
	domain := fs.String("domain", "", "only this domain")
	load := dkimConfig(fs)
	cfg, keys, code, ok := dkimKeys(fs, args, load)
	if !ok {
		return code
	}
	if len(keys) == 0 {
		return failure(fs, fmt.Errorf("no keys in %s: run `sudo mailctl dkim keygen` first", cfg.Paths.DKIMDir))
	}
	domains := cfg.Domains
	if *domain != "" {
		domains = []string{strings.ToLower(strings.TrimSuffix(*domain, "."))}
	}
	if len(domains) == 0 {
		return usageError(fs, "no domains in the config: pass --domain")
	}
	for _, d := range domains {
		for _, k := range keys {
			fmt.Fprintln(stdout, dkim.TXTRecord(d, k))
		}
	}
	return 0
}
