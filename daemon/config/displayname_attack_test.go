package config

import (
	"strings"
	"testing"
)

// A display name is the one part of From its owner chooses. Anything that
// breaks the line, hides text, decodes to other text or makes the name read
// as another address is refused, in config.toml and over mailbox.update alike.
func TestDisplayNameCannotSpoofOrInject(t *testing.T) {
	for _, bad := range []string{
		"a\r\nBcc: x@y.example", "a\nb", "a\u2028b", "a\u2029b", "a\u0085b", "a\u202egnp.exe", "a\u200bb", "a\ufeffb",
		"boss@bank.example", `"x" <ceo@corp.example>`, "x <y>", "=?utf-8?q?a=0D=0ABcc=3A_x?=", "=?utf-8?b?DQpCY2M6IHg=?=",
		"\xff\xfe", " padded", strings.Repeat("n", 1000),
	} {
		if err := ValidDisplayName(bad); err == nil {
			t.Errorf("display name %q accepted", bad)
		}
	}
	for _, ok := range []string{"Support Bot", "Zoë Müller", `The "Ops" team`, "R&D (EU)", "李雷"} {
		if err := ValidDisplayName(ok); err != nil {
			t.Errorf("display name %q refused: %v", ok, err)
		}
	}
}
