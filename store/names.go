package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxMailboxNameLen bounds a mailbox name (the local part of an address).
const MaxMailboxNameLen = 64

// maxIDLen leaves room for the ".attachments" suffix within NAME_MAX (255).
const maxIDLen = 200

// ValidMailboxName reports whether name can be a mailbox: [a-z0-9._-]+, 1 to 64
// characters, no leading or trailing dot and no "..". The error says what is
// wrong so that it can be shown to the person who typed the name.
func ValidMailboxName(name string) error {
	if name == "" {
		return errors.New("mailbox name is empty")
	}
	if len(name) > MaxMailboxNameLen {
		return fmt.Errorf("mailbox name is %d bytes long, the maximum is %d", len(name), MaxMailboxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			if c >= 'A' && c <= 'Z' {
				return fmt.Errorf("mailbox name %q has an upper-case letter: use lower case only", name)
			}
			// Name the character, not its first byte: a look-alike
			// (Cyrillic а, fullwidth ａ) is what the user must find.
			r, size := utf8.DecodeRuneInString(name[i:])
			if r == utf8.RuneError && size == 1 {
				return fmt.Errorf("mailbox name %q has the byte %#x, which is not UTF-8: only a-z, 0-9, '.', '_' and '-' are allowed", name, c)
			}
			return fmt.Errorf("mailbox name %q has the character %q: only a-z, 0-9, '.', '_' and '-' are allowed", name, r)
		}
	}
	if name[0] == '.' || name[len(name)-1] == '.' {
		return fmt.Errorf("mailbox name %q starts or ends with a dot", name)
	}
	if strings.Contains(name, "..") {
		return fmt.Errorf("mailbox name %q contains \"..\"", name)
	}
	return nil
}

// ValidFolder reports whether name can be a folder of a mailbox. Folders follow
// the rules of mailbox names; the standard ones are listed in Folders.
func ValidFolder(name string) error {
	if err := ValidMailboxName(name); err != nil {
		return fmt.Errorf("invalid folder: %s", strings.Replace(err.Error(), "mailbox name", "folder name", 1))
	}
	return nil
}

// ValidID reports whether id can name a message file. Ids come from clients, so
// anything that could address another file is refused: '/', '\\', "..", a
// leading dot (hidden and temporary files), control characters, invalid UTF-8.
func ValidID(id string) error {
	switch {
	case id == "":
		return errors.New("message id is empty")
	case len(id) > maxIDLen:
		return fmt.Errorf("message id is %d bytes long, the maximum is %d", len(id), maxIDLen)
	case id[0] == '.':
		return fmt.Errorf("message id %q starts with a dot", id)
	case strings.Contains(id, ".."):
		return fmt.Errorf("message id %q contains \"..\"", id)
	case strings.ContainsAny(id, "/\\"):
		return fmt.Errorf("message id %q contains a path separator", id)
	case !utf8.ValidString(id):
		return fmt.Errorf("message id %q is not valid UTF-8", id)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return fmt.Errorf("message id %q contains a control character", id)
		}
	}
	return nil
}

// maxSlugLen bounds the subject part of an id so ids stay readable in listings.
const maxSlugLen = 40

// NewID returns the id of a message received at t with the given subject:
// "2006-01-02-150405-slug" with the time in UTC, so that ids sort by time.
func NewID(t time.Time, subject string) string {
	return t.UTC().Format("2006-01-02-150405") + "-" + slug(subject)
}

// slug keeps lowercase ASCII letters and digits of s, turning every other run of
// characters into one '-'. Other letters are first transliterated (see
// asciiFold), so that "Héllo Wörld" gives "hello-world", not "h-llo-w-rld".
func slug(s string) string {
	var b strings.Builder
	dash := false
	add := func(r rune) bool {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r >= 'A' && r <= 'Z':
			r += 'a' - 'A'
		default:
			dash = b.Len() > 0
			return true
		}
		need := 1
		if dash {
			need = 2
		}
		if b.Len()+need > maxSlugLen {
			return false
		}
		if dash {
			b.WriteByte('-')
			dash = false
		}
		b.WriteByte(byte(r))
		return true
	}
runes:
	for _, r := range s {
		if r < utf8.RuneSelf {
			if !add(r) {
				break
			}
			continue
		}
		for _, c := range asciiFold(r) {
			if !add(c) {
				break runes
			}
		}
	}
	if b.Len() == 0 {
		return "message"
	}
	return b.String()
}

