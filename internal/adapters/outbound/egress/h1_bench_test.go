package egress

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkTransport sends POSTs with a ~200 byte JSON body to a loopback
// net/http server through each transport, one after the other on one
// goroutine, the body read and closed each time. The server's cost is in
// both numbers.
func BenchmarkTransport(b *testing.B) {
	srv, body := benchServer(b)
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"net-http", newTransport(Options{MaxIdleConnsPerHost: 16}, loopbackDial)},
		{"h1", &h1Transport{dial: loopbackDial, maxIdle: 16, idleTimeout: idleConnTimeout, staleAfter: staleCheckAfter}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{Transport: bc.rt}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, srv.URL+"/jobs", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				exchange(b, client.Do, req)
			}
		})
	}
}

// BenchmarkClientDo sends the same POSTs as BenchmarkTransport through
// Aquifer's HTTP/1.1 transport, with the headers of a dispatch (the job's
// two, the six load headers and the ORCA format), once through net/http's
// Client.Do and once through Client.Do, which leaves out net/http's copy of
// the request for redirects.
func BenchmarkClientDo(b *testing.B) {
	srv, body := benchServer(b)
	c := NewClient(Options{Dial: loopbackDial})
	defer c.CloseIdleConnections()
	for _, bc := range []struct {
		name string
		do   func(*http.Request) (*http.Response, error)
	}{
		{"net-http-Client.Do", c.Client.Do},
		{"Client.Do", c.Do},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, srv.URL+"/jobs", bytes.NewReader(body))
				req.Header = http.Header{
					"Content-Type":                 {"application/json"},
					"Authorization":                {"Bearer t"},
					"X-Aqueduct-Total-Jobs":        {"10"},
					"X-Aqueduct-Queue-Depth":       {"3"},
					"X-Aqueduct-Flow-Rate":         {"100"},
					"X-Aquifer-Total-Jobs":         {"10"},
					"X-Aquifer-Queue-Depth":        {"3"},
					"X-Aquifer-Flow-Rate":          {"100"},
					"Endpoint-Load-Metrics-Format": {"text"},
				}
				exchange(b, bc.do, req)
			}
		})
	}
}

// benchServer starts the benchmarks' loopback server, which reads each
// request's body and answers a small JSON object, and returns it with the
// ~200 byte JSON body the benchmarks send.
func benchServer(b *testing.B) (*httptest.Server, []byte) {
	body := bytes.Repeat([]byte(`{"k":"v"},`), 20) // 200 bytes
	body[0], body[len(body)-1] = '[', ']'
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	b.Cleanup(srv.Close)
	return srv, body
}

// exchange sends req with do and reads and closes the answer's body.
func exchange(b *testing.B, do func(*http.Request) (*http.Response, error), req *http.Request) {
	resp, err := do(req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
}
