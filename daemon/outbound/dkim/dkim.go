// Package dkim holds the daemon's DKIM keys (generation, loading, the DNS
// records that publish them) and signs outgoing mail with every one of them.
// Key tools (setup, doctor, `mailctl dkim`) import it and nothing of the
// send pipeline.
package dkim

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	msgdkim "github.com/emersion/go-msgauth/dkim"

	"github.com/mailctl/mailctl/internal/safeio"
)

// Key is one DKIM signing key, named by its selector.
type Key struct {
	Selector  string
	Algorithm string // "ed25519" or "rsa"
	Signer    crypto.Signer
	Path      string
	Public    []byte // the p= value before base64: raw Ed25519 key or PKIX DER for RSA
}

// rsaBits is the RSA key size: 2048 is what every verifier accepts and what
// fits a DNS TXT record comfortably.
const rsaBits = 2048

var selectorRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidSelector reports whether s can be a selector (one DNS label).
func ValidSelector(s string) bool { return selectorRE.MatchString(s) }

// GenerateKey creates a key and writes it as PKCS#8 PEM to <dir>/<selector>.key
// with mode 0600 (dir 0700, both root-owned when run as root). An existing key
// is never overwritten: rotating means adding a selector, not replacing one.
func GenerateKey(dir, selector, algorithm string) (*Key, error) {
	if !ValidSelector(selector) {
		return nil, fmt.Errorf("selector %q must be one DNS label (letters, digits, '-')", selector)
	}
	var signer crypto.Signer
	var err error
	switch algorithm {
	case "ed25519":
		_, signer, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		signer, err = rsa.GenerateKey(rand.Reader, rsaBits)
	default:
		return nil, fmt.Errorf("algorithm %q: use ed25519 or rsa", algorithm)
	}
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(signer)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating DKIM key directory: %w", err)
	}
	path := filepath.Join(dir, selector+".key")
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := safeio.WriteFile(path, data, safeio.Options{Perm: 0o600, NoReplace: true}); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%s already exists: choose another selector (keys are never overwritten)", path)
		}
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if os.Geteuid() == 0 {
		// Root-owned whatever the directory's group or setgid bit says.
		if err := os.Chown(path, 0, 0); err != nil {
			return nil, fmt.Errorf("chown %s: %w", path, err)
		}
	}
	return newKey(selector, path, signer)
}

func newKey(selector, path string, signer crypto.Signer) (*Key, error) {
	k := &Key{Selector: selector, Signer: signer, Path: path}
	switch pub := signer.Public().(type) {
	case ed25519.PublicKey:
		k.Algorithm = "ed25519"
		k.Public = []byte(pub)
	case *rsa.PublicKey:
		if pub.N.BitLen() < 1024 {
			return nil, fmt.Errorf("%s: RSA key of %d bits is too small for DKIM (RFC 8301 requires 1024, use 2048)", path, pub.N.BitLen())
		}
		k.Algorithm = "rsa"
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, err
		}
		k.Public = der
	default:
		return nil, fmt.Errorf("%s: unsupported key type %T (use ed25519 or rsa)", path, pub)
	}
	return k, nil
}

// LoadKeys reads every <selector>.key in dir, sorted by selector. A directory
// that does not exist holds no keys; a key that does not parse is an error
// naming its file, so a broken rotation is noticed instead of silently
// signing with fewer keys. So is a key others could read or swap, or a link
// in place of a key (safeio.ReadSecret).
func LoadKeys(dir string) ([]*Key, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading DKIM keys: %w", err)
	}
	var keys []*Key
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".key") || strings.HasPrefix(name, ".") {
			continue
		}
		k, err := loadKey(filepath.Join(dir, name), strings.TrimSuffix(name, ".key"))
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Selector < keys[j].Selector })
	return keys, nil
}

func loadKey(path, selector string) (*Key, error) {
	if !ValidSelector(selector) {
		return nil, fmt.Errorf("%s: file name must be <selector>.key with a selector of letters, digits and '-'", path)
	}
	// A private key is read as a secret: no link followed, root's alone
	// (the running user's for `mailctl dev`), bounded.
	data, err := safeio.ReadSecret(path)
	if err != nil {
		return nil, fmt.Errorf("reading DKIM key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block (expected a PKCS#8 \"PRIVATE KEY\")", path)
	}
	var parsed any
	switch block.Type {
	case "PRIVATE KEY":
		parsed, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		parsed, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%s: PEM block %q is not a private key", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: key type %T cannot sign", path, parsed)
	}
	return newKey(selector, path, signer)
}

// TXTValue is the DNS TXT record value publishing k.
func (k *Key) TXTValue() string {
	return "v=DKIM1; k=" + k.Algorithm + "; p=" + base64.StdEncoding.EncodeToString(k.Public)
}

// TXTRecord is a zone-file line publishing k for domain, the value split into
// quoted strings of at most 255 bytes as DNS requires.
func TXTRecord(domain string, k *Key) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s._domainkey.%s. IN TXT (", k.Selector, strings.TrimSuffix(domain, "."))
	for _, s := range SplitTXT(k.TXTValue()) {
		fmt.Fprintf(&b, " %q", s)
	}
	b.WriteString(" )")
	return b.String()
}

// SplitTXT cuts a TXT value into the strings of at most 255 bytes DNS allows.
func SplitTXT(v string) []string {
	var out []string
	for len(v) > 255 {
		out = append(out, v[:255])
		v = v[255:]
	}
	return append(out, v)
}

// signedHeaders are covered by every signature. Each is listed twice so the
// signature also covers its absence or single presence: a header added in
// transit (a second From, a Cc) breaks it (RFC 6376 §5.4.2, "over-signing").
var signedHeaders = []string{"From", "To", "Cc", "Subject", "Date", "Message-ID", "Reply-To",
	"In-Reply-To", "References", "MIME-Version", "Content-Type"}

func headerKeys() []string {
	keys := make([]string, 0, 2*len(signedHeaders))
	for _, h := range signedHeaders {
		keys = append(keys, h, h)
	}
	return keys
}

// Sign returns raw with one DKIM-Signature per key prepended (relaxed/relaxed,
// SHA-256). Signing with an Ed25519 and an RSA key side by side lets verifiers
// that know only RSA still pass; several selectors let keys rotate.
func Sign(raw []byte, domain string, keys []*Key) ([]byte, error) {
	if len(keys) == 0 {
		return raw, nil
	}
	var sigs bytes.Buffer
	hk := headerKeys()
	for _, k := range keys {
		s, err := msgdkim.NewSigner(&msgdkim.SignOptions{
			Domain:                 domain,
			Selector:               k.Selector,
			Signer:                 k.Signer,
			Hash:                   crypto.SHA256,
			HeaderCanonicalization: msgdkim.CanonicalizationRelaxed,
			BodyCanonicalization:   msgdkim.CanonicalizationRelaxed,
			HeaderKeys:             hk,
		})
		if err != nil {
			return nil, fmt.Errorf("DKIM key %s: %w", k.Selector, err)
		}
		if _, err := s.Write(raw); err != nil {
			s.Close()
			return nil, fmt.Errorf("DKIM signing with %s: %w", k.Selector, err)
		}
		if err := s.Close(); err != nil {
			return nil, fmt.Errorf("DKIM signing with %s: %w", k.Selector, err)
		}
		sigs.WriteString(s.Signature())
	}
	return append(sigs.Bytes(), raw...), nil
}
