package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK validates a tool call's arguments against the tool's input schema
// before the handler runs, and its refusals are a validator's text
// ("validating root: validating /properties/wait_seconds: minimum: -1/1 is
// less than 0.000000"). checkArgs runs first, against the same schemas, and
// says in words what is wrong, naming the argument, as the REST API does.

// schemaFor is the input schema inferred for T, as the SDK would infer it;
// the tool is registered with it so that both check the same thing.
func schemaFor[T any]() *jsonschema.Schema {
	sch, err := jsonschema.For[T](nil)
	if err != nil {
		panic("mcp: input schema: " + err.Error()) // a programming error, caught by every test
	}
	return sch
}

// checkArgs is receiving middleware: a tools/call whose arguments do not fit
// the tool's input schema is answered with a tool error in words.
func (s *Server) checkArgs(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if call, ok := req.(*sdk.CallToolRequest); ok && method == "tools/call" && call.Params != nil {
			if sch := s.inputs[call.Params.Name]; sch != nil {
				if err := checkArguments(call.Params.Name, sch, call.Params.Arguments); err != nil {
					res := &sdk.CallToolResult{}
					res.SetError(err)
					return res, nil
				}
			}
		}
		res, err := next(ctx, method, req)
		if r, ok := res.(*sdk.CallToolResult); ok && err == nil && r.IsError {
			rewordSchemaError(r)
		}
		return res, err
	}
}

// rewordSchemaError is the fallback for a refusal checkArguments did not
// foresee: it says the arguments were invalid instead of leading with the
// validator's jargon.
func rewordSchemaError(r *sdk.CallToolResult) {
	if len(r.Content) != 1 {
		return
	}
	tc, ok := r.Content[0].(*sdk.TextContent)
	if !ok {
		return
	}
	if rest, ok := strings.CutPrefix(tc.Text, `validating "arguments": `); ok {
		tc.Text = "invalid arguments (they do not match the tool's input schema): " +
			strings.TrimPrefix(rest, "validating root: ")
	}
}

// checkArguments checks raw, a tool call's arguments, against sch: an
// object with the required properties, no unknown ones, each of its type
// and within its bounds. The error names the argument.
func checkArguments(tool string, sch *jsonschema.Schema, raw json.RawMessage) error {
	args := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if t[0] != '{' || json.Unmarshal(t, &args) != nil {
			return errors.New("invalid arguments: the arguments must be a JSON object")
		}
	}
	var missing []string
	for _, name := range sch.Required {
		if _, ok := args[name]; !ok {
			missing = append(missing, name)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		return fmt.Errorf("invalid %s: %s is required", missing[0], missing[0])
	default:
		return fmt.Errorf("invalid arguments: %s are required", list(missing))
	}
	names := propertyNames(sch)
	for _, name := range sortedKeys(args) {
		p := sch.Properties[name]
		if p == nil {
			if closed(sch.AdditionalProperties) {
				if len(names) == 0 {
					return fmt.Errorf("invalid arguments: %s takes no arguments; %s is unknown", tool, name)
				}
				return fmt.Errorf("invalid arguments: unknown argument %s; %s takes %s", name, tool, list(names))
			}
			continue
		}
		if err := checkValue(name, p, args[name]); err != nil {
			return fmt.Errorf("invalid %s: %w", name, err)
		}
	}
	return nil
}

// checkValue checks one argument's value against its schema.
func checkValue(name string, p *jsonschema.Schema, raw json.RawMessage) error {
	kind := kindOf(raw)
	want := types(p)
	if len(want) > 0 && !slices.Contains(want, kind) && !(kind == "integer" && slices.Contains(want, "number")) {
		if kind == "number" && slices.Contains(want, "integer") {
			return fmt.Errorf("%s must be a whole number (digits only), not %s", name, raw)
		}
		return fmt.Errorf("%s must be %s, not %s", name, article(wanted(want)), met(kind))
	}
	switch kind {
	case "integer", "number":
		return checkNumber(name, p, raw, kind)
	case "string":
		return checkEnum(name, p, raw)
	case "array":
		if p.Items == nil {
			return nil
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("%s must be an array", name)
		}
		it := types(p.Items)
		for i, item := range items {
			if got := kindOf(item); len(it) > 0 && !slices.Contains(it, got) {
				return fmt.Errorf("every item of %s must be %s; item %d is %s", name, article(it[0]), i+1, met(got))
			}
			if err := checkEnum(fmt.Sprintf("item %d of %s", i+1, name), p.Items, item); err != nil {
				return err
			}
		}
	case "object":
		if p.AdditionalProperties == nil {
			return nil
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%s must be an object", name)
		}
		vt := types(p.AdditionalProperties)
		for _, k := range sortedKeys(m) {
			if got := kindOf(m[k]); len(vt) > 0 && !slices.Contains(vt, got) {
				return fmt.Errorf("every value of %s must be %s; the value of %q is %s", name, article(vt[0]), k, met(got))
			}
		}
	}
	return nil
}

