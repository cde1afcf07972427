package oteltrace_test

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver, as an OpenTelemetry Collector
// serves it on :4318: POST /v1/traces with a protobuf
// ExportTraceServiceRequest, answered with an ExportTraceServiceResponse.
type collector struct {
	*httptest.Server
	t *testing.T

	mu      sync.Mutex
	spans   []*tracepb.Span
	service map[string]string // service.name of the resource each span came with, by span id
	posts   int
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{t: t, service: map[string]string{}}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.Close)
	return c
}

// TracesURL is the endpoint an exporter is pointed at.
func (c *collector) TracesURL() string { return c.URL + "/v1/traces" }

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP traces request", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		c.t.Errorf("collector: Content-Type %q, want application/x-protobuf", ct)
		http.Error(w, "want protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		c.t.Errorf("collector: body does not decode as ExportTraceServiceRequest: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.posts++
	for _, rs := range req.GetResourceSpans() {
		svc := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s)
				c.service[hex.EncodeToString(s.GetSpanId())] = svc
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// named returns the spans received with the given name, in the order
// they started.
func (c *collector) named(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort by start time
		for k := i; k > 0 && out[k].GetStartTimeUnixNano() < out[k-1].GetStartTimeUnixNano(); k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// serviceOf is the service.name the span was exported under.
func (c *collector) serviceOf(s *tracepb.Span) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.service[hex.EncodeToString(s.GetSpanId())]
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func attrInt(kvs []*commonpb.KeyValue, key string) (int64, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue(), true
		}
	}
	return 0, false
}

func attrBool(kvs []*commonpb.KeyValue, key string) (bool, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetBoolValue(), true
		}
	}
	return false, false
}

func traceID(s *tracepb.Span) string  { return hex.EncodeToString(s.GetTraceId()) }
func spanID(s *tracepb.Span) string   { return hex.EncodeToString(s.GetSpanId()) }
func parentID(s *tracepb.Span) string { return hex.EncodeToString(s.GetParentSpanId()) }
func hexOf(b []byte) string           { return hex.EncodeToString(b) }
