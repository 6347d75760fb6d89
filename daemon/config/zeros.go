package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// zeroesTakenAsDefault refuses a number or duration the file sets to 0 where
// 0 is not a value the daemon uses: Load fills an unset key with its
// default, and a 0 looks unset, so `max_recipients = 0` (meant as none, or
// as no mail at all) silently became 100. plain is the file as a plain TOML
// tree; file is what it decoded to before the defaults, final after them.
// A 0 the defaults leave as 0 (a quota, pregreet_wait, a retention of "0s")
// is a value of its own and passes.
func zeroesTakenAsDefault(plain map[string]any, file, final *Config, bad complain) {
	walkZeroes(plain, reflect.ValueOf(file).Elem(), reflect.ValueOf(final).Elem(), "", bad)
	// A mailbox's [mailboxes.send] key of 0 is taken as "not set" when it is
	// merged onto [send] (EffectiveSend), so it gets the global limit.
	boxes, _ := plain["mailboxes"].([]map[string]any)
	for i, box := range boxes {
		send, _ := box["send"].(map[string]any)
		for _, key := range slices.Sorted(maps.Keys(send)) {
			if isZeroNumber(send[key]) && i < len(final.Mailboxes) {
				g, ok := fieldByTag(reflect.ValueOf(final.Send), key)
				if ok && g.CanInt() && g.Int() != 0 {
					bad("mailboxes %q send.%s = 0 would be taken as [send]'s %s (%d): give a positive limit, or leave the key out to use [send]'s",
						final.Mailboxes[i].Name, key, key, g.Int())
				}
			}
		}
	}
}

// walkZeroes follows the file's tables through the config's structs.
func walkZeroes(plain map[string]any, file, final reflect.Value, prefix string, bad complain) {
	for _, key := range slices.Sorted(maps.Keys(plain)) {
		f, ok := fieldByTag(file, key)
		if !ok {
			continue
		}
		g, _ := fieldByTag(final, key)
		switch v := plain[key].(type) {
		case map[string]any:
			if f.Kind() == reflect.Struct {
				walkZeroes(v, f, g, prefix+key+".", bad)
			}
		case []map[string]any:
			// An array of tables ([[smtp.dnsbl]]); [[mailboxes]] and
			// [[hooks]] get no defaults here.
			if f.Kind() == reflect.Slice && f.Len() == len(v) && g.Len() == len(v) {
				for i, t := range v {
					walkZeroes(t, f.Index(i), g.Index(i), fmt.Sprintf("%s%s[%d].", prefix, key, i), bad)
				}
			}
		default:
			if !isZeroNumber(v) || !f.IsZero() || g.IsZero() {
				continue
			}
			if d, ok := g.Interface().(Duration); ok {
				bad("%s%s = %q is taken as the default (%s), not as no time or none: give the duration you mean, or leave the key out", prefix, key, plain[key], d.Duration)
			} else if g.CanInt() {
				bad("%s%s = 0 is taken as the default (%d), not as 0 or none: give the value you mean, or leave the key out", prefix, key, g.Int())
			}
		}
	}
}

// isZeroNumber reports whether a TOML value is the integer 0 or a
// duration of 0 ("0s", "0d").
func isZeroNumber(v any) bool {
	switch v := v.(type) {
	case int64:
		return v == 0
	case string:
		var d Duration
		return d.UnmarshalText([]byte(v)) == nil && d.Duration == time.Duration(0)
	}
	return false
}

// fieldByTag finds the field of struct v whose toml tag is key.
func fieldByTag(v reflect.Value, key string) (reflect.Value, bool) {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("toml"), ","); tag == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
