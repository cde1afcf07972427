package httpkit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/domain"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// decodeRequest runs a body through POST /jobs's decoding: DecodeBody, then
// Request. It returns the request, or the 400's field and message.
func decodeRequest(t *testing.T, body string, hdr http.Header) (*domain.JobRequest, string, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/jobs", bytes.NewReader([]byte(body)))
	for k, v := range hdr {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	var in httpkit.JobRequestJSON
	if !httpkit.DecodeBody(w, r, &in, 0) {
		var eb httpkit.ErrorBody
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		return nil, eb.Field, eb.Error
	}
	req, err := in.Request(r.Header)
	if err != nil {
		var de *domain.Error
		if !errors.As(err, &de) {
			t.Fatalf("Request error %v is no *domain.Error", err)
		}
		return nil, de.Field, de.Message
	}
	return req, "", ""
}

// TestDecodeJobOptions checks every option field reaches the domain request.
func TestDecodeJobOptions(t *testing.T) {
	req, field, msg := decodeRequest(t, `{"user_id":"u","idempotent_key":"k","url":"http://127.0.0.1/",
		"not_before":"2026-12-01T15:04:05.123+01:00","max_wait_seconds":30,"priority":"low",
		"retry":{"max_attempts":3,"backoff_seconds":0.5,"max_backoff_seconds":8},"timeout_seconds":2,
		"traceparent":"`+tp+`","tracestate":"a=b"}`, nil)
	if req == nil {
		t.Fatalf("refused: %s %s", field, msg)
	}
	o := req.Options
	want := time.Date(2026, 12, 1, 14, 4, 5, 123e6, time.UTC)
	if !o.NotBefore.Equal(want) || o.DelaySeconds != nil || !o.Deadline.IsZero() || o.MaxWaitSeconds == nil || *o.MaxWaitSeconds != 30 ||
		o.Priority != "low" || o.Retry == nil || *o.Retry.MaxAttempts != 3 || *o.Retry.BackoffSeconds != 0.5 ||
		*o.Retry.MaxBackoffSeconds != 8 || *o.TimeoutSeconds != 2 || o.TraceParent != tp || o.TraceState != "a=b" {
		t.Fatalf("options %+v", o)
	}
	req, _, _ = decodeRequest(t, `{"not_before":1796011882778,"deadline":"1796011999000","delay_seconds":null}`, nil)
	if req == nil || req.Options.NotBefore.UnixMilli() != 1796011882778 || req.Options.Deadline.UnixMilli() != 1796011999000 || req.Options.DelaySeconds != nil {
		t.Fatalf("Unix milliseconds: %+v", req)
	}
	if req, _, _ = decodeRequest(t, `{"not_before":null,"deadline":""}`, nil); req == nil || !req.Options.NotBefore.IsZero() || !req.Options.Deadline.IsZero() {
		t.Fatalf("null and empty times are not given: %+v", req)
	}
}

// TestDecodeJobOptionErrors checks that a malformed option is a 400 naming
// its field, at the decoding step that finds it.
func TestDecodeJobOptionErrors(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"not_before":false}`, "not_before"},
		{`{"deadline":{"at":1}}`, "deadline"},
		{`{"not_before":"yesterday"}`, "not_before"},
		{`{"deadline":-5}`, "deadline"},
		{`{"delay_seconds":"5"}`, "delay_seconds"},
		{`{"retry":[]}`, "retry"},
		{`{"retry":{"backoff_seconds":true}}`, "retry.backoff_seconds"},
		{`{"retry":{"max_attempts":1.5}}`, "retry.max_attempts"},
		{`{"priority":2}`, "priority"},
		{`{"traceparent":1}`, "traceparent"},
	} {
		req, field, msg := decodeRequest(t, c.body, nil)
		if req != nil || field != c.field || msg == "" {
			t.Errorf("%s: field %q (%s), want %q", c.body, field, msg, c.field)
		}
	}
}

// TestTraceHeaders checks the W3C request headers: used without a body
// traceparent, the body's winning, invalid ones ignored.
func TestTraceHeaders(t *testing.T) {
	h := http.Header{"Traceparent": {tp}, "Tracestate": {"a=1", "b=2"}}
	if req, _, _ := decodeRequest(t, `{}`, h); req.Options.TraceParent != tp || req.Options.TraceState != "a=1,b=2" {
		t.Fatalf("from headers: %+v", req.Options)
	}
	const other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	if req, _, _ := decodeRequest(t, `{"traceparent":"`+other+`"}`, h); req.Options.TraceParent != other || req.Options.TraceState != "" {
		t.Fatalf("body wins: %+v", req.Options)
	}
	for _, bad := range []http.Header{
		{"Traceparent": {"00-zz"}},
		{"Traceparent": {tp, tp}},
		{"Traceparent": {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
	} {
		if p, s := httpkit.TraceHeaders(bad); p != "" || s != "" {
			t.Errorf("headers %v: %q %q, want ignored", bad, p, s)
		}
	}
	if p, s := httpkit.TraceHeaders(http.Header{"Traceparent": {tp}, "Tracestate": {"no-equals"}}); p != tp || s != "" {
		t.Errorf("invalid tracestate header: %q %q, want the traceparent alone", p, s)
	}
}
