// Package tomlkeys holds decoded TOML to exact key names.
//
// TOML keys are case-sensitive, but github.com/BurntSushi/toml fills a struct
// field from any key that matches its tag case-insensitively. A document with
// both "subject" and "SUBJECT" then sets one field twice, and which value wins
// depends on Go's map order. Exact rejects such documents, so that decoding
// gives one answer for one input.
package tomlkeys

import (
	"fmt"
	"reflect"
	"strings"
)

// Exact checks the key paths of a decoded document (toml.MetaData.Keys)
// against the struct that v points to. A key that matches no field exactly
// but one case-insensitively is an error naming both spellings. Keys that
// match nothing are left to the caller (strict callers use Undecoded).
func Exact[K ~[]string](keys []K, v any) error {
	root := reflect.TypeOf(v)
	for _, k := range keys {
		t := root
		for i, part := range k {
			t = elem(t)
			if t.Kind() == reflect.Map {
				t = t.Elem()
				continue
			}
			if t.Kind() != reflect.Struct {
				break
			}
			f, near := field(t, part)
			if f == nil {
				if near != "" {
					path := strings.Join(k[:i+1], ".")
					return fmt.Errorf("key %q: TOML keys are case-sensitive; did you mean %q?", path, near)
				}
				break
			}
			t = f.Type
		}
	}
	return nil
}

// elem looks through pointers, slices and arrays to the type whose keys the
// next part of a path names.
func elem(t reflect.Type) reflect.Type {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			t = t.Elem()
		default:
			return t
		}
	}
}

// field returns the field of struct type t that key names exactly, or the
// exact name of a field it names only case-insensitively.
func field(t reflect.Type, key string) (f *reflect.StructField, near string) {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if name == key {
			return &sf, ""
		}
		if strings.EqualFold(name, key) {
			near = name
		}
	}
	return nil, near
}
