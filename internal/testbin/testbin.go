// Package testbin helps end-to-end tests that build and run the real
// binaries of this module.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot returns the directory of the mailctl module's go.mod, where
// `go build ./cmd/mailctl` runs.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the mailctl module")
	}
	return filepath.Dir(mod), nil
}
