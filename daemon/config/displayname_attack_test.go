package config

import (
	"fmt"
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
		// Compatibility forms that fold to < @ > " , under NFKC, and
		// lookalikes NFKC leaves alone.
		"Boss \uff1cceo\uff20bank.example\uff1e", "ceo\ufe6bbank.example", "Boss \ufe64ceo\ufe65", "\uff02Boss\uff02",
		"Doe\uff0c John", "ceo\u24d0bank", "Boss \u2039ceo@x\u203a", "Boss \u3008ceo\u3009", "Boss \u2329ceo\u232a",
		"Boss \u27e8ceo\u27e9", "Boss \u276eceo\u276f", "Boss \u226eceo\u226f", "x\u2028y",
	} {
		if err := ValidDisplayName(bad); err == nil {
			t.Errorf("display name %q accepted", bad)
		}
	}
	for _, ok := range []string{"Support Bot", "Zoë Müller", "Zoe\u0308 Mu\u0308ller", `The "Ops" team`, "Doe, John", "R&D (EU)", "李雷", "Łukasz Żółć"} {
		if err := ValidDisplayName(ok); err != nil {
			t.Errorf("display name %q refused: %v", ok, err)
		}
	}
}

// The operator's config.toml goes through the same check: a fullwidth
// address in a declared mailbox's display name stops the config from
// loading, with the mailbox and the character named.
func TestConfigDisplayNameIsChecked(t *testing.T) {
	for _, name := range []string{"Boss \uff1cceo\uff20bank.example\uff1e", "ceo\ufe6bbank.example", "Boss \u2039ceo\u203a"} {
		_, err := Parse([]byte(fmt.Sprintf("domains = [\"example.test\"]\n\n[[mailboxes]]\nname = \"boss\"\nowner = \"root\"\ndisplay_name = %q\n", name)))
		if err == nil || !strings.Contains(err.Error(), `"boss"`) || !strings.Contains(err.Error(), "display_name") {
			t.Errorf("display_name %q in config.toml: %v, want an error naming the mailbox and display_name", name, err)
		}
	}
	if _, err := Parse([]byte("domains = [\"example.test\"]\n\n[[mailboxes]]\nname = \"boss\"\nowner = \"root\"\ndisplay_name = \"Zoë, Boss\"\n")); err != nil {
		t.Errorf("a plain display name refused: %v", err)
	}
}
