package tomlkeys

import (
	"strings"
	"testing"
)

type att struct {
	Filename string `toml:"filename"`
}

type doc struct {
	Subject string            `toml:"subject"`
	Atts    []att             `toml:"attachments"`
	Env     map[string]string `toml:"env"`
	Inner   *struct {
		Port int `toml:"port"`
	} `toml:"inner"`
	Untagged string
}

func TestExact(t *testing.T) {
	for _, tc := range []struct {
		keys [][]string
		want string // "" for no error
	}{
		{[][]string{{"subject"}, {"attachments"}, {"attachments", "filename"}, {"env"}, {"env", "ANY"}, {"inner", "port"}}, ""},
		{[][]string{{"Untagged"}}, ""},
		{[][]string{{"unknown"}, {"unknown", "deeper"}}, ""},
		{[][]string{{"subject"}, {"SUBJECT"}}, `key "SUBJECT"`},
		{[][]string{{"attachments", "FileName"}}, `key "attachments.FileName"`},
		{[][]string{{"inner", "Port"}}, `did you mean "port"`},
		{[][]string{{"ENV", "x"}}, `key "ENV"`},
		{[][]string{{"untagged"}}, `did you mean "Untagged"`},
		{[][]string{{"subject", "x"}}, ""}, // a string has no keys below it
	} {
		err := Exact(tc.keys, &doc{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: unexpected error %v", tc.keys, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.keys, err, tc.want)
		}
	}
}
