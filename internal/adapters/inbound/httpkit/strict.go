package httpkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
)

// DecodeStrictBody is DecodeBody for bodies whose every field matters (a
// bulk operation's filter, where a misspelt field would widen what it acts
// on): an unknown field is a 400 naming it, at its dotted path. An empty
// body decodes as {} when emptyOK is set.
func DecodeStrictBody(w http.ResponseWriter, r *http.Request, dst any, limit int64, emptyOK bool) bool {
	var raw json.RawMessage
	if emptyOK && r.ContentLength <= 0 {
		var peek [1]byte
		n, _ := io.ReadFull(r.Body, peek[:])
		if n == 0 {
			return true
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(peek[:n]), r.Body), r.Body}
	}
	if !DecodeBody(w, r, &raw, limit) {
		return false
	}
	if field := unknownField(raw, reflect.TypeOf(dst), ""); field != "" {
		WriteJSON(w, http.StatusBadRequest, ErrorBody{Error: "unknown field " + field, Field: field})
		return false
	}
	if msg, field := decodeJSON(raw, dst); msg != "" {
		WriteJSON(w, http.StatusBadRequest, ErrorBody{Error: msg, Field: field})
		return false
	}
	return true
}

// unknownField returns the dotted path of the first field (in name order)
// of the JSON object raw that the struct type t has no field for, looking
// into nested objects; "" when there is none.
func unknownField(raw json.RawMessage, t reflect.Type, prefix string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return "" // not an object: decoding reports the type
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ft, ok := jsonField(t, k)
		if !ok {
			return prefix + k
		}
		if f := unknownField(obj[k], ft, prefix+k+"."); f != "" {
			return f
		}
	}
	return ""
}

// jsonField is the type of t's field that JSON key k decodes into (by its
// tag, or its name case-insensitively as encoding/json matches).
func jsonField(t reflect.Type, k string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if strings.EqualFold(tag, k) {
			return f.Type, true
		}
	}
	return nil, false
}
