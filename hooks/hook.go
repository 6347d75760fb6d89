// Package hooks validates, gates and runs mailbox hooks: argv commands that the
// daemon starts as the mailbox owner when mail arrives (on_receive) or when a
// send settles (after_send).
//
// Hooks are the most dangerous feature of mailctl: attacker-written mail can
// cause a command to start. The package therefore owns the safety rules, not
// only the mechanics: hooks never run as root, never through an implicit shell,
// with a cleared environment, in their own process group with a deadline, and
// message data reaches them only through environment variables and stdin, never
// through any process's argv.
package hooks

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mailctl/mailctl/protocol"
)

// Limits of a hook definition.
const (
	// DefaultTimeoutSecs is used when a hook names no timeout.
	DefaultTimeoutSecs = 60
	// MaxTimeoutSecs bounds how long one run may last.
	MaxTimeoutSecs = 600
	// MaxArgs bounds the length of a hook's argv.
	MaxArgs = 64
	// MaxArgBytes bounds each argv element.
	MaxArgBytes = 4096
	// MaxNameLen bounds a hook name.
	MaxNameLen = 64
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ErrInvalid is wrapped by every validation error of Normalize, so callers can
// map it to the protocol's invalid_input code with errors.Is.
var ErrInvalid = errors.New("invalid hook")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Normalize validates h and fills its defaults in place: a zero timeout becomes
// DefaultTimeoutSecs and an empty name becomes DerivedName. It does not check
// that the mailbox exists or who may touch it; that is the daemon's job.
// Errors wrap ErrInvalid and say what is wrong and how to fix it.
func Normalize(h *protocol.Hook) error {
	if h == nil {
		return invalid("no hook given")
	}
	switch h.Event {
	case protocol.EventOnReceive, protocol.EventAfterSend:
	case "":
		return invalid("event is missing: use %q or %q", protocol.EventOnReceive, protocol.EventAfterSend)
	default:
		return invalid("unknown event %q: use %q or %q", truncateForError(h.Event), protocol.EventOnReceive, protocol.EventAfterSend)
	}
	if err := checkCmd(h.Cmd); err != nil {
		return err
	}
	switch {
	case h.TimeoutSecs == 0:
		h.TimeoutSecs = DefaultTimeoutSecs
	case h.TimeoutSecs < 1 || h.TimeoutSecs > MaxTimeoutSecs:
		return invalid("timeout_secs %d is out of range: use 1 to %d (0 means the default, %d)", h.TimeoutSecs, MaxTimeoutSecs, DefaultTimeoutSecs)
	}
	if h.Event != protocol.EventOnReceive {
		// The gate's flags say which received mail fires the hook; after_send
		// has no such gate, so a flag there would be silently meaningless.
		for _, f := range []struct {
			set  bool
			name string
		}{{h.FireOnUntrusted, "fire_on_untrusted"}, {h.FireOnAuto, "fire_on_auto_submitted"}, {h.FireOnLists, "fire_on_lists"}} {
			if f.set {
				return invalid("%s only applies to %q hooks: remove it or change the event", f.name, protocol.EventOnReceive)
			}
		}
	}
	if h.Name == "" {
		h.Name = DerivedName(*h)
	} else if !nameRE.MatchString(h.Name) {
		return invalid("name %q is not allowed: use 1 to %d characters from a-z, 0-9, '.', '_' and '-', starting with a letter or digit, or leave it empty to derive one", truncateForError(h.Name), MaxNameLen)
	}
	return nil
}

func checkCmd(cmd []string) error {
	if len(cmd) == 0 {
		return invalid("cmd is empty: give the argv as a list whose first element is an absolute path, e.g. [\"/usr/local/bin/on-mail\", \"--quiet\"]")
	}
	if len(cmd) > MaxArgs {
		return invalid("cmd has %d elements: at most %d are allowed; move arguments into a script", len(cmd), MaxArgs)
	}
	for i, a := range cmd {
		if len(a) > MaxArgBytes {
			return invalid("cmd[%d] is %d bytes long: at most %d are allowed; move it into a script or file", i, len(a), MaxArgBytes)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return invalid("cmd[%d] contains a NUL byte, which cannot be passed to a program: remove it", i)
		}
	}
	prog := cmd[0]
	if !filepath.IsAbs(prog) {
		return invalid("cmd[0] %q is not an absolute path: hooks are not looked up in PATH; use the full path, e.g. %q", truncateForError(prog), "/usr/bin/"+truncateForError(filepath.Base(prog)))
	}
	if filepath.Clean(prog) != prog {
		return invalid("cmd[0] %q is not a clean path: use %q", truncateForError(prog), truncateForError(filepath.Clean(prog)))
	}
	if prog == "/" {
		return invalid("cmd[0] \"/\" is a directory, not a program: name the executable to run")
	}
	return nil
}

// truncateForError keeps error messages short when the input is huge.
func truncateForError(s string) string {
	const max = 80
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	return truncateUTF8(s, max) + "..."
}

// DropUngatedFlags clears fire_on_auto_submitted and fire_on_lists on a hook
// that is not on_receive. Creating such a hook is refused (Normalize), but
// releases before that refusal stored them, and a config may still name
// them: there they never meant anything, so a hook read back keeps running
// as it did rather than being refused at every run.
func DropUngatedFlags(h *protocol.Hook) {
	if h.Event != protocol.EventOnReceive {
		h.FireOnAuto, h.FireOnLists = false, false
	}
}

// DerivedName returns the stable name of a hook that was created without one:
// 12 lowercase hex characters of a SHA-256 over an unambiguous encoding of its
// event, its argv and its gate flags. The same definition always gets the same
// name, so creating it twice conflicts instead of duplicating, and hooks that
// differ only in a flag get different names. fire_on_auto_submitted and
// fire_on_lists are encoded only when set, so a hook without them keeps the
// name it had before they existed.
func DerivedName(hook protocol.Hook) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	field := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	field("mailctl-hook-v1")
	field(hook.Event)
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(hook.Cmd)))])
	for _, a := range hook.Cmd {
		field(a)
	}
	flag := func(b bool) byte {
		if b {
			return 1
		}
		return 0
	}
	h.Write([]byte{flag(hook.FireOnUntrusted)})
	if hook.FireOnAuto || hook.FireOnLists {
		h.Write([]byte{flag(hook.FireOnAuto), flag(hook.FireOnLists)})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Reasons returned by ShouldFire. They are stable strings meant for the run
// log and for tests.
const (
	ReasonFire            = "fire"
	ReasonFireUntrusted   = "fire: fire_on_untrusted is set"
	ReasonEventMismatch   = "skip: event mismatch"
	ReasonMailboxMismatch = "skip: hook belongs to another mailbox"
	ReasonUntrusted       = "skip: sender not trusted (set fire_on_untrusted to run on all mail)"
	ReasonAutoSubmitted   = "skip: message is Auto-Submitted (loop protection; set fire_on_auto_submitted to run anyway)"
	ReasonList            = "skip: message is from a mailing list (loop protection; set fire_on_lists to run anyway)"
)

// ShouldFire decides whether hook h runs for the event described by f and says
// why. The event and mailbox must match. For on_receive the gate also applies:
// only mail whose trust verdict is protocol.Trusted fires unless FireOnUntrusted, and
// mail marked Auto-Submitted (any value but "no") or carrying a List-Id does
// not fire unless the hook opts in, so two agents cannot answer each other in
// a loop. after_send is about mail the owner sent, so only the event and
// mailbox are checked.
func ShouldFire(h protocol.Hook, f Facts) (bool, string) {
	if h.Event != f.Event {
		return false, ReasonEventMismatch
	}
	if h.Mailbox != f.Mailbox {
		return false, ReasonMailboxMismatch
	}
	if h.Event != protocol.EventOnReceive {
		return true, ReasonFire
	}
	if isAutoSubmitted(f.AutoSubmitted) && !h.FireOnAuto {
		return false, ReasonAutoSubmitted
	}
	if strings.TrimSpace(f.ListID) != "" && !h.FireOnLists {
		return false, ReasonList
	}
	if !f.Trusted.IsTrusted() {
		if !h.FireOnUntrusted {
			return false, ReasonUntrusted
		}
		return true, ReasonFireUntrusted
	}
	return true, ReasonFire
}

// isAutoSubmitted follows RFC 3834 as an automatic reply's refusal does
// (protocol.IsAutoSubmitted): only "no" means a human sent it.
func isAutoSubmitted(v string) bool { return protocol.IsAutoSubmitted(v) }
