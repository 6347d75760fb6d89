package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// leafKey is one config key, found by walking every field of Config,
// arrays of tables included.
type leafKey struct {
	key string
	f   reflect.StructField
}

func allKeys(prefix string, t reflect.Type) []leafKey {
	var out []leafKey
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[Duration]() {
			out = append(out, allKeys(prefix+name+".", ft)...)
			continue
		}
		out = append(out, leafKey{prefix + name, f})
	}
	return out
}

// fileish matches key names that may name a file or hold a credential: such
// a key must say, with its secret tag, whether the file it names holds a
// secret.
var fileish = regexp.MustCompile(`(file|dir|path|socket|key|cert|pass|token|secret|cred)`)

// TestEverySecretKeyIsCovered walks every config key: one that looks like
// it names a file must carry a secret tag ("file", "dir:GLOB" or "none"),
// and every key tagged as holding secrets must be one the checks reach. A
// new key such as relay.client_key_file fails here until it is tagged.
func TestEverySecretKeyIsCovered(t *testing.T) {
	keys := allKeys("", reflect.TypeFor[Config]())
	if len(keys) < 80 {
		t.Fatalf("found %d config keys; the walk is broken", len(keys))
	}
	var tagged []string
	tags := map[string]string{}
	for _, k := range keys {
		tags[k.key] = k.f.Tag.Get("secret")
		tag, ok := k.f.Tag.Lookup("secret")
		name := k.key[strings.LastIndexByte(k.key, '.')+1:]
		switch {
		case !ok && fileish.MatchString(name) && k.key != "trust.resolver" && !strings.HasPrefix(k.key, "hooks."):
			t.Errorf("config key %s looks like it names a file: tag its field secret:\"file\", secret:\"dir:GLOB\" or secret:\"none\"", k.key)
		case !ok:
		case k.f.Type.Kind() != reflect.String:
			t.Errorf("config key %s: a secret tag on a %s; only string keys name files", k.key, k.f.Type)
		case tag == "file" || strings.HasPrefix(tag, "dir:") && len(tag) > 4:
			tagged = append(tagged, k.key)
		case tag != "none":
			t.Errorf("config key %s: secret tag %q is not file, dir:GLOB or none", k.key, tag)
		}
	}
	for _, want := range []string{"paths.dkim_dir", "relay.password_file", "smtp.tls_key"} {
		if !slices.Contains(tagged, want) {
			t.Errorf("%s is not tagged as holding a secret", want)
		}
	}

	// Point every tagged key at a file others can read: each must be named.
	c := Default()
	dir := t.TempDir()
	v := reflect.ValueOf(c).Elem()
	set := map[string]bool{}
	for _, k := range tagged {
		path := filepath.Join(dir, strings.ReplaceAll(k, ".", "_"))
		if glob, ok := strings.CutPrefix(tags[k], "dir:"); ok {
			os.Mkdir(path, 0o700)
			if err := os.WriteFile(filepath.Join(path, strings.ReplaceAll(glob, "*", "x")), []byte("secret"), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(path, []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		valueOf(t, v, k).SetString(path)
		set[k] = true
	}
	// The checks reach the files through walkSecrets: it must see every
	// tagged key (one inside an array of tables would be missed).
	var walked []string
	walkSecrets("", v, func(key, tag, _ string) {
		if tag != "none" {
			walked = append(walked, key)
		}
	})
	if !slices.Equal(walked, tagged) {
		t.Errorf("the checks walk %v, but %v are tagged as holding secrets", walked, tagged)
	}
	err := c.CheckSecrets()
	for k := range set {
		if err == nil || !strings.Contains(err.Error(), k+": ") || !strings.Contains(err.Error(), "chmod 600 "+filepath.Join(dir, strings.ReplaceAll(k, ".", "_"))) {
			t.Errorf("a group- and world-readable file under %s: error %v does not name the key and the chmod", k, err)
		}
	}
	if n := len(c.SecretProblems()); n != len(tagged) {
		t.Errorf("%d problems for %d insecure secret files", n, len(tagged))
	}
}

func valueOf(t *testing.T, v reflect.Value, key string) reflect.Value {
	t.Helper()
	for _, p := range strings.Split(key, ".") {
		v = v.FieldByIndex(indexOf(t, v.Type(), p))
	}
	return v
}

func indexOf(t *testing.T, st reflect.Type, name string) []int {
	t.Helper()
	for i := range st.NumField() {
		if n, _, _ := strings.Cut(st.Field(i).Tag.Get("toml"), ","); n == name {
			return []int{i}
		}
	}
	t.Fatalf("no field %s in %s", name, st)
	return nil
}

// TestSecretFilesOfAPrivateSetup: files that keep the rule are listed and
// pass; hidden and non-matching files in a key directory are not secrets.
func TestSecretFilesOfAPrivateSetup(t *testing.T) {
	dir := t.TempDir()
	dk := filepath.Join(dir, "dkim")
	os.Mkdir(dk, 0o700)
	for name, mode := range map[string]os.FileMode{"a.key": 0o600, "b.key": 0o400, ".tmp-a.key-1": 0o644, "README": 0o644} {
		os.WriteFile(filepath.Join(dk, name), []byte("k"), mode)
	}
	pw := filepath.Join(dir, "relay.pw")
	os.WriteFile(pw, []byte("pw"), 0o600)
	c, err := Parse([]byte("[paths]\ndkim_dir = \"" + dk + "\"\n[relay]\nhost = \"smtp.example.com\"\nusername = \"u\"\npassword_file = \"" + pw + "\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range c.SecretFiles() {
		got = append(got, s.Key+"="+filepath.Base(s.Path))
	}
	if want := []string{"paths.dkim_dir=a.key", "paths.dkim_dir=b.key", "relay.password_file=relay.pw"}; !slices.Equal(got, want) {
		t.Fatalf("secret files %v, want %v", got, want)
	}
	if err := c.CheckSecrets(); err != nil {
		t.Fatalf("private files refused: %v", err)
	}
}

func TestRelayTLSAndPortDefaults(t *testing.T) {
	for _, tt := range []struct {
		text, tls string
		port      int
	}{
		{"host = \"r.test\"", RelayStartTLS, 587},
		{"host = \"r.test\"\nport = 465", RelayImplicitTLS, 465},
		{"host = \"r.test\"\nport = 2525", RelayStartTLS, 2525},
		{"host = \"r.test\"\ntls = \"implicit\"", RelayImplicitTLS, 465},
		{"host = \"r.test\"\ntls = \"implicit\"\nport = 4650", RelayImplicitTLS, 4650},
		{"host = \"r.test\"\ntls = \"starttls\"\nport = 465", RelayStartTLS, 465},
		{"", "", 0},
	} {
		c, err := Parse([]byte("[relay]\n" + tt.text + "\n"))
		if err != nil {
			t.Fatalf("%q: %v", tt.text, err)
		}
		if c.Relay.TLS != tt.tls || c.Relay.Port != tt.port {
			t.Errorf("%q: tls %q port %d, want %q %d", tt.text, c.Relay.TLS, c.Relay.Port, tt.tls, tt.port)
		}
	}
}

func TestRelayValidation(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"host = \"r.test\"\ntls = \"ssl\"", `relay.tls: "ssl" is neither "implicit"`},
		{"host = \"r.test\"\ntls = \"STARTTLS\"", `relay.tls: "STARTTLS"`},
		{"tls = \"implicit\"", "need relay.host"},
		{"ca_file = \"/etc/ssl/ca.pem\"", "need relay.host"},
		{"host = \"r.test\"\nca_file = \"ca.pem\"", "relay.ca_file: \"ca.pem\" must be an absolute path"},
		{"host = \"r.test\"\nusername = \"u\"\npassword_file = \"pw\"", "relay.password_file: \"pw\" must be an absolute path"},
	} {
		_, err := Parse([]byte("[relay]\n" + tt.text + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want it to say %q", tt.text, err, tt.want)
		}
	}
}

func TestRelayCertPool(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "ca.pem")
	os.WriteFile(cert, selfSigned(t), 0o644)
	if p, err := (Relay{CAFile: cert}).CertPool(); err != nil || p == nil {
		t.Fatalf("a PEM certificate: pool %v, %v", p, err)
	}
	if p, err := (Relay{}).CertPool(); err != nil || p != nil {
		t.Fatalf("no ca_file: pool %v, %v; want the system's (nil)", p, err)
	}
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o644)
	if _, err := (Relay{CAFile: junk}).CertPool(); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("junk: %v", err)
	}
	if _, err := (Relay{CAFile: filepath.Join(dir, "missing.pem")}).CertPool(); err == nil || !strings.Contains(err.Error(), "relay.ca_file") {
		t.Fatalf("missing: %v", err)
	}
}

// selfSigned is a CA certificate in PEM (internal/testcert imports this
// package through daemon/setup, so it cannot serve here).
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