// checkEnum checks a string against the schema's allowed values, if any.
func checkEnum(name string, p *jsonschema.Schema, raw json.RawMessage) error {
	if len(p.Enum) == 0 {
		return nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("%s must be a string", name)
	}
	allowed := make([]string, 0, len(p.Enum))
	for _, e := range p.Enum {
		if e == v {
			return nil
		}
		allowed = append(allowed, fmt.Sprint(e))
	}
	return fmt.Errorf("%s must be one of %s, not %q", name, orList(allowed), v)
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// checkNumber checks a number's bounds, and that an integer fits in 64
// bits (the field it decodes into).
func checkNumber(name string, p *jsonschema.Schema, raw json.RawMessage, kind string) error {
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) {
		return fmt.Errorf("the number %s is out of range", raw)
	}
	if kind == "integer" && slices.Contains(types(p), "integer") {
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return fmt.Errorf("the number %s is out of range", raw)
		}
	}
	if p.Minimum != nil && f < *p.Minimum {
		return fmt.Errorf("%s must be at least %s, not %s", name, num(*p.Minimum), raw)
	}
	if p.ExclusiveMinimum != nil && f <= *p.ExclusiveMinimum {
		return fmt.Errorf("%s must be more than %s, not %s", name, num(*p.ExclusiveMinimum), raw)
	}
	if p.Maximum != nil && f > *p.Maximum {
		return fmt.Errorf("%s must be at most %s, not %s", name, num(*p.Maximum), raw)
	}
	if p.ExclusiveMaximum != nil && f >= *p.ExclusiveMaximum {
		return fmt.Errorf("%s must be less than %s, not %s", name, num(*p.ExclusiveMaximum), raw)
	}
	return nil
}

// kindOf is the JSON Schema type of a JSON value: a number without a
// fraction or exponent is an integer.
func kindOf(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "null"
	}
	switch t[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(t, ".eE") {
		return "number"
	}
	return "integer"
}

// wanted is the type to name in a message: the first one that is not
// null (a Go slice or pointer is "null or array"; null is rarely meant).
func wanted(types []string) string {
	for _, t := range types {
		if t != "null" {
			return t
		}
	}
	return types[0]
}

func types(p *jsonschema.Schema) []string {
	if p.Type != "" {
		return []string{p.Type}
	}
	return p.Types
}

// closed reports whether an additionalProperties schema admits nothing
// ({"not":{}}, which jsonschema.For writes for structs, or false).
func closed(p *jsonschema.Schema) bool {
	return p != nil && p.Not != nil && isEmpty(p.Not)
}

func isEmpty(p *jsonschema.Schema) bool {
	b, err := json.Marshal(p)
	return err == nil && (string(b) == "{}" || string(b) == "true")
}

func propertyNames(sch *jsonschema.Schema) []string {
	if len(sch.PropertyOrder) > 0 {
		return sch.PropertyOrder
	}
	return sortedKeys(sch.Properties)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// list joins names as "a, b and c".
func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// article names a JSON Schema type for a sentence: "a string", "an object".
func article(kind string) string {
	switch kind {
	case "integer":
		return "a whole number"
	case "null":
		return "null"
	case "object", "array":
		return "an " + kind
	}
	return "a " + kind
}

// met names the type of a value met where another was wanted: 7 is "a
// number", whatever the schema calls it.
func met(kind string) string {
	if kind == "integer" {
		return "a number"
	}
	return article(kind)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
