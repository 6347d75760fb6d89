// Package identtext holds the checks identity text shares: the words a
// person picks that other people or programs then show (display names,
// labels). They are refused, not rewritten, when another program could
// show them as something else.
package identtext

import "golang.org/x/text/unicode/norm"

// CompatibilityChar returns the first character of s that NFKC changes
// other than by canonical composition (a fullwidth or small form, a
// ligature, a superscript, a circled letter, ...) and what it folds to.
// Another program may show the folded text: fullwidth ＜＠＞ fold to < @ >.
// Canonically equivalent spellings (e + U+0301 and é) are not reported.
func CompatibilityChar(s string) (r rune, folded string, ok bool) {
	for _, r := range s {
		c := string(r)
		if k := norm.NFKC.String(c); k != norm.NFC.String(c) {
			return r, k, true
		}
	}
	return 0, "", false
}
