package mcpshim

import (
	"encoding/json"
	"fmt"
	"math/big"
)

// badID reads one JSON-RPC message as written, before the SDK decodes it,
// and returns the id of a request that the SDK would mishandle, with why it
// is refused; why is empty for any other message. Both transports ask it.
//
//   - A null id: JSON-RPC's decoding takes it for none, and MCP allows no
//     null id, so the request would go unanswered (id nil).
//   - A number the SDK would answer under another id (see exactID).
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

// exactID reports whether raw, a JSON-RPC id, is a string or a whole number
// of at most maxExactID in magnitude.
func exactID(raw json.RawMessage) bool {
	if len(raw) == 0 || raw[0] == '"' {
		return true
	}
	if len(raw) > 32 { // no whole number up to 2^53 needs more, however written
		return false
	}
	v, ok := new(big.Rat).SetString(string(raw))
	return ok && v.IsInt() && v.Num().CmpAbs(big.NewInt(maxExactID)) <= 0
}

func inexactIDMessage(id json.RawMessage) string {
	return fmt.Sprintf("invalid request: the id %s would not come back as it was sent: use a string, or a whole number of at most 2^53", id)
}
