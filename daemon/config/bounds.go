package config

import (
	"fmt"
	"reflect"
	"strings"
)

// maxNumber bounds every number in the config: 2^50 (a PiB, as bytes) is
// past any limit a host can use, and far enough below int64's end that the
// daemon's arithmetic on limits (a bound plus one, a budget's sum) cannot
// overflow. Without it `max_message_bytes = 9223372036854775807`, meant as
// "no limit", wrapped around to a negative bound and read no message.
const maxNumber = 1 << 50

// validateBounds refuses any number past maxNumber, naming its key.
func (c *Config) validateBounds(bad complain) {
	walkBounds(reflect.ValueOf(c).Elem(), "", bad)
}

func walkBounds(v reflect.Value, name string, bad complain) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkBounds(v.Elem(), name, bad)
		}
	case reflect.Struct:
		if _, ok := v.Interface().(Duration); ok {
			return // bounded where it is read (Duration.UnmarshalText)
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if !f.IsExported() || key == "" || key == "-" {
				continue
			}
			if name != "" {
				key = name + "." + key
			}
			walkBounds(v.Field(i), key, bad)
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkBounds(v.Index(i), fmt.Sprintf("%s[%d]", name, i), bad)
		}
	case reflect.Int, reflect.Int64:
		if v.Int() > maxNumber {
			bad("%s = %d is past the largest number mailctl takes (2^50 = %d): give the limit you mean", name, v.Int(), int64(maxNumber))
		}
	}
}
