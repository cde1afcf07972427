package domain_test

import (
	"bufio"
	"bytes"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Seed corpus: testdata/fuzz/FuzzJobRequestValidate. Plain `go test` replays
// it; explore with
//
//	go test -run '^$' -fuzz FuzzJobRequestValidate -fuzztime 60s ./internal/domain/

// fuzzHeaders builds a header map from a block of entries separated by
// "\x1e", each "name\x1fvalue", so names and values can hold any byte the
// fuzzer likes (colons, newlines, NULs) while the block stays one string.
func fuzzHeaders(block string) map[string]string {
	if block == "" {
		return nil
	}
	h := map[string]string{}
	for entry := range strings.SplitSeq(block, "\x1e") {
		name, value, _ := strings.Cut(entry, "\x1f")
		h[name] = value
	}
	return h
}

// validateFields are the fields a validation error may name.
var validateFields = map[string]bool{
	"id": true, "user_id": true, "idempotent_key": true, "url": true, "pool_id": true,
	"method": true, "webhook_url": true, "headers": true,
}

func FuzzJobRequestValidate(f *testing.F) {
	f.Fuzz(func(t *testing.T, id, userID, key, rawURL, poolID, method, headerBlock, webhook, body string) {
		orig := domain.JobRequest{
			ID: domain.JobID(id), UserID: userID, IdempotentKey: key, URL: rawURL, PoolID: poolID,
			Method: method, Headers: fuzzHeaders(headerBlock), Body: body, WebhookURL: webhook,
		}
		r := orig
		r.Headers = maps.Clone(orig.Headers)
		err := r.Validate()

		// Validation is a pure function of the request: a fresh copy gets the
		// same verdict (the same field; the same message unless several
		// headers are wrong, which map order may report in either order).
		again := orig
		again.Headers = maps.Clone(orig.Headers)
		err2 := again.Validate()
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Validate not deterministic: %v then %v", err, err2)
		}
		if err != nil {
			checkRejection(t, err, err2)
			return
		}
		checkSane(t, &orig, &r)

		// Idempotent: validating a validated request changes nothing.
		before := r
		before.Headers = maps.Clone(r.Headers)
		if err := r.Validate(); err != nil {
			t.Fatalf("second Validate of an accepted request: %v", err)
		}
		if r.Method != before.Method || r.Upstream() != before.Upstream() || !maps.Equal(r.Headers, before.Headers) {
			t.Fatalf("second Validate changed the request: %+v -> %+v", before, r)
		}
	})
}

func checkRejection(t *testing.T, err, err2 error) {
	t.Helper()
	var de, de2 *domain.Error
	if !errors.As(err, &de) || !errors.As(err2, &de2) {
		t.Fatalf("error %v (%T) is not a *domain.Error", err, err)
	}
	if de.Code != domain.CodeInvalid || domain.CodeOf(err) != domain.CodeInvalid {
		t.Fatalf("code %q, want invalid (%v)", de.Code, err)
	}
	if !validateFields[de.Field] {
		t.Fatalf("field %q is not a request field (%v)", de.Field, err)
	}
	if de.Message == "" || !utf8.ValidString(de.Message) || domain.PublicMessage(err) != de.Message {
		t.Fatalf("message %q is not a usable public message", de.Message)
	}
	if de.Field != de2.Field || (de.Field != "headers" && de.Message != de2.Message) {
		t.Fatalf("Validate not deterministic: %v (%s) then %v (%s)", err, de.Field, err2, de2.Field)
	}
}

