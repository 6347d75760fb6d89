package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/mailctl/mailctl/internal/identtext"
)

// Label limits. Labels are words an owner or its agent puts on messages
// ("invoices", "follow-up"); they are kept in the frontmatter, so they
// survive a reindex and can be edited by hand.
const (
	MaxLabelLen = 64 // bytes
	MaxLabels   = 50 // per message
)

// ErrTooManyLabels is returned when a message would carry more than
// MaxLabels labels.
var ErrTooManyLabels = errors.New("too many labels")

// ValidLabel reports whether l can be a label: 1 to 64 bytes of valid UTF-8,
// no control, formatting or line-separating characters, no leading or
// trailing space, no comma (a comma separates labels on the command line),
// no compatibility character (ＩＮＶＯＩＣＥＳ or ﹐ fold under NFKC to
// another label, or a comma, where another program shows them) and only
// composed characters (NFC), so that one word is one label.
func ValidLabel(l string) error {
	switch {
	case l == "":
		return errors.New("label is empty")
	case len(l) > MaxLabelLen:
		return fmt.Errorf("label %q is %d bytes long, the maximum is %d", truncateUTF8(l, 20)+"…", len(l), MaxLabelLen)
	case !utf8.ValidString(l):
		return fmt.Errorf("label %q is not valid UTF-8", l)
	case strings.TrimSpace(l) != l:
		return fmt.Errorf("label %q starts or ends with white space", l)
	case strings.ContainsRune(l, ','):
		return fmt.Errorf("label %q contains a comma: give several labels separately", l)
	}
	for _, r := range l {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			return fmt.Errorf("label %q contains a control, formatting or line-separating character (%U)", l, r)
		}
	}
	if r, folded, ok := identtext.CompatibilityChar(l); ok {
		return fmt.Errorf("label %q holds %U, a compatibility form of %q: write plain characters (it reads as %q)", l, r, folded, norm.NFKC.String(l))
	}
	// Two spellings of one word (é, or e and a combining accent) would be
	// two labels that look the same.
	if !norm.NFC.IsNormalString(l) {
		return fmt.Errorf("label %q is spelled with combining characters: write it composed, %q", l, norm.NFC.String(l))
	}
	return nil
}

// LabelKey is the one form labels are compared in: two labels are the same
// label exactly when their keys are equal, which is exactly when
// strings.EqualFold says they are (Unicode simple case folding). Each
// character becomes one fixed member of its folding orbit (the orbit's
// lower case letter where it has one), so Σ, σ and ς key alike, as do K, k
// and the Kelvin sign, S, s and the long s; İ and ı, which fold to no other
// letter, key as themselves. The index stores and filters labels by it;
// a change of it is a change of the index format (formats.Index).
func LabelKey(l string) string {
	return strings.Map(foldRune, l)
}

// foldRune maps r to the member of its unicode.SimpleFold orbit that
// LabelKey keys it by: the lower case of the orbit's smallest member when
// that is in the orbit, the smallest member otherwise. It depends on the
// orbit alone, so runes fold alike exactly when they share an orbit.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		// The orbit of an ASCII letter is its two cases, and the Kelvin
		// sign for k and the long s for s: its smallest member is the
		// upper case, whose lower case is r's.
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	smallest := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		smallest = min(smallest, f)
	}
	lower := unicode.ToLower(smallest)
	if lower == r {
		return r
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f == lower {
			return lower
		}
	}
	return smallest
}

// HasLabel reports whether labels holds l, ignoring case (LabelKey).
func HasLabel(labels []string, l string) bool {
	key := LabelKey(l)
	return slices.ContainsFunc(labels, func(x string) bool { return LabelKey(x) == key })
}

// Relabel adds and removes labels (compared ignoring case, by LabelKey; an added label
// keeps the spelling it was first given) and, when star is not nil, stars
// or unstars messages. It returns the ids whose frontmatter changed and the
// ids that are not in the folder.
func (s *Store) Relabel(mailbox, folder string, ids, add, remove []string, star *bool) (changed, notFoundIDs []string, err error) {
	return s.Charged(nil).Relabel(mailbox, folder, ids, add, remove, star)
}

// Relabel is Store.Relabel with each file's reading charged.
func (c Charged) Relabel(mailbox, folder string, ids, add, remove []string, star *bool) (changed, notFoundIDs []string, err error) {
	for _, l := range slices.Concat(add, remove) {
		if err := ValidLabel(l); err != nil {
			return nil, nil, err
		}
	}
	res, err := c.update(mailbox, folder, ids, func(id string, m *Message) (bool, error) {
		return relabel(m, add, remove, star)
	}, syncAll)
	if err != nil {
		return nil, nil, err
	}
	return collect(ids, res)
}

// relabel applies one Relabel to m and reports whether m changed.
func relabel(m *Message, add, remove []string, star *bool) (bool, error) {
	labels := slices.Clone(m.Labels)
	for _, l := range add {
		if !HasLabel(labels, l) {
			labels = append(labels, l)
		}
	}
	labels = slices.DeleteFunc(labels, func(x string) bool { return HasLabel(remove, x) })
	if len(labels) > MaxLabels && len(labels) > len(m.Labels) {
		return false, fmt.Errorf("message %s would have %d labels, the maximum is %d: %w", m.ID, len(labels), MaxLabels, ErrTooManyLabels)
	}
	changed := !slices.Equal(labels, m.Labels)
	if changed {
		m.Labels = labels
		if len(m.Labels) == 0 {
			m.Labels = nil
		}
	}
	if star != nil && *star != m.Starred {
		m.Starred = *star
		changed = true
	}
	return changed, nil
}

// collect sorts the per-id results of update into the ids that changed and
// the ids not found; any other error about one message is returned.
func collect(ids []string, res map[string]updateResult) (changed, notFoundIDs []string, err error) {
	seen := map[string]bool{}
	var failed []Failure
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		switch r := res[id]; {
		case errors.Is(r.err, ErrNotFound), r.err != nil && ValidID(id) != nil:
			notFoundIDs = append(notFoundIDs, id)
		case r.err != nil:
			// One message that cannot be changed (damaged, too large,
			// refused) fails alone: the batch goes on, and says which.
			failed = append(failed, Failure{ID: id, Err: r.err})
		case r.changed:
			changed = append(changed, id)
		}
	}
	if len(failed) > 0 {
		err = &BatchError{Failed: failed}
	}
	return changed, notFoundIDs, err
}
