package store

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestValidMailboxName(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string // substring of the error, "" for valid
	}{
		{"agent", ""},
		{"a", ""},
		{"a.b_c-9", ""},
		{strings.Repeat("a", 64), ""},
		{"", "empty"},
		{strings.Repeat("a", 65), "maximum is 64"},
		{"Agent", "upper-case"},
		{"a b", "' '"},
		{"a/b", "'/'"},
		{"a+b", "'+'"},
		{"é", "only a-z"},
		{".a", "dot"},
		{"a.", "dot"},
		{"a..b", `".."`},
		{"..", "dot"},
		{"a\x00", "only a-z"},
		// Compatibility forms that NFKC folds to a name (fullwidth
		// ｐｏｓｔｍａｓｔｅｒ, the ﬁ ligature, a circled letter) are not names.
		{"\uff50\uff4f\uff53\uff54\uff4d\uff41\uff53\uff54\uff45\uff52", "only a-z"},
		{"\ufb01nance", "only a-z"},
		{"\u24d0dmin", "only a-z"},
		{"a\u2028b", "only a-z"},
		// The error names the character the user typed, not its first byte.
		{"\u0430gent", "'а'"},
		{"\uff41gent", "'ａ'"},
		{"a\xffb", "byte 0xff"},
	}
	for _, tt := range tests {
		err := ValidMailboxName(tt.name)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ValidMailboxName(%q) = %v, want nil", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ValidMailboxName(%q) = %v, want error containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestValidID(t *testing.T) {
	valid := []string{"2025-04-15-143022-hello", "2025-04-15-143022-hello-2", "hand written", "a.b", "x"}
	invalid := []string{"", ".hidden", ".tmp-abc", "..", "a..b", "a/b", "../etc/passwd", `a\b`, "a\x00", "a\nb", "a\x7f", "a\u0085", "\xff", strings.Repeat("a", 201)}
	for _, id := range valid {
		if err := ValidID(id); err != nil {
			t.Errorf("ValidID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range invalid {
		if err := ValidID(id); err == nil {
			t.Errorf("ValidID(%q) = nil, want error", id)
		}
	}
}

func TestNewID(t *testing.T) {
	at := time.Date(2025, 4, 15, 16, 30, 22, 999, time.FixedZone("CEST", 2*3600))
	tests := []struct {
		subject, want string
	}{
		{"Hello", "2025-04-15-143022-hello"},
		{"Re: Hello, World!", "2025-04-15-143022-re-hello-world"},
		{"", "2025-04-15-143022-message"},
		{"!!!", "2025-04-15-143022-message"},
		{"日本語", "2025-04-15-143022-message"},
		{"Ünïcödé text", "2025-04-15-143022-unicode-text"},
		{"Héllo Wörld", "2025-04-15-143022-hello-world"},
		{"Straße, Øresund, Æble, Œuvre", "2025-04-15-143022-strasse-oresund-aeble-oeuvre"},
		{"Łódź, Þór, Ðe, İstanbul", "2025-04-15-143022-lodz-thor-de-istanbul"},
		{"Привет, мир", "2025-04-15-143022-privet-mir"},
		{"Καλημέρα κόσμε", "2025-04-15-143022-kalimera-kosme"},
		{"ﬁle №1 ①", "2025-04-15-143022-file-no1-1"},
		{"Re: café 😀 日本 crème", "2025-04-15-143022-re-cafe-creme"},
		{strings.Repeat("ß", 30), "2025-04-15-143022-" + strings.Repeat("ss", 20)},
		{"../../etc/passwd", "2025-04-15-143022-etc-passwd"},
		{strings.Repeat("abc ", 30), "2025-04-15-143022-abc-abc-abc-abc-abc-abc-abc-abc-abc-abc"},
		{strings.Repeat("x", 100), "2025-04-15-143022-" + strings.Repeat("x", 40)},
	}
	for _, tt := range tests {
		got := NewID(at, tt.subject)
		if got != tt.want {
			t.Errorf("NewID(%q) = %q, want %q", tt.subject, got, tt.want)
		}
		if err := ValidID(got); err != nil {
			t.Errorf("NewID(%q) = %q is not a valid id: %v", tt.subject, got, err)
		}
		if s := strings.TrimPrefix(got, "2025-04-15-143022-"); len(s) > 40 || strings.HasSuffix(s, "-") {
			t.Errorf("NewID(%q) slug %q too long or ends with '-'", tt.subject, s)
		}
	}
}

func TestSanitizeFilename(t *testing.T) {
	long := strings.Repeat("a", 200) + ".pdf"
	tests := []struct {
		in, want string
	}{
		{"report.pdf", "report.pdf"},
		{"../../etc/passwd", "passwd"},
		{`C:\Users\x\evil.exe`, "evil.exe"},
		{"/abs/path/", "attachment"},
		{"", "attachment"},
		{"...", "attachment"},
		{".bashrc", "bashrc"},
		{".tmp-123", "tmp-123"},
		{"a\x00b\nc\x1b.txt", "abc.txt"},
		{"invoice\u202Efdp.exe", "invoicefdp.exe"},
		{"x\u2066y\u2069\u200e\u200f\u061cz.txt", "xyz.txt"},
		{"zero\u200bwidth.txt", "zerowidth.txt"},
		{"CON", "_CON"},
		{"con.txt", "_con.txt"},
		{"lpt1.tar.gz", "_lpt1.tar.gz"},
		{"console.txt", "console.txt"},
		{"a:b*c?.txt", "a_b_c_.txt"},
		{"bad\xffutf8.txt", "bad_utf8.txt"},
		{"  spaced  ", "spaced"},
		{"trailing.", "trailing"},
		{long, strings.Repeat("a", 96) + ".pdf"},
		{strings.Repeat("é", 100) + ".txt", strings.Repeat("é", 48) + ".txt"},
		{strings.Repeat("b", 150), strings.Repeat("b", 100)},
		{"x." + strings.Repeat("e", 150), "x." + strings.Repeat("e", 98)},
	}
	for _, tt := range tests {
		got := SanitizeFilename(tt.in)
		if got != tt.want {
			t.Errorf("SanitizeFilename(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(got) > 100 || !utf8.ValidString(got) || strings.ContainsAny(got, "/\\\x00") || strings.HasPrefix(got, ".") {
			t.Errorf("SanitizeFilename(%q) = %q breaks the invariants", tt.in, got)
		}
	}
}

func FuzzSanitizeFilename(f *testing.F) {
	for _, s := range []string{"report.pdf", "../x", ".tmp-", "con", "\u202e", strings.Repeat("é", 80) + ".txt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := SanitizeFilename(in)
		if got == "" || len(got) > 100 || !utf8.ValidString(got) || strings.ContainsAny(got, "/\\\x00") ||
			strings.HasPrefix(got, ".") || checkName(got) != nil {
			t.Fatalf("SanitizeFilename(%q) = %q breaks the invariants", in, got)
		}
	})
}

func FuzzNewID(f *testing.F) {
	f.Add(int64(1744727422), "Hello, World")
	f.Add(int64(0), "../../\x00\u202e")
	f.Fuzz(func(t *testing.T, sec int64, subject string) {
		id := NewID(time.Unix(sec%(1<<36), 0), subject)
		if err := ValidID(id); err != nil {
			t.Fatalf("NewID(%q) = %q: %v", subject, id, err)
		}
		if len(id) > 18+40+8 {
			t.Fatalf("NewID(%q) = %q is too long", subject, id)
		}
	})
}

// A name at the bound, numbered, used to come back unchanged (the number was
// cut off with the excess), so that a second attachment of the same long
// name was never told apart; an extension nearly as long as the bound made
// the stem's length negative.
func TestNumberedFilename(t *testing.T) {
	tests := []struct {
		name string
		n    int
		want string
	}{
		{"report.pdf", 2, "report-2.pdf"},
		{"archive.tar.gz", 3, "archive.tar-3.gz"},
		{"README", 12, "README-12"},
		{strings.Repeat("a", 96) + ".pdf", 2, strings.Repeat("a", 94) + "-2.pdf"},
		{strings.Repeat("a", 96) + ".pdf", 100, strings.Repeat("a", 92) + "-100.pdf"},
		{strings.Repeat("é", 48) + ".txt", 2, strings.Repeat("é", 47) + "-2.txt"},
		{"x." + strings.Repeat("e", 98), 10, "x." + strings.Repeat("e", 95) + "-10"},
	}
	for _, tt := range tests {
		if got := NumberedFilename(tt.name, tt.n); got != tt.want {
			t.Errorf("NumberedFilename(%q, %d) = %q, want %q", tt.name, tt.n, got, tt.want)
		}
	}
	for _, name := range []string{strings.Repeat("a", 100), strings.Repeat("a", 96) + ".pdf", "x." + strings.Repeat("e", 98), strings.Repeat("é", 50)} {
		seen := map[string]bool{name: true}
		for n := 2; n <= 2000; n++ {
			got := NumberedFilename(name, n)
			if seen[got] || len(got) > 100 || !utf8.ValidString(got) || got != SanitizeFilename(got) {
				t.Fatalf("NumberedFilename(%q, %d) = %q: repeated, too long or not a safe name", name, n, got)
			}
			seen[got] = true
		}
	}
	used := map[string]bool{}
	for range 12 {
		uniqueName("x."+strings.Repeat("e", 98), used)
	}
	if len(used) != 12 {
		t.Errorf("12 draft attachments of one long name kept %d names", len(used))
	}
}
