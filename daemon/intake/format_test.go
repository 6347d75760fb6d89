package intake

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
)

// The segments' first line is the inbound journal's format stamp.
func TestMagicIsTheFormatVersion(t *testing.T) {
	if want := magicPrefix + strconv.Itoa(formats.InboundJournal) + "\n"; magic != want {
		t.Fatalf("magic = %q, formats.InboundJournal says %q", magic, want)
	}
}

// A segment a later release wrote, or one whose version is damaged, stops
// the journal from opening, with an error naming the file and both
// versions, and is left as it was: the copies it holds are not set aside
// as damage.
func TestNewerOrDamagedSegmentIsRefusedAndKept(t *testing.T) {
	for name, head := range map[string]string{
		"newer":   magicPrefix + strconv.Itoa(formats.InboundJournal+1) + "\n",
		"damaged": magicPrefix + "x1\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, segPrefix+"0")
			content := []byte(head + "records of a later release")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(dir, Options{Sync: func() error { return nil }})
			want := formats.ErrNewer
			if name == "damaged" {
				want = formats.ErrDamaged
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v, want %v naming %s", err, want, path)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, content) {
				t.Fatalf("the segment was changed: %q %v", got, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "corrupt")); !os.IsNotExist(err) {
				t.Errorf("something was set aside: %v", err)
			}
		})
	}
}
