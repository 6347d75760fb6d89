package netns

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// scaleDoc is the configuration docs/scale.md gives, read from the page
// itself: a mailctl host's config.toml, the Postfix tier's main.cf lines
// and its transport map. TestScaleOut builds the tier from it, so the page
// cannot say one thing while the test runs another.
type scaleDoc struct {
	host      map[string]any // config.toml of mailctl-a, decoded
	mainCF    []string       // "key = value", comments cut
	transport [][2]string    // pattern, next hop
}

// scaleDocPath is docs/scale.md from this package's directory.
const scaleDocPath = "../../docs/scale.md"

// readScaleDoc reads the page's fenced blocks: the toml one is the host's
// config; the one with "# /etc/postfix/main.cf" holds main.cf and, after
// "# /etc/postfix/transport", the transport map.
func readScaleDoc(t *testing.T) scaleDoc {
	t.Helper()
	data, err := os.ReadFile(scaleDocPath)
	if err != nil {
		t.Fatal(err)
	}
	var d scaleDoc
	for _, b := range fencedBlocks(string(data)) {
		switch {
		case b.lang == "toml":
			if d.host != nil {
				t.Fatalf("%s has two toml blocks: the test reads one host config", scaleDocPath)
			}
			if _, err := toml.Decode(b.text, &d.host); err != nil {
				t.Fatalf("%s: the host config does not parse: %v", scaleDocPath, err)
			}
		case strings.Contains(b.text, "# /etc/postfix/main.cf"):
			mainCF, transport, ok := strings.Cut(b.text, "# /etc/postfix/transport")
			if !ok {
				t.Fatalf("%s: the Postfix block has no transport map", scaleDocPath)
			}
			for _, l := range lines(mainCF) {
				if !strings.Contains(l, " = ") {
					t.Fatalf("%s: main.cf line %q is not key = value", scaleDocPath, l)
				}
				d.mainCF = append(d.mainCF, l)
			}
			for _, l := range lines(transport)[1:] { // [0] ends the heading: "(then: postmap …)"
				f := strings.Fields(l)
				if len(f) != 2 {
					t.Fatalf("%s: transport line %q is not pattern and next hop", scaleDocPath, l)
				}
				d.transport = append(d.transport, [2]string{f[0], f[1]})
			}
		}
	}
	if d.host == nil || len(d.mainCF) == 0 || len(d.transport) == 0 {
		t.Fatalf("%s: no host config, main.cf or transport map found", scaleDocPath)
	}
	return d
}

type fenced struct{ lang, text string }

// fencedBlocks returns the ``` blocks of a Markdown page.
func fencedBlocks(md string) []fenced {
	var out []fenced
	var cur *fenced
	var text bytes.Buffer
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			if cur == nil {
				cur = &fenced{lang: strings.TrimPrefix(l, "```")}
				text.Reset()
				continue
			}
			cur.text = text.String()
			out = append(out, *cur)
			cur = nil
			continue
		}
		if cur != nil {
			text.WriteString(l + "\n")
		}
	}
	return out
}

// lines are the non-empty lines of s with # comments cut.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if c := strings.Index(l, "#"); c >= 0 {
			l = l[:c]
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// lab maps the page's names and addresses to the lab's, longest first.
type docToLab [][2]string

func (r docToLab) str(s string) string {
	for _, p := range r {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// value applies r to every string in a decoded TOML value.
func (r docToLab) value(v any) any {
	switch x := v.(type) {
	case string:
		return r.str(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = r.value(e)
		}
		return out
	}
	return v
}

// hostConfig is the page's host config for one host, as the lab needs it:
// its hostname, its SMTP listeners and the [lmtp] and [relay] tables as
// TOML. A key the page sets that the test does not know fails the test:
// the page grew, and so must the test.
func (d scaleDoc) hostConfig(t *testing.T, r docToLab) (hostname string, listen, forwarders []string, tables string) {
	t.Helper()
	known := map[string][]string{"hostname": nil, "domains": nil, "smtp": {"listen"}, "lmtp": {"listen_tcp", "allow_from"},
		"relay": {"host", "port", "split_domains"}, "trust": {"forwarders"}}
	for k, v := range d.host {
		sub, ok := known[k]
		if !ok {
			t.Fatalf("%s sets %s, which TestScaleOut does not apply: teach it", scaleDocPath, k)
		}
		if m, isTable := v.(map[string]any); isTable {
			for kk := range m {
				if !slices.Contains(sub, kk) {
					t.Fatalf("%s sets %s.%s, which TestScaleOut does not apply: teach it", scaleDocPath, k, kk)
				}
			}
		}
	}
	hostname = r.str(d.host["hostname"].(string))
	smtp, _ := d.host["smtp"].(map[string]any)
	for _, l := range r.value(smtp["listen"]).([]any) {
		listen = append(listen, l.(string))
	}
	trust, _ := d.host["trust"].(map[string]any)
	if fw, ok := r.value(trust["forwarders"]).([]any); ok {
		for _, f := range fw {
			forwarders = append(forwarders, f.(string))
		}
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(map[string]any{"lmtp": r.value(d.host["lmtp"]), "relay": r.value(d.host["relay"])}); err != nil {
		t.Fatal(err)
	}
	return hostname, listen, forwarders, b.String()
}
