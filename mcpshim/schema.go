package mcpshim

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// Every session's tools/list carries every tool's schemas, and an agent pays
// for them in context before its first call (TestToolListSize bounds them).
// So the schemas say what a model needs and nothing twice: a parameter's
// description only where its name and type do not say enough (shared
// wording in paramDocs), no "null" a client need never send or receive,
// and output schemas that give the shape of the result without the
// descriptions the tool's own description and the Instructions carry.

var schemaOptions = &jsonschema.ForOptions{
	TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		// One address or a list of them: one schema, where anyOf would
		// spell out two.
		reflect.TypeFor[stringOrList](): {Types: []string{"string", "array"}, Items: &jsonschema.Schema{Type: "string"}},
		reflect.TypeFor[time.Time]():    {Type: "string"},
	},
}

// schemaFor derives a tool's input schema and lets the caller refine it
// (enums, bounds) before it is resolved.
func schemaFor[T any](refine func(*jsonschema.Schema)) (*jsonschema.Schema, *jsonschema.Resolved) {
	s, err := jsonschema.For[T](schemaOptions)
	if err != nil {
		panic(fmt.Sprintf("schema for %T: %v", *new(T), err))
	}
	if refine != nil {
		refine(s)
	}
	normalizeParams(s)
	r, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		panic(fmt.Sprintf("resolving schema for %T: %v", *new(T), err))
	}
	return s, r
}

// paramDocs describes the parameters several tools share, wherever a tool's
// own field tag does not, so that the wording is the same everywhere.
var paramDocs = map[string]string{
	"mailbox":         "name of one of your mailboxes",
	"from_mailbox":    "one of your mailboxes, the sender",
	"id":              "message id from email_list",
	"ids":             "several ids",
	"folder":          "default inbox",
	"offset":          "rows to skip (prefer cursor)",
	"body":            "Markdown, sent as HTML and text",
	"text_only":       "body as plain text only",
	"html_body":       "your HTML; body is then its text part",
	"bcc":             "hidden from the others",
	"attachments":     "file paths, read as you",
	"dry_run":         "check and report, do not send",
	"idempotency_key": "a retry with this key returns the first result, sends nothing",
	"send_at":         "RFC 3339 time to send at, within a year",
}

// selfExplanatory are the parameters whose name and type say all a model
// needs; every other parameter has a description
// (TestEveryParameterDescribedAndTyped).
var selfExplanatory = []string{"to", "cc", "subject", "name", "event", "action", "thread_id", "unread", "trusted", "starred",
	"labels_remove", "reply_to_address", "allow_empty", "clear_send_at", "without_attachments"}

// normalizeParams fills missing parameter descriptions from paramDocs and
// drops the "null" the schema package adds to slices and pointers: a null
// argument is treated as absent before validation, so a client need never
// send one, and a required list must not advertise null.
func normalizeParams(s *jsonschema.Schema) {
	for name, p := range s.Properties {
		if p.Description == "" {
			p.Description = paramDocs[name]
		}
		dropNull(p)
	}
}

// dropNull removes "null" from a schema's types.
func dropNull(p *jsonschema.Schema) {
	if len(p.Types) == 0 {
		return
	}
	types := slices.DeleteFunc(slices.Clone(p.Types), func(t string) bool { return t == "null" })
	if len(types) == 1 {
		p.Type, p.Types = types[0], nil
	} else {
		p.Types = types
	}
}

// leanEnvelope strips a result's schema to the shape of the result: the
// names, types and presence of data's fields, and of the rows of data's one
// list of objects that is always there (email_list's messages, a send's
// recipients); an object any deeper (a message's trust facts, its
// attachments) is named as an object only, and docs/mcp.md has its fields.
// Of the envelope, the schema lists summary, data and meta; the members
// every tool shares and a result may leave out (next_action, and an error's
// code, message and retryable) are described once, in docs/mcp.md and the
// Instructions. Descriptions go (the tool's description and the fields'
// names carry the meaning), and so does additionalProperties: false, which
// only a validator reads and a result never needs: without it, a result
// with next_action, or an error result, validates.
func leanEnvelope(s *jsonschema.Schema) {
	s.Description = ""
	s.AdditionalProperties = nil
	delete(s.Properties, "next_action")
	s.PropertyOrder = slices.DeleteFunc(s.PropertyOrder, func(n string) bool { return n == "next_action" })
	for name, p := range s.Properties {
		switch name {
		case "data":
			leanData(p)
		case "meta":
			s.Properties[name] = &jsonschema.Schema{Type: "object"}
		default:
			leanObject(p, false)
		}
	}
}

// leanData strips data: its fields are listed, and the rows of its one
// required list of objects.
func leanData(s *jsonschema.Schema) {
	var lists []string
	for name, p := range s.Properties {
		if p.Items != nil && p.Items.Properties != nil && slices.Contains(s.Required, name) {
			lists = append(lists, name)
		}
	}
	s.Description = ""
	s.AdditionalProperties = nil
	for name, p := range s.Properties {
		if !slices.Contains(s.Required, name) {
			dropNull(p)
		}
		if len(lists) == 1 && lists[0] == name {
			leanObject(p, true)
		} else {
			leanObject(p, false)
		}
	}
}

// leanObject strips s of descriptions and additionalProperties, and of the
// properties of every object in it; with fields, s's own (or, for a list,
// its rows') stay, stripped in turn. A property that may be left out
// (omitempty) is never null, so it loses "null"; a required one keeps it
// where Go may encode a nil.
func leanObject(s *jsonschema.Schema, fields bool) {
	s.Description = ""
	s.AdditionalProperties = nil
	if s.Items != nil {
		leanObject(s.Items, fields)
	}
	if s.Properties == nil {
		return
	}
	if !fields {
		s.Properties, s.PropertyOrder, s.Required = nil, nil, nil
		return
	}
	for name, p := range s.Properties {
		if !slices.Contains(s.Required, name) {
			dropNull(p)
		}
		leanObject(p, false)
	}
}

// allowErrors widens a result schema so that error results validate too:
// strict clients (the TypeScript SDK) check structuredContent against the
// output schema even when isError is set. Only summary and meta are always
// there; data is present on success, and code, message and retryable on
// errors.
func allowErrors(sc *jsonschema.Schema) {
	sc.Required = []string{"summary", "meta"}
}