// checkSane asserts what an accepted request guarantees: every documented
// rule of POST /jobs holds, only the method was normalised, and the request
// can be put on the wire.
func checkSane(t *testing.T, orig, r *domain.JobRequest) {
	t.Helper()
	if r.ID != orig.ID || r.UserID != orig.UserID || r.IdempotentKey != orig.IdempotentKey || r.URL != orig.URL ||
		r.PoolID != orig.PoolID || r.Body != orig.Body || r.WebhookURL != orig.WebhookURL || !maps.Equal(r.Headers, orig.Headers) {
		t.Fatalf("Validate changed more than the method: %+v -> %+v", orig, r)
	}
	if r.ID != "" && !domain.ValidJobID(string(r.ID)) {
		t.Fatalf("accepted id %q", r.ID)
	}
	checkText(t, "user_id", r.UserID, domain.MaxUserIDLen)
	checkText(t, "idempotent_key", r.IdempotentKey, domain.MaxIdempotentKeyLen)

	if (r.URL == "") == (r.PoolID == "") {
		t.Fatalf("accepted url %q with pool_id %q: want exactly one", r.URL, r.PoolID)
	}
	if r.URL != "" {
		u := checkTargetURL(t, "url", r.URL)
		checkUpstream(t, r.Upstream(), u)
	} else {
		checkPoolID(t, r.PoolID)
		if r.Upstream() != domain.PoolUpstream(r.PoolID) || !r.Upstream().IsPool() || r.Upstream().PoolID() != r.PoolID {
			t.Fatalf("pool %q: upstream %q", r.PoolID, r.Upstream())
		}
	}
	if r.WebhookURL != "" {
		checkTargetURL(t, "webhook_url", r.WebhookURL)
	}

	wantMethod := strings.ToUpper(orig.Method)
	if wantMethod == "" {
		wantMethod = http.MethodGet
	}
	if r.Method != wantMethod || len(r.Method) > domain.MaxMethodLen || !isTokenRef(r.Method) || r.Method == http.MethodConnect {
		t.Fatalf("accepted method %q (sent %q)", r.Method, orig.Method)
	}
	checkHeaders(t, r.Headers)
	if r.URL != "" {
		checkWire(t, r)
	}
}

func checkText(t *testing.T, field, s string, max int) {
	t.Helper()
	if strings.TrimSpace(s) == "" || len(s) > max || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		t.Fatalf("accepted %s %q", field, s)
	}
}

// checkTargetURL re-derives the URL rules with the standard library alone.
func checkTargetURL(t *testing.T, field, raw string) *url.URL {
	t.Helper()
	if len(raw) > domain.MaxURLLen || !utf8.ValidString(raw) || strings.ContainsAny(raw, " \t\r\n\x00") {
		t.Fatalf("accepted %s %q: length, encoding or whitespace", field, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("accepted %s %q that url.Parse refuses: %v", field, raw, err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		t.Fatalf("accepted %s %q with scheme %q", field, raw, u.Scheme)
	}
	if u.Hostname() == "" || u.User != nil {
		t.Fatalf("accepted %s %q: host %q, userinfo %v", field, raw, u.Hostname(), u.User)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			t.Fatalf("accepted %s %q with port %q", field, raw, p)
		}
	}
	if _, err := http.NewRequest(http.MethodGet, raw, nil); err != nil {
		t.Fatalf("accepted %s %q that http.NewRequest refuses: %v", field, raw, err)
	}
	return u
}

// checkUpstream asserts the lane key of an accepted URL: its scheme, a
// non-empty host and a port in range.
func checkUpstream(t *testing.T, k domain.UpstreamKey, u *url.URL) {
	t.Helper()
	scheme := strings.ToLower(u.Scheme)
	if !strings.HasPrefix(string(k), scheme+"://") || k.IsPool() {
		t.Fatalf("url %q: upstream %q", u, k)
	}
	hostPort, host := k.Host()
	_, port, err := netSplit(hostPort)
	if host == "" || err != nil {
		t.Fatalf("url %q: upstream %q has no host (%q, %v)", u, k, hostPort, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		t.Fatalf("url %q: upstream %q has port %q", u, k, port)
	}
}

func netSplit(hostPort string) (string, string, error) {
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return "", "", errors.New("no port")
	}
	return hostPort[:i], hostPort[i+1:], nil
}

func checkPoolID(t *testing.T, id string) {
	t.Helper()
	if id == "" || len(id) > domain.MaxPoolIDLen {
		t.Fatalf("accepted pool_id %q", id)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			t.Fatalf("accepted pool_id %q", id)
		}
	}
}