// foldSpecial spells letters that do not decompose into an ASCII letter
// and marks (ß, ø, æ...), and the Greek and Cyrillic alphabets, in ASCII.
var foldSpecial = map[rune]string{
	'ß': "ss", 'ẞ': "ss", 'æ': "ae", 'Æ': "ae", 'œ': "oe", 'Œ': "oe", 'ø': "o", 'Ø': "o",
	'đ': "d", 'Đ': "d", 'ð': "d", 'Ð': "d", 'þ': "th", 'Þ': "th", 'ł': "l", 'Ł': "l",
	'ı': "i", 'ħ': "h", 'Ħ': "h", 'ŋ': "ng", 'Ŋ': "ng", 'ĸ': "k", 'ŀ': "l", 'Ŀ': "l",
	// Greek (lower case; upper case is folded to it first).
	'α': "a", 'β': "v", 'γ': "g", 'δ': "d", 'ε': "e", 'ζ': "z", 'η': "i", 'θ': "th",
	'ι': "i", 'κ': "k", 'λ': "l", 'μ': "m", 'ν': "n", 'ξ': "x", 'ο': "o", 'π': "p",
	'ρ': "r", 'σ': "s", 'ς': "s", 'τ': "t", 'υ': "y", 'φ': "f", 'χ': "ch", 'ψ': "ps", 'ω': "o",
	// Cyrillic (lower case), a simple scholarly-style romanization.
	'а': "a", 'б': "b", 'в': "v", 'г': "g", 'д': "d", 'е': "e", 'ё': "e", 'ж': "zh",
	'з': "z", 'и': "i", 'й': "y", 'к': "k", 'л': "l", 'м': "m", 'н': "n", 'о': "o",
	'п': "p", 'р': "r", 'с': "s", 'т': "t", 'у': "u", 'ф': "f", 'х': "kh", 'ц': "ts",
	'ч': "ch", 'ш': "sh", 'щ': "shch", 'ъ': "", 'ы': "y", 'ь': "", 'э': "e", 'ю': "yu",
	'я': "ya", 'і': "i", 'ї': "yi", 'є': "ye", 'ґ': "g", 'ў': "u", 'ј': "j", 'љ': "lj",
	'њ': "nj", 'ћ': "c", 'ђ': "dj", 'џ': "dz", 'ѓ': "g", 'ќ': "k", 'ѕ': "dz",
}

// asciiFold returns an ASCII spelling of r: its compatibility decomposition
// (NFKD) without the combining marks ("é" -> "e", "ﬁ" -> "fi", "①" -> "1"),
// or its entry in foldSpecial. A character with neither (CJK, emoji, symbols)
// gives nothing and so becomes a separator.
func asciiFold(r rune) string {
	if s, ok := foldSpecial[unicode.ToLower(r)]; ok {
		return s
	}
	var buf [utf8.UTFMax]byte
	d := norm.NFKD.Bytes(buf[:utf8.EncodeRune(buf[:], r)])
	out := make([]byte, 0, len(d))
	for _, c := range string(d) {
		switch {
		case c < utf8.RuneSelf:
			out = append(out, byte(c))
		case unicode.Is(unicode.Mn, c):
			// A combining mark: the accent of a decomposed letter.
		default:
			if s, ok := foldSpecial[unicode.ToLower(c)]; ok {
				out = append(out, s...)
			} else {
				out = append(out, ' ')
			}
		}
	}
	return string(out)
}

// maxFilenameLen bounds attachment file names in bytes.
const maxFilenameLen = 100

// reservedNames are device names that Windows refuses as file names; mailbox
// contents are often copied elsewhere, so they are defused here too.
var reservedNames = map[string]bool{
	"con": true, "prn": true, "aux": true, "nul": true,
	"com1": true, "com2": true, "com3": true, "com4": true, "com5": true, "com6": true, "com7": true, "com8": true, "com9": true,
	"lpt1": true, "lpt2": true, "lpt3": true, "lpt4": true, "lpt5": true, "lpt6": true, "lpt7": true, "lpt8": true, "lpt9": true,
}

// SanitizeFilename turns an attachment name chosen by a remote sender into a
// safe single file name: directories, control characters and invisible
// formatting characters (bidi overrides can disguise "exe.pdf" as "fdp.exe")
// are removed, as are leading dots (hidden and temporary files) and device
// names; the result is at most 100 bytes and keeps its extension. An empty
// result becomes "attachment".
func SanitizeFilename(name string) string {
	name = strings.ToValidUTF8(name, "_")
	if i := strings.LastIndexAny(name, "/\\"); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
		case unicode.Is(unicode.Cf, r): // includes U+200E/F, U+202A-202E, U+2066-2069, U+061C
		case r == 0xFFFD, strings.ContainsRune(`:*?"<>|`, r):
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
	}
	name = strings.Trim(strings.TrimSpace(b.String()), ". ")
	if name == "" {
		return "attachment"
	}
	base := name
	if i := strings.IndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	if reservedNames[strings.ToLower(strings.TrimSpace(base))] {
		name = "_" + name
	}
	if len(name) > maxFilenameLen {
		ext := filepath.Ext(name)
		if len(ext) > 20 || len(ext) >= len(name) {
			ext = ""
		}
		stem := truncateUTF8(name[:len(name)-len(ext)], maxFilenameLen-len(ext))
		name = strings.TrimRight(stem, ". ") + ext
		if strings.TrimLeft(name, ". ") != name || name == ext {
			name = "attachment" + ext
		}
	}
	return name
}

// NumberedFilename is name, a name SanitizeFilename returned, told apart
// as its nth copy: "-n" before its extension (of at most 20 bytes), the
// stem cut so that the whole stays within the bound on names. Cut after the
// number instead, a long name would come back unchanged and never be told
// apart. Distinct n give distinct names.
func NumberedFilename(name string, n int) string {
	ext := filepath.Ext(name)
	if len(ext) > 20 || len(ext) >= len(name) {
		ext = ""
	}
	suffix := "-" + strconv.Itoa(n)
	return truncateUTF8(name[:len(name)-len(ext)], maxFilenameLen-len(ext)-len(suffix)) + suffix + ext
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
