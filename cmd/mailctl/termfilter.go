package main

import "io"

// The editor root's `drafts edit` runs as the mailbox's owner draws on
// root's terminal through the relay (runOnTerminal), and the owner decides
// every byte it writes. An editor needs control sequences (CSI) to move
// the cursor, colour text and switch screens, so they pass; what acts on
// root beyond the screen does not: a clipboard write or read (OSC 52,
// which a later paste into root's shell would run, or which would answer
// the owner with what root copied), the other OSC, DCS, APC, PM and SOS
// strings (DECRQSS and XTGETTCAP reports, tmux passthrough to the terminal
// outside, graphics protocols that read files), window operations and
// their reports (CSI … t, which can type the window's title into root's
// input), printer control (CSI … i), ENQ's answerback, and every C1
// control in its 8-bit form. None of them is needed to edit a file.

// termFilter writes to w what passes of an editor's output. It keeps its
// place between writes, so a sequence split across reads is judged whole;
// it emits no string introducer, so the terminal is never left inside one.
type termFilter struct {
	w       io.Writer
	state   int
	seq     []byte // the CSI being read, from its introducer
	dropSeq bool   // the CSI grew past maxCSI: dropped at its end
	cont    int    // UTF-8 continuation bytes still expected in text
	out     []byte
}

const (
	tfText      = iota
	tfEsc       // after ESC
	tfC2        // after 0xC2 in text: U+0080 to U+009F are the C1 controls
	tfCSI       // in a control sequence, collected in seq
	tfString    // in an OSC, DCS, SOS, PM or APC string: dropped to its end
	tfStringEsc // ESC in a string: ST if a backslash follows
	tfStringC2  // 0xC2 in a string: ST (U+009C) if 0x9C follows
)

// maxCSI bounds a control sequence's parameters; an editor's are short.
const maxCSI = 256

func (f *termFilter) Write(p []byte) (int, error) {
	f.out = f.out[:0]
	for _, b := range p {
		f.step(b)
	}
	if len(f.out) > 0 {
		if _, err := f.w.Write(f.out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (f *termFilter) step(b byte) {
	switch f.state {
	case tfText:
		f.text(b)
	case tfEsc:
		switch b {
		case '[':
			f.state, f.seq, f.dropSeq = tfCSI, append(f.seq[:0], 0x1b, '['), false
		case ']', 'P', 'X', '^', '_':
			f.state = tfString
		case '\\': // ST with no string open
			f.state = tfText
		case 0x1b:
		default:
			f.state = tfText
			if b < 0x20 || b >= 0x7f {
				f.text(b) // ESC before a control or a byte of UTF-8: not a sequence
				return
			}
			f.out = append(f.out, 0x1b, b)
		}
	case tfC2:
		f.state = tfText
		switch {
		case b >= 0x80 && b <= 0x9f:
			f.c1(b)
		case b >= 0xa0 && b <= 0xbf:
			f.out = append(f.out, 0xc2, b)
		default:
			f.out = append(f.out, 0xc2) // not UTF-8: the terminal shows it as such
			f.text(b)
		}
	case tfCSI:
		switch {
		case b >= 0x20 && b <= 0x3f:
			if len(f.seq) < maxCSI {
				f.seq = append(f.seq, b)
			} else {
				f.dropSeq = true
			}
		case b >= 0x40 && b <= 0x7e:
			f.state = tfText
			if !f.dropSeq && b != 't' && b != 'i' {
				f.out = append(append(f.out, f.seq...), b)
			}
		default:
			// A control or a byte past ASCII ends the sequence unfinished:
			// it is dropped and the byte read as text.
			f.state = tfText
			f.text(b)
		}
	case tfString:
		switch b {
		case 0x07, 0x18, 0x1a, 0x9c: // BEL (OSC's end), CAN, SUB, ST
			f.state = tfText
		case 0x1b:
			f.state = tfStringEsc
		case 0xc2:
			f.state = tfStringC2
		}
	case tfStringEsc:
		if b == '\\' {
			f.state = tfText
			return
		}
		f.state = tfEsc // the string ended; this ESC begins what follows
		f.step(b)
	case tfStringC2:
		f.state = tfString
		if b == 0x9c {
			f.state = tfText
		}
	}
}

// text handles b outside any sequence.
func (f *termFilter) text(b byte) {
	if f.cont > 0 && b >= 0x80 && b <= 0xbf {
		f.cont--
		f.out = append(f.out, b)
		return
	}
	f.cont = 0
	switch {
	case b == 0x1b:
		f.state = tfEsc
	case b == 0x05: // ENQ: the terminal would answer with its answerback
	case b == 0xc2:
		f.state = tfC2
	case b >= 0x80 && b <= 0x9f: // a C1 control in its 8-bit form
		f.c1(b)
	default:
		switch {
		case b >= 0xc3 && b <= 0xdf:
			f.cont = 1
		case b >= 0xe0 && b <= 0xef:
			f.cont = 2
		case b >= 0xf0 && b <= 0xf4:
			f.cont = 3
		}
		f.out = append(f.out, b)
	}
}

// c1 handles the C1 control 0x80+b-0x80, in either form: a CSI begins a
// sequence (judged as ESC [ is), a string introducer begins a string that
// is dropped, and the rest are dropped (an editor writes none).
func (f *termFilter) c1(b byte) {
	switch b {
	case 0x9b:
		f.state, f.seq, f.dropSeq = tfCSI, append(f.seq[:0], 0x1b, '['), false
	case 0x90, 0x98, 0x9d, 0x9e, 0x9f:
		f.state = tfString
	}
}
