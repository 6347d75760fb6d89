package mcpshim

import (
	"encoding/json"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// badID reads one JSON-RPC message as written, before the SDK decodes it,
// and returns the id of a request that the SDK would mishandle, with why it
// is refused; why is empty for any other message. Both transports ask it.
//
//   - A null id: JSON-RPC's decoding takes it for none, and MCP allows no
//     null id, so the request would go unanswered (id nil).
//   - A number the SDK would answer under another id (see exactID).
//   - A string that is not text: invalid UTF-8, or an escape of half a
//     UTF-16 pair; the SDK reads either with U+FFFD in its place and would
//     answer under that string.
//
// A message with no method (a response, or no JSON-RPC at all) is left to
// the SDK. valid is false when msg is no one JSON text (nor nested within
// maxJSONDepth), which the SDK, reading only its first value, may yet take.
func badID(msg []byte) (id json.RawMessage, why string, valid bool) {
	var p messageProbe
	var ok bool
	valid, _ = probeJSON(msg, maxJSONDepth, false, func(q messageProbe, isMsg bool) { p, ok = q, isMsg })
	if !valid || !ok {
		return nil, "", valid
	}
	id, why = p.badID()
	return id, why, true
}

// messageProbe is what badID and the HTTP transport read of a message: its
// members "id" and "method" by their exact names, as the SDK's decoder reads
// them (encoding/json would also take "ID" or "Method", and a message holding
// both spellings would be judged by a member the SDK does not read).
type messageProbe struct {
	ID     json.RawMessage // as written; nil: no id member
	Method *string         // nil: no method member, or null
}

// badID is badID on the message p was read from.
func (p messageProbe) badID() (json.RawMessage, string) {
	if p.Method == nil || *p.Method == "" || p.ID == nil {
		return nil, ""
	}
	if string(p.ID) == "null" {
		return nil, nullIDMessage
	}
	if !exactID(p.ID) {
		return p.ID, inexactIDMessage(p.ID)
	}
	return nil, ""
}

// nullIDMessage answers a request whose id is null.
const nullIDMessage = "invalid request: the id is null: a request's id is a string or a number (a notification has no id member)"

// maxExactID is the largest magnitude of a numeric id the SDK answers under
// the same id: it reads ids through float64 and then int64, so 1.5 came back
// as 1 and 9007199254740993 as 9007199254740992, answers a client cannot match
// (and two calls 1.5 and 1.7 shared one id, cancels included).
const maxExactID = 1 << 53

// exactID reports whether raw, a JSON-RPC id, is a string of text (see
// textString) or a whole number of at most maxExactID in magnitude.
func exactID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	if raw[0] == '"' {
		return textString(raw)
	}
	if len(raw) > 32 { // no whole number up to 2^53 needs more, however written
		return false
	}
	v, ok := new(big.Rat).SetString(string(raw))
	return ok && v.IsInt() && v.Num().CmpAbs(big.NewInt(maxExactID)) <= 0
}

func inexactIDMessage(id json.RawMessage) string {
	the := "the id"
	if echoable(id) {
		the += " " + string(id)
	}
	return the + " would not come back as it was sent: use a string of UTF-8 text, or a whole number of at most 2^53"
}

// maxEchoedID is the longest id, as written, that the server's own answers
// (its refusals) carry back; a longer one is answered under null, so that
// a refusal stays small whatever the line held.
const maxEchoedID = 256

// echoable reports whether raw, an id as written in a message, may be
// written back as it is in an answer: a string of text (textString) or a
// number that a float64 holds (not 1e400, which Go's and other strict
// parsers refuse or read as infinity), of at most maxEchoedID bytes.
// Anything else is answered under null: JSON-RPC's id for one that could
// not be read, rather than bytes that are no JSON or another id.
func echoable(raw json.RawMessage) bool {
	if len(raw) == 0 || len(raw) > maxEchoedID || !validID(raw) {
		return false
	}
	if raw[0] == '"' {
		return textString(raw)
	}
	_, err := strconv.ParseFloat(string(raw), 64)
	return err == nil
}

// textString reports whether raw, a JSON string as written (its quotes
// included, its escapes well formed), is text that any parser reads as
// written: valid UTF-8, with every \u escape of half a UTF-16 pair in a
// whole pair. encoding/json, which the SDK decodes with, reads an invalid
// byte or a lone half as U+FFFD, and writes that back.
func textString(raw []byte) bool {
	if len(raw) < 2 {
		return false
	}
	s := raw[1 : len(raw)-1]
	if !utf8.Valid(s) {
		return false
	}
	pendingHigh := false // the previous character was \u of a high half
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			if pendingHigh {
				return false
			}
			continue
		}
		i++
		if i >= len(s) {
			return false
		}
		if s[i] != 'u' {
			if pendingHigh {
				return false
			}
			continue
		}
		if i+5 > len(s) {
			return false
		}
		r, err := strconv.ParseUint(string(s[i+1:i+5]), 16, 16)
		if err != nil {
			return false
		}
		i += 4
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if pendingHigh {
				return false
			}
			pendingHigh = true
		case 0xDC00 <= r && r < 0xE000:
			if !pendingHigh {
				return false
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return false
			}
		}
	}
	return !pendingHigh
}
