package httpkit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Seed corpus: testdata/fuzz/FuzzDecodeJobRequest. Plain `go test` replays
// it; explore with
//
//	go test -run '^$' -fuzz FuzzDecodeJobRequest -fuzztime 60s ./internal/adapters/inbound/httpkit/

// fuzzLimits are the body limits a case runs under, picked by mode.
var fuzzLimits = [...]int64{0, 256, 4096}

// FuzzDecodeJobRequest feeds raw bodies through POST /jobs's path up to the
// store: DecodeBody, ToDomain, Validate. Nothing panics, every rejection is
// a 4xx with a JSON {"error": …} body, and what is accepted is exactly what
// encoding/json makes of the body.
func FuzzDecodeJobRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte, mode uint8, accountQueue string) {
		limit := fuzzLimits[int(mode)%len(fuzzLimits)]
		r := httptest.NewRequest(http.MethodPost, "/jobs", bytes.NewReader(body))
		if mode&0x10 != 0 {
			r.ContentLength = -1 // as for a chunked body: the limit is found while reading
		}
		if accountQueue != "" {
			r.Header["X-Aqueduct-Account-Queue"] = []string{accountQueue}
		}
		w := httptest.NewRecorder()
		var in httpkit.JobRequestJSON
		if !httpkit.DecodeBody(w, r, &in, limit) {
			status, msg := checkErrorResponse(t, w)
			tooBig := limit > 0 && int64(len(body)) > limit
			switch {
			case status == http.StatusRequestEntityTooLarge && !tooBig:
				t.Fatalf("413 for %d bytes under limit %d", len(body), limit)
			case status == http.StatusBadRequest && tooBig:
				t.Fatalf("400 %q for %d bytes over limit %d", msg, len(body), limit)
			case status == http.StatusBadRequest && decodesAsObject(body):
				t.Fatalf("400 %q for a body encoding/json decodes: %q", msg, body)
			case status == http.StatusBadRequest && !strings.HasPrefix(msg, "invalid json: "):
				t.Fatalf("400 %q does not say the JSON is invalid", msg)
			}
			return
		}
		if limit > 0 && int64(len(body)) > limit {
			t.Fatalf("accepted %d bytes over limit %d", len(body), limit)
		}
		if w.Code != http.StatusOK || w.Body.Len() != 0 {
			t.Fatalf("DecodeBody succeeded but wrote %d %q", w.Code, w.Body.String())
		}
		// JSON text is UTF-8 (RFC 8259 §8.1). encoding/json would quietly turn
		// invalid bytes into U+FFFD, so distinct user_ids and keys could
		// collapse into one and the domain's UTF-8 checks never see them.
		if !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not valid UTF-8: %q", body)
		}
		var ref httpkit.JobRequestJSON
		if err := json.Unmarshal(bytes.TrimSpace(body), &ref); err != nil {
			t.Fatalf("accepted a body encoding/json refuses (%v): %q", err, body)
		}
		if !reflect.DeepEqual(in, ref) {
			t.Fatalf("decoded %+v, encoding/json says %+v", in, ref)
		}

		req := in.ToDomain(r.Header)
		if want := accountQueueRef(accountQueue); req.AccountQueue != want {
			t.Fatalf("account queue %q: mode %v, want %v", accountQueue, req.AccountQueue, want)
		}
		err := req.Validate()
		if err == nil {
			return
		}
		w = httptest.NewRecorder()
		httpkit.WriteDomainError(w, r, zap.NewNop(), err)
		status, _ := checkErrorResponse(t, w)
		if status != http.StatusBadRequest {
			t.Fatalf("validation error %v answered %d", err, status)
		}
		var de *domain.Error
		if !errors.As(err, &de) || de.Field == "" {
			t.Fatalf("validation error %v names no field", err)
		}
		var eb struct {
			Field string `json:"field"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		if eb.Field != de.Field {
			t.Fatalf("error body field %q, want %q", eb.Field, de.Field)
		}
	})
}

// checkErrorResponse asserts a 4xx answer whose body is one JSON object with
// a non-empty "error" string and nothing but the documented keys.
func checkErrorResponse(t *testing.T, w *httptest.ResponseRecorder) (int, string) {
	t.Helper()
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("status %d, want 4xx; body %q", w.Code, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("error body is not a JSON object (%v): %q", err, w.Body.String())
	}
	msg, _ := m["error"].(string)
	if msg == "" {
		t.Fatalf("error body without an error message: %q", w.Body.String())
	}
	for k := range m {
		if k != "error" && k != "field" && k != "limit_bytes" {
			t.Fatalf("error body has key %q: %q", k, w.Body.String())
		}
	}
	return w.Code, msg
}

// decodesAsObject reports whether body is UTF-8 that encoding/json decodes
// (surrounding whitespace aside) as one JSON object into the wire type.
func decodesAsObject(body []byte) bool {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !utf8.Valid(body) {
		return false
	}
	var v httpkit.JobRequestJSON
	return json.Unmarshal(trimmed, &v) == nil
}

func accountQueueRef(v string) domain.AccountQueueMode {
	switch v {
	case "":
		return domain.AccountQueueUnchanged
	case "enabled":
		return domain.AccountQueueEnabled
	}
	return domain.AccountQueueDisabled
}
