package store

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/internal/formats"
)

// The deliveries record a later release wrote is refused like the index,
// and kept; DatabaseVersion reads both databases' versions, and refuses a
// database of another program.
func TestDeliveriesVersions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, DeliveriesFile)
	x, err := openDeliveriesDB(path)
	if err != nil {
		t.Fatal(err)
	}
	x.close()
	if v, err := DatabaseVersion(path); err != nil || v != formats.Deliveries {
		t.Fatalf("DatabaseVersion: %d, %v", v, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", formats.Deliveries+1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = openDeliveriesDB(path)
	var ne *formats.NewerError
	if !errors.As(err, &ne) || ne.Found != formats.Deliveries+1 || ne.Reads != formats.Deliveries || !strings.Contains(err.Error(), "remove it (it holds only") {
		t.Fatalf("newer deliveries record: %v", err)
	}
	if v, err := DatabaseVersion(path); err != nil || v != formats.Deliveries+1 {
		t.Fatalf("the refused database changed: version %d, %v", v, err)
	}

	other := filepath.Join(dir, "other.db")
	db, _ = sql.Open("sqlite", other)
	db.Exec("PRAGMA application_id = 42; CREATE TABLE t(x)")
	db.Close()
	if _, err := DatabaseVersion(other); !errors.Is(err, formats.ErrDamaged) || !strings.Contains(err.Error(), "not a mailctl database") {
		t.Errorf("another program's database: %v", err)
	}
	if _, err := DatabaseVersion(filepath.Join(dir, "none.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing database: %v", err)
	}
}

// An index or deliveries record whose stamp is another program's is
// refused and kept, not rebuilt over; a file that is no database at all is
// damage the store rebuilds (TestIndexRebuildsWhenDamaged and the like).
func TestForeignDatabaseIsKept(t *testing.T) {
	for _, file := range []string{IndexFile, DeliveriesFile} {
		t.Run(file, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "mailboxes")
			idxDir := filepath.Join(t.TempDir(), "index")
			os.Mkdir(idxDir, 0o700)
			path := filepath.Join(idxDir, file)
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("PRAGMA application_id = 1234; PRAGMA user_version = 7; CREATE TABLE precious(x); INSERT INTO precious VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			db.Close()
			before, _ := os.ReadFile(path)
			_, err = OpenIndexed(root, filepath.Join(idxDir, IndexFile))
			if !errors.Is(err, formats.ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a mailctl database") {
				t.Fatalf("another program's %s: %v", file, err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("the database changed")
			}
		})
	}
}

// Both databases' stamps are read before either is opened: a newer
// deliveries record beside an older index is refused with the index left
// as it was, not rebuilt first (their versions are separate, so one can be
// older while the other is newer).
func TestNewerDeliveriesLeavesOlderIndex(t *testing.T) {
	s := newTestStore(t)
	deliver(t, s, "inbox", testMessage(1), "a")
	allRows(t, s, "inbox", Query{})
	root, idx := s.Root(), s.idx.path
	s.Close()
	for path, v := range map[string]int{idx: 0, deliveriesPath(idx): DeliveriesVersion + 1} {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	before, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenIndexed(root, idx)
	if !errors.Is(err, formats.ErrNewer) || !strings.Contains(err.Error(), "the deliveries record") {
		t.Fatalf("a newer deliveries record: %v", err)
	}
	if after, _ := os.ReadFile(idx); !bytes.Equal(before, after) {
		t.Error("the older index was changed before the refusal")
	}
}
