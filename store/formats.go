package store

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mailctl/mailctl/internal/formats"
)

// DatabaseVersion reads the format version of one of the store's databases
// (IndexFile or DeliveriesFile) without changing it, for doctor: 0 when it
// is new and empty. A database another program wrote is an error.
func DatabaseVersion(path string) (int, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(2000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var version, app int64
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := db.QueryRow("PRAGMA application_id").Scan(&app); err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	if app != indexAppID && (app != 0 || version != 0) {
		return 0, foreignDB("the database", path, app, version)
	}
	return int(version), nil
}

// dbFormat is what the store knows of one of its databases' format: what
// the errors call it, the version this build writes, and the way out a
// refusal of a newer one offers besides running the newer release.
type dbFormat struct {
	what    string
	current int64
	orElse  string
}

// The store's two databases. Their versions are separate: a change of the
// index's layout rebuilds the index and leaves the deliveries record.
var (
	indexFormat      = dbFormat{"the index", IndexVersion, "remove it (the index is rebuilt from the mail)"}
	deliveriesFormat = dbFormat{"the deliveries record", DeliveriesVersion, "remove it (it holds only which deliveries of the last hour were answered)"}
)

// check refuses a database whose stamp (application_id, user_version) is
// not one this release reads: a later release's (formats.NewerError), or
// another program's (formats.DamagedError), which is kept rather than
// rebuilt over.
func (f dbFormat) check(path string, app, version int64) error {
	switch {
	case app != indexAppID && (app != 0 || version != 0):
		return foreignDB(f.what, path, app, version)
	case version > f.current:
		return &formats.NewerError{What: f.what, Path: path, Found: int(version), Reads: int(f.current), Else: f.orElse}
	}
	return nil
}

// foreignDB refuses a database another program wrote.
func foreignDB(what, path string, app, version int64) error {
	return &formats.DamagedError{What: what, Path: path,
		Problem: fmt.Sprintf("its application id is %#x and its version %d: not a mailctl database; move it away and mailctl builds its own", app, version)}
}

// sqliteHeader starts every SQLite database file; user_version is the
// 4 bytes at offset 60 of the header, application_id those at 68.
const sqliteHeader = "SQLite format 3\x00"

// peekDB reads the stamp in the header of the database file at path,
// without opening it as a database, and refuses one db.check refuses. It is
// nil when it cannot tell (no file, no header, or a stamp still in the
// write-ahead log): opening the database then decides.
func peekDB(db dbFormat, path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var h [100]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:16]) != sqliteHeader {
		return nil
	}
	version := int64(int32(binary.BigEndian.Uint32(h[60:])))
	app := int64(int32(binary.BigEndian.Uint32(h[68:])))
	return db.check(path, app, version)
}
