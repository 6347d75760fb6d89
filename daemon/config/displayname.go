package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/mailctl/mailctl/internal/identtext"
	"github.com/mailctl/mailctl/protocol"
)

// ValidDisplayName says why s cannot be a mailbox's display name, or nil: it
// goes into the From header of every message the mailbox sends, so it is
// one line of printable text, at most protocol.MaxDisplayNameLen characters,
// that cannot read as an address. The checks run on the name as a reader's
// software may show it: compatibility characters (fullwidth ＜＠＞, the small
// form ﹫, ...) fold to < @ > under NFKC, so a name holding any character
// NFKC changes is refused rather than stored; and what is looked for
// (@ < > =? and line breaks) is looked for in the fully decomposed form
// too, where ≮ is < and a combining mark.
func ValidDisplayName(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("display_name is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > protocol.MaxDisplayNameLen {
		return fmt.Errorf("display_name has %d characters; at most %d", n, protocol.MaxDisplayNameLen)
	}
	if r, folded, ok := identtext.CompatibilityChar(s); ok {
		return fmt.Errorf("display_name holds %U (%q), a compatibility form of %q: write plain text (fullwidth, small and other compatibility forms are refused, as they can make the name read as an address)", r, string(r), folded)
	}
	d := norm.NFKD.String(s)
	for _, r := range d {
		if unicode.IsControl(r) {
			return fmt.Errorf("display_name holds a control character (%U): one line of text only", r)
		}
		// Line and paragraph separators break a line for a reader; format
		// characters (bidi overrides, zero-width) show other text than is sent.
		if unicode.In(r, unicode.Zl, unicode.Zp, unicode.Cf) {
			return fmt.Errorf("display_name holds an invisible or line-breaking character (%U): plain text only", r)
		}
		if angleLookalikes[r] {
			return fmt.Errorf("display_name holds %U (%q), which reads as < or >: a name must not read as an address", r, string(r))
		}
	}
	// A name that reads as an address, or as encoded text, makes the From
	// show another sender than the one it carries ("boss@bank.example" <agent@ours>).
	if strings.ContainsAny(d, "@<>") || strings.Contains(d, "=?") {
		return errors.New("display_name holds @, < or > or =?: a name must not read as an address or as encoded text")
	}
	if s != strings.TrimSpace(s) {
		return errors.New("display_name starts or ends with a space")
	}
	return nil
}

// angleLookalikes are characters NFKC leaves alone that a reader takes for
// < or > around an address (after the Unicode confusables of < and >).
var angleLookalikes = map[rune]bool{
	'\u2039': true, '\u203a': true, // ‹ ›
	'\u3008': true, '\u3009': true, // 〈 〉 (also what U+2329, U+232A become)
	'\u27e8': true, '\u27e9': true, // ⟨ ⟩
	'\u276c': true, '\u276d': true, '\u276e': true, '\u276f': true, '\u2770': true, '\u2771': true, // ❬ ❭ ❮ ❯ ❰ ❱
	'\u02c2': true, '\u02c3': true, // ˂ ˃
	'\u1438': true, '\u1433': true, // ᐸ ᐳ
	'\u227a': true, '\u227b': true, // ≺ ≻
}
