package store

import (
	"database/sql"
	"fmt"
	"os"
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
		return 0, fmt.Errorf("%s is not a mailctl database (application id %#x)", path, app)
	}
	return int(version), nil
}