var hopByHopRef = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer", "Content-Length"}

func checkHeaders(t *testing.T, h map[string]string) {
	t.Helper()
	if len(h) > domain.MaxHeaders {
		t.Fatalf("accepted %d headers", len(h))
	}
	seen := map[string]bool{}
	for name, value := range h {
		canon := http.CanonicalHeaderKey(name)
		if name == "" || len(name) > domain.MaxHeaderNameLen || !isTokenRef(name) || seen[canon] {
			t.Fatalf("accepted header name %q", name)
		}
		seen[canon] = true
		for _, hop := range hopByHopRef {
			if canon == hop {
				t.Fatalf("accepted hop-by-hop header %q", name)
			}
		}
		if len(value) > domain.MaxHeaderValueLen {
			t.Fatalf("accepted a %d-byte value for %q", len(value), name)
		}
		for _, c := range []byte(value) {
			if c < 0x20 && c != '\t' || c == 0x7f {
				t.Fatalf("accepted header %q value %q with a control character", name, value)
			}
		}
	}
}

// isTokenRef is RFC 9110's token, written independently of the domain's.
func isTokenRef(s string) bool {
	const tchar = "!#$%&'*+-.^_`|~"
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(tchar, c) >= 0) {
			return false
		}
	}
	return s != ""
}

// checkWire writes the accepted request as HTTP/1.1 and parses it back: the
// method and every header (Host aside, which sets the request's host and is
// only checked when it is sent) survive the trip.
func checkWire(t *testing.T, r *domain.JobRequest) {
	t.Helper()
	req, err := http.NewRequest(r.Method, r.URL, strings.NewReader(r.Body))
	if err != nil {
		t.Fatalf("http.NewRequest(%q, %q): %v", r.Method, r.URL, err)
	}
	for k, v := range r.Headers {
		if http.CanonicalHeaderKey(k) == "Host" {
			return // a Host value is checked by the transport when the job is sent
		}
		req.Header.Set(k, v)
	}
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatalf("accepted request cannot be written: %v", err)
	}
	back, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatalf("accepted request does not parse back: %v\n%q", err, buf.String())
	}
	if back.Method != r.Method {
		t.Fatalf("method %q came back as %q", r.Method, back.Method)
	}
	for k, v := range r.Headers {
		if got := back.Header.Get(k); got != strings.Trim(v, " \t") {
			t.Fatalf("header %q: sent %q, parsed back %q", k, v, got)
		}
	}
}

// TestValidateRefusesWhatFuzzingFound keeps the fuzzer's finds as named
// cases: a host that is only a dot had no lane ("" upstream), and port
// "00000" is port 0.
func TestValidateRefusesWhatFuzzingFound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, msg string }{
		{"http://./", "url must include a host"},
		{"https://.:443/x", "url must include a host"},
		{"http://example.com:00000/", "url has an invalid port"},
		{"http://example.com:000/", "url has an invalid port"},
	} {
		r := domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: c.url}
		if err := r.Validate(); err == nil || err.Error() != c.msg {
			t.Errorf("%s: %v, want %q", c.url, err, c.msg)
		}
		r = domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://a/", WebhookURL: c.url}
		if err := r.Validate(); err == nil || err.Error() != strings.Replace(c.msg, "url", "webhook_url", 1) {
			t.Errorf("webhook %s: %v", c.url, err)
		}
	}
	r := domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://example.com:00080/"}
	if err := r.Validate(); err != nil || r.Upstream() != "http://example.com:80" {
		t.Errorf("leading zeros in a valid port: %v, upstream %q", err, r.Upstream())
	}
}
