package formats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestStampRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), StampName)
	if err := WriteStamp(path, "registry", 3, "1.4.0"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if want := "mailctl registry format 3\nwritten by mailctl 1.4.0\n"; string(data) != want {
		t.Fatalf("stamp file = %q, want %q", data, want)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stamp mode: %v %v", st.Mode(), err)
	}
	s, err := ReadStamp(path, "registry")
	if err != nil {
		t.Fatal(err)
	}
	if s != (Stamp{Kind: "registry", Version: 3, WrittenBy: "1.4.0"}) {
		t.Fatalf("read %+v", s)
	}
}

func TestReadStampMissingIsNotExist(t *testing.T) {
	_, err := ReadStamp(filepath.Join(t.TempDir(), StampName), "registry")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want not-exist", err)
	}
}

// TestReadStampDamaged: every kind of damage is a DamagedError that names
// the file and the problem, and the file is left as it was.
func TestReadStampDamaged(t *testing.T) {
	cases := []struct {
		name, content, problem string
	}{
		{"empty", "", "its first line"},
		{"another kind", "mailctl mailboxes format 1\n", "its first line"},
		{"no version", "mailctl registry format \n", "not a whole number"},
		{"zero", "mailctl registry format 0\n", "not a whole number"},
		{"negative", "mailctl registry format -2\n", "not a whole number"},
		{"leading zero", "mailctl registry format 01\n", "not a whole number"},
		{"words", "mailctl registry format two\n", "not a whole number"},
		{"binary line", "mailctl registry format 1\n\x00\x01\n", "no release writes"},
		{"blank line", "mailctl registry format 1\n\nwritten by mailctl 1\n", "no release writes"},
		{"too large", "mailctl registry format 1\n" + strings.Repeat("x", maxStamp), "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), StampName)
			os.WriteFile(path, []byte(c.content), 0o600)
			_, err := ReadStamp(path, "registry")
			var de *DamagedError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("err = %v, want a DamagedError", err)
			}
			for _, want := range []string{path, c.problem, "restore it from the backup", "nothing was changed"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if got, _ := os.ReadFile(path); string(got) != c.content {
				t.Errorf("the stamp changed to %q", got)
			}
		})
	}
}

func TestReadStampRefusesLinksAndDirectories(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("mailctl registry format 1\n"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if _, err := ReadStamp(link, "registry"); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a link: %v", err)
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	if _, err := ReadStamp(sub, "registry"); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		if _, err := ReadStamp(fifo, "registry"); !errors.Is(err, ErrDamaged) {
			t.Errorf("a FIFO: %v", err)
		}
	}
}

func TestLaterLinesAreSkipped(t *testing.T) {
	s, problem := ParseStamp([]byte("mailctl registry format 2\nwritten by mailctl 2.0.1\nsomething a later release says\n"), "registry")
	if problem != "" || s.Version != 2 || s.WrittenBy != "2.0.1" {
		t.Fatalf("got %+v, %q", s, problem)
	}
	// A release string that is not one is not taken as the writer.
	s, problem = ParseStamp([]byte("mailctl registry format 1\nwritten by mailctl rm -rf /\n"), "registry")
	if problem != "" || s.WrittenBy != "" {
		t.Fatalf("got %+v, %q", s, problem)
	}
}

func TestCheck(t *testing.T) {
	for _, found := range []int{1, 2} {
		if err := Check("the registry", "/x", found, 2, ""); err != nil {
			t.Errorf("version %d of 2: %v", found, err)
		}
	}
	Release = "1.4.2"
	defer func() { Release = "" }()
	err := Check("the registry", "/var/lib/mailctl/registry", 3, 2, "1.5.0")
	if !errors.Is(err, ErrNewer) {
		t.Fatalf("err = %v, want ErrNewer", err)
	}
	want := "the registry /var/lib/mailctl/registry is format version 3, and mailctl 1.4.2 reads versions up to 2: run mailctl 1.5.0 (which wrote it) or later, or restore the backup taken before the upgrade to go back to mailctl 1.4.2; nothing was changed"
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
	// Without the writer's release, it says which to look for.
	err = &NewerError{What: "the index", Path: "/i", Found: 2, Reads: 1, Else: "remove it: the index is rebuilt from the mail"}
	for _, s := range []string{"the newer mailctl that wrote it", "remove it: the index is rebuilt", "version 2", "up to 1"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
}

func FuzzParseStamp(f *testing.F) {
	f.Add([]byte("mailctl registry format 1\nwritten by mailctl 1.2.3\n"), "registry")
	f.Add([]byte("mailctl mailboxes format 7\n"), "mailboxes")
	f.Add([]byte("mailctl registry format 99999999999999999999\n"), "registry")
	f.Add([]byte("\x00\xff"), "registry")
	f.Fuzz(func(t *testing.T, data []byte, kind string) {
		s, problem := ParseStamp(data, kind)
		if problem != "" {
			return
		}
		if s.Version < 1 || s.Kind != kind {
			t.Fatalf("accepted %+v from %q", s, data)
		}
		// What was read writes back to a stamp that reads the same.
		again, problem := ParseStamp(s.Text(), kind)
		if problem != "" || again != s {
			t.Fatalf("%+v does not round-trip: %+v %q", s, again, problem)
		}
	})
}

// The refusal docs/operations.md shows is the one the daemon prints.
func TestOperationsPageShowsTheRefusal(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "mailctl serve: refusing to start: "
	var shown string
	for _, l := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(l, prefix); ok {
			shown = s
		}
	}
	Release = "1.4.2"
	defer func() { Release = "" }()
	want := Check("the registry", "/var/lib/mailctl/registry", 2, 1, "1.5.0").Error()
	if shown != want {
		t.Errorf("docs/operations.md shows\n%s%s\nthe daemon says\n%s%s", prefix, shown, prefix, want)
	}
}
