// Package systemd holds mailctl's systemd unit and tmpfiles.d entry. The Go
// files only test them: the unit passes `systemd-analyze verify`, keeps the
// hardening docs/operations.md describes, and the tmpfiles entry creates the
// directories with the modes the daemon expects.
package systemd
