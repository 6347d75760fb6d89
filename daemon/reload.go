package daemon

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/mailctl/mailctl/daemon/config"
)

// restartKeys are the config keys the running daemon cannot apply: they are
// fixed when listeners, the SMTP server, the delivery client, resolvers and
// the hook runner are built. A key is named by its TOML path; a prefix ending
// in "." stands for its whole table.
var restartKeys = []string{
	"hostname", "paths.", "smtp.", "lmtp.", "delivery.", "relay.", "dns.", "trust.resolver", "metrics.", "tlsrpt.",
	"hook_rules.max_concurrent",
}

func needsRestart(key string) bool {
	for _, k := range restartKeys {
		if key == k || (strings.HasSuffix(k, ".") && strings.HasPrefix(key, k)) {
			return true
		}
	}
	return false
}

// keepRestartKeys gives next the running values of the keys that need a
// restart, so that what the daemon reports (status, doctor) is what it does.
// restartKeys is the one list of them.
func keepRestartKeys(next, running *config.Config) {
	for _, k := range restartKeys {
		tomlField(reflect.ValueOf(next).Elem(), k).Set(tomlField(reflect.ValueOf(running).Elem(), k))
	}
}

// tomlField is the field of struct v at the TOML path key ("smtp." is the
// table smtp). A path that names no field is a bug in restartKeys.
func tomlField(v reflect.Value, key string) reflect.Value {
	for _, name := range strings.Split(strings.TrimSuffix(key, "."), ".") {
		i := 0
		for i < v.NumField() && tomlName(v.Type().Field(i)) != name {
			i++
		}
		if i == v.NumField() {
			panic("restartKeys: no config key " + key)
		}
		v = v.Field(i)
	}
	return v
}

func tomlName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return tag
}

// changedKeys lists, sorted, the TOML keys whose values differ between a and
// b. Arrays of tables (mailboxes, hooks) count as one key each. Both configs
// flatten to the same keys: they are of one type.
func changedKeys(a, b *config.Config) []string {
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", reflect.ValueOf(*a), fa)
	flatten("", reflect.ValueOf(*b), fb)
	var out []string
	for k, v := range fa {
		if fb[k] != v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func flatten(prefix string, v reflect.Value, out map[string]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := tomlName(f)
		if tag == "" || tag == "-" {
			continue
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(config.Duration{}) {
			flatten(prefix+tag+".", fv, out)
			continue
		}
		b, err := json.Marshal(fv.Interface())
		if err != nil {
			b = []byte(fmt.Sprint(fv.Interface()))
		}
		out[prefix+tag] = string(b)
	}
}

// applyReload turns the config read from the file into the one the daemon
// runs: the keys that need a restart keep their running values. It returns
// the keys applied now and those waiting for a restart.
func applyReload(file, running *config.Config) (next *config.Config, applied, pending []string) {
	next = file
	for _, k := range changedKeys(running, file) {
		if needsRestart(k) {
			pending = append(pending, k)
		} else {
			applied = append(applied, k)
		}
	}
	keepRestartKeys(next, running)
	return next, applied, pending
}
