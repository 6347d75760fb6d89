package config

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSecurityLimitsAreTheDefaults keeps docs/security.md's table of the
// limits an operator can tune honest: each key it names is a config key,
// and the default it gives is the one a config that does not set it gets.
// The row of the [send] table sends to docs/outbound.md, whose table of
// send policy keys is held to the defaults of [send] the same way.
func TestSecurityLimitsAreTheDefaults(t *testing.T) {
	def, err := Parse([]byte("hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := checkDefaultsTable(t, def, "security.md", "Limits an operator can tune", ""); n < 15 {
		t.Fatalf("only %d limits read from security.md: has the table's layout changed?", n)
	}
	if n := checkDefaultsTable(t, def, "outbound.md", "Policy", "send."); n < 10 {
		t.Fatalf("only %d send policy keys read from outbound.md: has the table's layout changed?", n)
	}
}

// checkDefaultsTable checks the table of keys and defaults in the section
// of a page under docs/, each key prefixed, and returns how many it checked.
// A key cell may name several keys of one table (`smtp.a`, `b`), their
// defaults then one each, separated by commas.
func checkDefaultsTable(t *testing.T, def *Config, page, heading, prefix string) int {
	t.Helper()
	doc, err := os.ReadFile("../../docs/" + page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/%s has no section %s", page, heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	key := regexp.MustCompile("`([^`]+)`")
	checked := 0
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) != 3 {
			continue
		}
		if strings.HasPrefix(cells[0], "`[") {
			// A whole table, whose defaults another page gives.
			if !strings.HasPrefix(cells[1], "docs/") {
				t.Errorf("%s: %s: a table's row must name the page of its defaults, not %q", page, cells[0], cells[1])
			}
			continue
		}
		var keys []string
		table := ""
		for _, m := range key.FindAllStringSubmatch(cells[0], -1) {
			k := m[1]
			if i := strings.LastIndex(k, "."); i >= 0 {
				table = k[:i+1]
			} else {
				k = table + k
			}
			keys = append(keys, prefix+k)
		}
		values := []string{cells[1]}
		if len(keys) > 1 {
			values = strings.Split(cells[1], ", ")
		}
		if len(values) != len(keys) {
			t.Errorf("%s: %s: %d defaults for %d keys (%q)", page, cells[0], len(values), len(keys), cells[1])
			continue
		}
		for i, k := range keys {
			f, ok := fieldByKey(reflect.ValueOf(def).Elem(), k)
			if !ok {
				t.Errorf("%s names %s, which is not a config key", page, k)
				continue
			}
			if msg := sameDefault(f, values[i]); msg != "" {
				t.Errorf("%s says %s defaults to %q, but %s", page, k, values[i], msg)
			}
			checked++
		}
	}
	return checked
}

// fieldByKey finds the field a dotted config key fills.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	for name := range strings.SplitSeq(key, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		found := false
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ","); tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// sameDefault compares a field with the default the page writes for it
// ("512 MiB", "10m", "false", `["postfix"]`, "none (…)", "`[]` (any)") and says how they
// differ, or "" when they agree.
func sameDefault(f reflect.Value, text string) string {
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return "it has no default"
		}
		f = f.Elem()
	}
	text, _, _ = strings.Cut(text, " (") // "`[]` (any)", "none (required with …)"
	text = strings.Trim(text, "`")
	switch v := f.Interface().(type) {
	case Duration:
		d, err := time.ParseDuration(text)
		if err != nil {
			return "that is not a duration: " + err.Error()
		}
		if d != v.Duration {
			return "the default is " + v.Duration.String()
		}
		return ""
	case bool:
		if text != strconv.FormatBool(v) {
			return "the default is " + strconv.FormatBool(v)
		}
		return ""
	case []string:
		var want []string
		if !strings.HasPrefix(text, "none") {
			if err := json.Unmarshal([]byte(text), &want); err != nil {
				return "that is not a list: " + err.Error()
			}
		}
		if strings.Join(want, "\x00") != strings.Join(v, "\x00") {
			return "the default is " + strconv.Quote(strings.Join(v, ", "))
		}
		return ""
	}
	if f.CanInt() {
		n, err := docNumber(text)
		if err != nil {
			return err.Error()
		}
		if n != f.Int() {
			return "the default is " + strconv.FormatInt(f.Int(), 10)
		}
		return ""
	}
	return "the test cannot read a " + f.Type().String()
}

// docNumber reads "4096", "1,000" or "25 MiB".
func docNumber(text string) (int64, error) {
	num, unit, _ := strings.Cut(text, " ")
	n, err := strconv.ParseInt(strings.ReplaceAll(num, ",", ""), 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]int{"": 0, "KiB": 10, "MiB": 20, "GiB": 30}
	s, ok := shift[unit]
	if !ok {
		return 0, strconv.ErrSyntax
	}
	return n << s, nil
}

// TestSecurityLimitBoundsHold holds the bounds docs/security.md's table
// gives beside some defaults to what the config accepts: the pregreet wait
// at most 30s, at most 20 DNS lists. Each is read from the page, accepted at
// the bound and refused past it.
func TestSecurityLimitBoundsHold(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	row := ""
	for line := range strings.SplitSeq(string(doc), "\n") {
		if strings.HasPrefix(line, "| `smtp.pregreet_wait`") {
			row = line
		}
	}
	wait := regexp.MustCompile(`greeting is held back \(at most (\d+)s\)`).FindStringSubmatch(row)
	lists := regexp.MustCompile(`\(at most (\d+) lists\)`).FindStringSubmatch(row)
	if wait == nil || lists == nil {
		t.Fatalf("docs/security.md's pregreet_wait row gives no bound for the wait or the lists: %q", row)
	}
	base := "hostname = \"mx.example.test\"\ndomains = [\"example.test\"]\n[smtp]\n"
	accepts := func(what, extra string) bool {
		_, err := Parse([]byte(base + extra))
		if err != nil && !strings.Contains(err.Error(), what) {
			t.Fatalf("%s: refused for something else: %v", extra, err)
		}
		return err == nil
	}
	secs, _ := strconv.Atoi(wait[1])
	if !accepts("pregreet_wait", fmt.Sprintf("pregreet_wait = \"%ds\"\n", secs)) || accepts("pregreet_wait", fmt.Sprintf("pregreet_wait = \"%ds\"\n", secs+1)) {
		t.Errorf("smtp.pregreet_wait: the page says at most %ds; the config does not hold it there", secs)
	}
	n, _ := strconv.Atoi(lists[1])
	zones := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "[[smtp.dnsbl]]\nzone = \"list%d.example.test\"\n", i)
		}
		return b.String()
	}
	if !accepts("smtp.dnsbl", zones(n)) || accepts("smtp.dnsbl", zones(n+1)) {
		t.Errorf("smtp.dnsbl: the page says at most %d lists; the config does not hold it there", n)
	}
}
