package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/mailctl/mailctl/internal/safeio"
)

// Which config keys name files that hold secrets is said once, by a struct
// tag on the key's field:
//
//	secret:"file"        the key names a file holding a secret
//	secret:"dir:GLOB"    the key names a directory whose files matching GLOB
//	                     hold secrets (dkim_dir: *.key)
//	secret:"none"        the key names a file or directory that holds none
//
// Every file a "file" or "dir" key names is held to safeio.ReadSecret's
// rule, at start, at every reload and by `mailctl doctor`; a test fails when
// a key that looks like it names a file carries no tag.

// SecretFile is a file holding a secret and the config key that names it.
type SecretFile struct {
	Key  string // e.g. "relay.password_file", "paths.dkim_dir"
	Path string
}

// SecretFiles lists the files holding secrets that c names, sorted by key
// and path. A secret directory that does not exist lists nothing.
func (c *Config) SecretFiles() []SecretFile {
	var out []SecretFile
	walkSecrets("", reflect.ValueOf(c).Elem(), func(key, tag, path string) {
		if path == "" {
			return
		}
		if glob, ok := strings.CutPrefix(tag, "dir:"); ok {
			ents, err := os.ReadDir(path)
			if err != nil {
				return
			}
			for _, e := range ents {
				if ok, _ := filepath.Match(glob, e.Name()); ok && !strings.HasPrefix(e.Name(), ".") {
					out = append(out, SecretFile{Key: key, Path: filepath.Join(path, e.Name())})
				}
			}
			return
		}
		if tag == "file" {
			out = append(out, SecretFile{Key: key, Path: path})
		}
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// walkSecrets calls fn for every string field of v with a secret tag, with
// its TOML key path. Arrays of tables (mailboxes, hooks) hold no file keys.
func walkSecrets(prefix string, v reflect.Value, fn func(key, tag, value string)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[Duration]():
			walkSecrets(prefix+name+".", v.Field(i), fn)
		case f.Type.Kind() == reflect.String:
			if tag, ok := f.Tag.Lookup("secret"); ok {
				fn(prefix+name, tag, v.Field(i).String())
			}
		}
	}
}

// SecretProblem is a secret file that breaks the rule, or cannot be read.
type SecretProblem struct {
	Key  string
	Path string
	Err  error // a *safeio.SecretError when the file breaks the rule
}

func (p *SecretProblem) Error() string { return p.Key + ": " + p.Err.Error() }
func (p *SecretProblem) Unwrap() error { return p.Err }

// SecretProblems checks every file SecretFiles lists.
func (c *Config) SecretProblems() []*SecretProblem {
	var out []*SecretProblem
	for _, s := range c.SecretFiles() {
		if err := safeio.CheckSecret(s.Path); err != nil {
			out = append(out, &SecretProblem{Key: s.Key, Path: s.Path, Err: err})
		}
	}
	return out
}

// CheckSecrets is SecretProblems as one error, or nil: the daemon refuses to
// start, and a reload is refused, while it is not nil.
func (c *Config) CheckSecrets() error {
	var errs []error
	for _, p := range c.SecretProblems() {
		errs = append(errs, p)
	}
	return errors.Join(errs...)
}

// MaxCAFile bounds relay.ca_file and delivery.ca_file: a bundle of every
// public root is about 200 KiB.
const MaxCAFile = 1 << 20

// CertPool reads relay.ca_file into the pool the relay's certificate must
// chain to; nil (and no error) when ca_file is not set: the system's roots.
func (r Relay) CertPool() (*x509.CertPool, error) {
	if r.CAFile == "" {
		return nil, nil
	}
	data, err := safeio.ReadInput(r.CAFile, MaxCAFile)
	if errors.Is(err, safeio.ErrTooLarge) {
		return nil, fmt.Errorf("relay.ca_file: %s is larger than %d KiB: point it at a PEM bundle of the relay's certificate authorities", r.CAFile, MaxCAFile>>10)
	}
	if err != nil {
		return nil, fmt.Errorf("relay.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("relay.ca_file: %s holds no PEM certificate (-----BEGIN CERTIFICATE-----): point it at the relay's certificate authority", r.CAFile)
	}
	return pool, nil
}
