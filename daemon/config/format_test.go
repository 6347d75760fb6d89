package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
)

// format defaults to this release's; a later one is refused by Load with
// both versions and the file named, and the file is left as it is.
func TestConfigFormat(t *testing.T) {
	if Default().Format != formats.Config {
		t.Errorf("default format %d, want %d", Default().Format, formats.Config)
	}
	for _, text := range []string{`domains = ["a.test"]`, "format = 1\ndomains = [\"a.test\"]"} {
		c, err := Parse([]byte(text))
		if err != nil || c.Format != formats.Config {
			t.Errorf("%q: format %v, %v", text, c, err)
		}
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	text := "format = 2\ndomains = [\"a.test\"]\n[smtp]\nsomething_new = true\n"
	os.WriteFile(path, []byte(text), 0o600)
	_, err := Load(path)
	var ne *formats.NewerError
	if !errors.As(err, &ne) || ne.Found != 2 || ne.Reads != formats.Config || ne.Path != path {
		t.Fatalf("a later config: %v", err)
	}
	// The version is checked before anything else: a later release's keys
	// are not reported as misspellings.
	for _, s := range []string{"the config " + path + " is format version 2", "reads versions up to 1", "restore the backup"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != text {
		t.Error("the config changed")
	}
	for _, bad := range []string{"format = 0\n", "format = -1\n", "format = \"1\"\n", "format = 1.5\n"} {
		if _, err := Parse([]byte(bad + `domains = ["a.test"]`)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := Parse([]byte("format = -1\n")); err == nil || !strings.Contains(err.Error(), "whole number from 1") {
		t.Errorf("format = -1: %v", err)
	}
}
