package config

import (
	"fmt"

	"github.com/mailctl/mailctl/internal/formats"
)

// checkFormat refuses a `format` this release cannot read: one a later
// release's config says it has (keys this one does not know, or that mean
// something else), or no version at all. Left out, applyDefaults makes it
// this release's.
func (c *Config) checkFormat(set bool) error {
	switch {
	case set && c.Format < 1:
		return fmt.Errorf("format = %d: the config's format is a whole number from 1 (this release writes %d); leave it out to mean this release's", c.Format, formats.Config)
	case c.Format > formats.Config:
		return &formats.NewerError{What: "the config", Found: c.Format, Reads: formats.Config}
	}
	return nil
}
