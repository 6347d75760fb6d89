package systemd

import _ "embed"

// Unit is mailctl.service, for `mailctl setup` to install on hosts where the
// binary was not installed from the package.
//
//go:embed mailctl.service
var Unit string

// Tmpfiles is the tmpfiles.d(5) entry.
//
//go:embed mailctl.tmpfiles
var Tmpfiles string
