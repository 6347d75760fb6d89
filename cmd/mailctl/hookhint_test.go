package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mailctl/mailctl/hooks"
)

// The refusal recorded for a hook of a root-owned mailbox (every hook of a
// `mailctl dev` run as root) names a command to fix it: that command exists.
func TestRootOwnerHintNamesARealCommand(t *testing.T) {
	m := regexp.MustCompile(`mailctl ([a-z]+ [a-z]+)`).FindStringSubmatch(hooks.ErrRootOwner.Error())
	if m == nil {
		t.Fatalf("the hint names no command: %v", hooks.ErrRootOwner)
	}
	args := append(strings.Fields(m[1]), "--help")
	if out, e, code := mailctl(t, nil, args...); code != 0 {
		t.Errorf("the hint's `mailctl %s` is not a command (exit %d):\n%s%s", m[1], code, out, e)
	}
}

// The dev banner does not promise hooks to a dev run as root, whose
// mailboxes' hooks never run.
func TestDevBannerHooksNote(t *testing.T) {
	if n := devHooksNote(0); !strings.Contains(n, "never run as root") || strings.Contains(n, "fires hooks") {
		t.Errorf("as root: %q", n)
	}
	if n := devHooksNote(1000); n != "(trusted mail fires hooks)" {
		t.Errorf("as a user: %q", n)
	}
}
