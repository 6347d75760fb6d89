package mcpshim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mailctl/mailctl/protocol"
)

// argumentsInvalid words arguments that fail a tool's input schema for the
// model that sent them: which argument is wrong, what it must be, and the
// arguments the tool takes, rather than the validator's schema paths
// ("validating root: validating /properties/limit: minimum: 0/1 ..."), which
// name neither the fix nor the other arguments. What it cannot place keeps
// the validator's words.
func argumentsInvalid(tool string, in *jsonschema.Schema, args map[string]any, err error) error {
	takes := argumentList(in)
	var unknown []string
	for k := range args {
		if in.Properties[k] == nil {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fail(protocol.CodeInvalidInput, "%s has no argument %s: leave it out; %s takes %s", tool, strings.Join(unknown, ", "), tool, takes)
	}
	var missing []string
	for _, k := range in.Required {
		if _, ok := args[k]; !ok {
			missing = append(missing, strconv.Quote(k))
		}
	}
	if len(missing) > 0 {
		return fail(protocol.CodeInvalidInput, "%s needs the argument %s; it takes %s", tool, strings.Join(missing, ", "), takes)
	}
	for _, k := range propertyOrder(in) {
		v, ok := args[k]
		if !ok {
			continue
		}
		one := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{k: in.Properties[k]}}
		r, rerr := one.Resolve(nil)
		if rerr != nil || r.Validate(map[string]any{k: v}) == nil {
			continue
		}
		return fail(protocol.CodeInvalidInput, "%s: the argument %s is %s; it must be %s", tool, k, clipJSON(v), describeSchema(in.Properties[k]))
	}
	return fail(protocol.CodeInvalidInput, "invalid arguments: %v", err)
}

// propertyOrder is the schema's properties in the order of the tool's
// parameters (the struct's fields), then any others by name.
func propertyOrder(in *jsonschema.Schema) []string {
	order := slices.Clone(in.PropertyOrder)
	var rest []string
	for k := range in.Properties {
		if !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(order, rest...)
}

// argumentList names the arguments a tool takes, optional ones with "?",
// as the tool headings of docs/mcp.md do.
func argumentList(in *jsonschema.Schema) string {
	var names []string
	for _, k := range propertyOrder(in) {
		if !slices.Contains(in.Required, k) {
			k += "?"
		}
		names = append(names, k)
	}
	if len(names) == 0 {
		return "no arguments"
	}
	return strings.Join(names, ", ")
}

// describeSchema says in words what a value of s must be.
func describeSchema(s *jsonschema.Schema) string {
	if len(s.Enum) > 0 {
		var vals []string
		for _, v := range s.Enum {
			vals = append(vals, fmt.Sprint(v))
		}
		return "one of " + strings.Join(vals, ", ")
	}
	types := s.Types
	if s.Type != "" {
		types = []string{s.Type}
	}
	var kinds []string
	for _, t := range types {
		switch t {
		case "integer":
			kinds = append(kinds, "a whole number")
		case "array":
			kinds = append(kinds, "a list")
		case "object":
			kinds = append(kinds, "an object")
		default:
			kinds = append(kinds, "a "+t)
		}
	}
	what := strings.Join(kinds, " or ")
	if what == "" {
		what = "a value"
	}
	var limits []string
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	if s.Minimum != nil {
		limits = append(limits, "at least "+num(*s.Minimum))
	}
	if s.Maximum != nil {
		limits = append(limits, "at most "+num(*s.Maximum))
	}
	if s.MinLength != nil && *s.MinLength > 0 {
		limits = append(limits, fmt.Sprintf("at least %d characters", *s.MinLength))
	}
	if s.MaxLength != nil {
		limits = append(limits, fmt.Sprintf("at most %d characters", *s.MaxLength))
	}
	if s.MaxItems != nil {
		limits = append(limits, fmt.Sprintf("at most %d items", *s.MaxItems))
	}
	if s.Pattern != "" {
		limits = append(limits, "matching "+s.Pattern)
	}
	if len(limits) > 0 {
		what += ", " + strings.Join(limits, ", ")
	}
	return what
}

// clipJSON is v as JSON, cut to a length a message can carry.
func clipJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "a value JSON cannot write"
	}
	if s := string(b); len(s) <= 60 {
		return s
	}
	n := 57
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}
