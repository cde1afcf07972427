package domain_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// validRequest returns a request that passes Validate; cases mutate a copy.
func validRequest() domain.JobRequest {
	return domain.JobRequest{
		UserID:        "user-1",
		IdempotentKey: "key-1",
		URL:           "https://api.example.com/v1/things?x=1",
		Method:        "POST",
		Headers:       map[string]string{"Content-Type": "application/json"},
		Body:          `{"a":1}`,
	}
}

// wantInvalid asserts err is a *domain.Error with CodeInvalid, the given field
// and exactly the given message.
func wantInvalid(t *testing.T, err error, field, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s error %q", field, msg)
	}
	var de *domain.Error
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *domain.Error", err, err)
	}
	if de.Code != domain.CodeInvalid {
		t.Errorf("Code = %q, want %q", de.Code, domain.CodeInvalid)
	}
	if de.Field != field {
		t.Errorf("Field = %q, want %q (message %q)", de.Field, field, de.Message)
	}
	if de.Message != msg {
		t.Errorf("Message = %q, want %q", de.Message, msg)
	}
	if err.Error() != msg {
		t.Errorf("Error() = %q, want %q", err.Error(), msg)
	}
}

func TestJobRequestValidateRejects(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name  string
		mod   func(r *domain.JobRequest)
		field string
		msg   string
	}{
		// user_id
		{"user_id empty", func(r *domain.JobRequest) { r.UserID = "" }, "user_id", "user_id is required"},
		{"user_id blank", func(r *domain.JobRequest) { r.UserID = "   " }, "user_id", "user_id is required"},
		{"user_id whitespace only", func(r *domain.JobRequest) { r.UserID = "\t\r\n" }, "user_id", "user_id is required"},
		{"user_id too long", func(r *domain.JobRequest) { r.UserID = long(domain.MaxUserIDLen + 1) }, "user_id", "user_id is longer than 256 bytes"},
		{"user_id too long in bytes not runes", func(r *domain.JobRequest) { r.UserID = strings.Repeat("é", 129) }, "user_id", "user_id is longer than 256 bytes"},
		{"user_id invalid utf8", func(r *domain.JobRequest) { r.UserID = "ab\xffcd" }, "user_id", "user_id is not valid UTF-8"},
		{"user_id truncated utf8", func(r *domain.JobRequest) { r.UserID = "ab\xc3" }, "user_id", "user_id is not valid UTF-8"},
		{"user_id NUL", func(r *domain.JobRequest) { r.UserID = "a\x00b" }, "user_id", "user_id contains control characters"},
		{"user_id LF", func(r *domain.JobRequest) { r.UserID = "a\nb" }, "user_id", "user_id contains control characters"},
		{"user_id CR", func(r *domain.JobRequest) { r.UserID = "a\rb" }, "user_id", "user_id contains control characters"},
		{"user_id tab", func(r *domain.JobRequest) { r.UserID = "a\tb" }, "user_id", "user_id contains control characters"},
		{"user_id ESC", func(r *domain.JobRequest) { r.UserID = "a\x1bb" }, "user_id", "user_id contains control characters"},
		{"user_id C1 control NEL", func(r *domain.JobRequest) { r.UserID = "a\u0085b" }, "user_id", "user_id contains control characters"},
		{"user_id DEL", func(r *domain.JobRequest) { r.UserID = "a\x7fb" }, "user_id", "user_id contains control characters"},

		// idempotent_key
		{"idempotent_key empty", func(r *domain.JobRequest) { r.IdempotentKey = "" }, "idempotent_key", "idempotent_key is required"},
		{"idempotent_key blank", func(r *domain.JobRequest) { r.IdempotentKey = " \t " }, "idempotent_key", "idempotent_key is required"},
		{"idempotent_key too long", func(r *domain.JobRequest) { r.IdempotentKey = long(domain.MaxIdempotentKeyLen + 1) }, "idempotent_key", "idempotent_key is longer than 512 bytes"},
		{"idempotent_key invalid utf8", func(r *domain.JobRequest) { r.IdempotentKey = "\xfe" + "k" }, "idempotent_key", "idempotent_key is not valid UTF-8"},
		{"idempotent_key CR", func(r *domain.JobRequest) { r.IdempotentKey = "k\r" }, "idempotent_key", "idempotent_key contains control characters"},
		{"idempotent_key DEL", func(r *domain.JobRequest) { r.IdempotentKey = "\x7fk" }, "idempotent_key", "idempotent_key contains control characters"},

		// url / pool_id presence
		{"neither url nor pool_id", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "" }, "url", "either url or pool_id is required"},
		{"both url and pool_id", func(r *domain.JobRequest) { r.PoolID = "pool-1" }, "url", "url and pool_id are mutually exclusive — a job dispatches to one or the other"},

		// url
		{"url too long", func(r *domain.JobRequest) { r.URL = "https://x.com/" + long(domain.MaxURLLen) }, "url", "url is longer than 8192 bytes"},
		{"url with space", func(r *domain.JobRequest) { r.URL = "https://x.com/a b" }, "url", "url contains whitespace or control characters"},
		{"url with tab", func(r *domain.JobRequest) { r.URL = "https://x.com/\tb" }, "url", "url contains whitespace or control characters"},
		{"url with CR", func(r *domain.JobRequest) { r.URL = "https://x.com/\r" }, "url", "url contains whitespace or control characters"},
		{"url with LF", func(r *domain.JobRequest) { r.URL = "https://x.com/\n" }, "url", "url contains whitespace or control characters"},
		{"url with NUL", func(r *domain.JobRequest) { r.URL = "https://x.com/\x00" }, "url", "url contains whitespace or control characters"},
		{"url invalid utf8", func(r *domain.JobRequest) { r.URL = "https://x.com/\xff" }, "url", "url contains whitespace or control characters"},
		{"url bad escape in host", func(r *domain.JobRequest) { r.URL = "http://%zz/" }, "url", "url is not a valid URL"},
		{"url non-numeric port", func(r *domain.JobRequest) { r.URL = "http://x.com:http/" }, "url", "url is not a valid URL"},
		{"url ftp scheme", func(r *domain.JobRequest) { r.URL = "ftp://x.com/file" }, "url", "url must be an absolute http or https URL"},
		{"url ws scheme", func(r *domain.JobRequest) { r.URL = "ws://x.com/" }, "url", "url must be an absolute http or https URL"},
		{"url relative path", func(r *domain.JobRequest) { r.URL = "/v1/things" }, "url", "url must be an absolute http or https URL"},
		{"url missing scheme", func(r *domain.JobRequest) { r.URL = "api.example.com/v1" }, "url", "url must be an absolute http or https URL"},
		{"url scheme-relative", func(r *domain.JobRequest) { r.URL = "//api.example.com/v1" }, "url", "url must be an absolute http or https URL"},
		{"url no host", func(r *domain.JobRequest) { r.URL = "https://" }, "url", "url must include a host"},
		{"url no host path only", func(r *domain.JobRequest) { r.URL = "https:///path" }, "url", "url must include a host"},
		{"url port without host", func(r *domain.JobRequest) { r.URL = "http://:8080/" }, "url", "url must include a host"},
		{"url user and password", func(r *domain.JobRequest) { r.URL = "https://user:pass@x.com/" }, "url", "url must not contain credentials; send them in a header"},
		{"url user only", func(r *domain.JobRequest) { r.URL = "https://user@x.com/" }, "url", "url must not contain credentials; send them in a header"},
		{"url empty userinfo", func(r *domain.JobRequest) { r.URL = "https://@x.com/" }, "url", "url must not contain credentials; send them in a header"},
		{"url port zero", func(r *domain.JobRequest) { r.URL = "http://x.com:0/" }, "url", "url has an invalid port"},
		{"url port too large", func(r *domain.JobRequest) { r.URL = "http://x.com:65536/" }, "url", "url has an invalid port"},
		{"url port way too large", func(r *domain.JobRequest) { r.URL = "http://x.com:99999/" }, "url", "url has an invalid port"},
		{"url port six digits", func(r *domain.JobRequest) { r.URL = "http://x.com:100080/" }, "url", "url has an invalid port"},
		{"url port huge", func(r *domain.JobRequest) { r.URL = "http://x.com:99999999999999999999/" }, "url", "url has an invalid port"},
		{"url ipv6 port zero", func(r *domain.JobRequest) { r.URL = "http://[::1]:0/" }, "url", "url has an invalid port"},

		// pool_id (url cleared)
		{"pool_id bad char slash", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "pool/1" }, "pool_id", "pool_id may contain only letters, digits, '.', '_' and '-'"},
		{"pool_id bad char space", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "pool 1" }, "pool_id", "pool_id may contain only letters, digits, '.', '_' and '-'"},
		{"pool_id bad char colon", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "pool:1" }, "pool_id", "pool_id may contain only letters, digits, '.', '_' and '-'"},
		{"pool_id bad char pipe", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "a|b" }, "pool_id", "pool_id may contain only letters, digits, '.', '_' and '-'"},
		{"pool_id non-ascii", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "pööl" }, "pool_id", "pool_id may contain only letters, digits, '.', '_' and '-'"},
		{"pool_id too long", func(r *domain.JobRequest) { r.URL, r.PoolID = "", long(domain.MaxPoolIDLen+1) }, "pool_id", "pool_id is longer than 128 characters"},

		// method
		{"method with space", func(r *domain.JobRequest) { r.Method = "GE T" }, "method", `method "GE T" is not a valid HTTP method token`},
		{"method trailing space", func(r *domain.JobRequest) { r.Method = "GET " }, "method", `method "GET " is not a valid HTTP method token`},
		{"method with slash", func(r *domain.JobRequest) { r.Method = "GET/1" }, "method", `method "GET/1" is not a valid HTTP method token`},
		{"method with NUL", func(r *domain.JobRequest) { r.Method = "G\x00" }, "method", `method "G\x00" is not a valid HTTP method token`},
		{"method with CRLF", func(r *domain.JobRequest) { r.Method = "GET\r\nX" }, "method", `method "GET\r\nX" is not a valid HTTP method token`},
		{"method non-ascii", func(r *domain.JobRequest) { r.Method = "GÉT" }, "method", `method "GÉT" is not a valid HTTP method token`},
		{"method too long", func(r *domain.JobRequest) { r.Method = strings.Repeat("X", domain.MaxMethodLen+1) }, "method", `method "` + strings.Repeat("X", 33) + `" is not a valid HTTP method token`},
		{"method too long is truncated in message", func(r *domain.JobRequest) { r.Method = strings.Repeat("Y", 50) }, "method", `method "` + strings.Repeat("Y", 40) + `…" is not a valid HTTP method token`},
		{"method CONNECT", func(r *domain.JobRequest) { r.Method = "CONNECT" }, "method", "method CONNECT is not supported"},
		{"method connect lower-case", func(r *domain.JobRequest) { r.Method = "connect" }, "method", "method CONNECT is not supported"},
		{"method Connect mixed-case", func(r *domain.JobRequest) { r.Method = "Connect" }, "method", "method CONNECT is not supported"},

		// webhook_url
		{"webhook_url ftp", func(r *domain.JobRequest) { r.WebhookURL = "ftp://hooks.example.com/" }, "webhook_url", "webhook_url must be an absolute http or https URL"},
		{"webhook_url relative", func(r *domain.JobRequest) { r.WebhookURL = "/hook" }, "webhook_url", "webhook_url must be an absolute http or https URL"},
		{"webhook_url credentials", func(r *domain.JobRequest) { r.WebhookURL = "https://u:p@hooks.example.com/" }, "webhook_url", "webhook_url must not contain credentials; send them in a header"},
		{"webhook_url no host", func(r *domain.JobRequest) { r.WebhookURL = "https://" }, "webhook_url", "webhook_url must include a host"},
		{"webhook_url bad port", func(r *domain.JobRequest) { r.WebhookURL = "https://hooks.example.com:70000/" }, "webhook_url", "webhook_url has an invalid port"},
		{"webhook_url whitespace", func(r *domain.JobRequest) { r.WebhookURL = "https://hooks.example.com/a b" }, "webhook_url", "webhook_url contains whitespace or control characters"},
		{"webhook_url too long", func(r *domain.JobRequest) { r.WebhookURL = "https://h.com/" + long(domain.MaxURLLen) }, "webhook_url", "webhook_url is longer than 8192 bytes"},
		{"webhook_url unparsable", func(r *domain.JobRequest) { r.WebhookURL = "http://%zz/" }, "webhook_url", "webhook_url is not a valid URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := validRequest()
			tc.mod(&r)
			wantInvalid(t, r.Validate(), tc.field, tc.msg)
		})
	}
}

func TestJobRequestValidateHeaders(t *testing.T) {
	t.Parallel()
	manyHeaders := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("X-H-%d", i)] = "v"
		}
		return h
	}
	tests := []struct {
		name    string
		headers map[string]string
		msg     string // "" means valid
	}{
		{"nil", nil, ""},
		{"empty", map[string]string{}, ""},
		{"ordinary", map[string]string{"Content-Type": "application/json", "Accept": "*/*", "X-Request-Id": "abc"}, ""},
		{"lower-case name", map[string]string{"x-custom": "v"}, ""},
		{"all token punctuation", map[string]string{"X!#$%&'*+-.^_`|~1": "v"}, ""},
		{"tab in value allowed", map[string]string{"X-Tab": "a\tb"}, ""},
		{"empty value allowed", map[string]string{"X-Empty": ""}, ""},
		{"utf8 value allowed", map[string]string{"X-Name": "José"}, ""},
		{"exactly max headers", manyHeaders(domain.MaxHeaders), ""},
		{"value exactly max length", map[string]string{"X-Big": strings.Repeat("v", domain.MaxHeaderValueLen)}, ""},
		{"name exactly max length", map[string]string{strings.Repeat("n", domain.MaxHeaderNameLen): "v"}, ""},
		// Authorization is allowed (it is only redacted when shown).
		{"authorization allowed", map[string]string{"Authorization": "Bearer x"}, ""},

		{"too many headers", manyHeaders(domain.MaxHeaders + 1), "headers has more than 100 entries"},
		{"empty name", map[string]string{"": "v"}, `header name "" is not a valid HTTP header name`},
		{"name with space", map[string]string{"Bad Name": "v"}, `header name "Bad Name" is not a valid HTTP header name`},
		{"name with colon", map[string]string{"X-A:": "v"}, `header name "X-A:" is not a valid HTTP header name`},
		{"name with CRLF", map[string]string{"X-A\r\nX-B": "v"}, `header name "X-A\r\nX-B" is not a valid HTTP header name`},
		{"name non-ascii", map[string]string{"X-Ñame": "v"}, `header name "X-Ñame" is not a valid HTTP header name`},
		{"name too long", map[string]string{strings.Repeat("n", domain.MaxHeaderNameLen+1): "v"}, `header name "` + strings.Repeat("n", 40) + `…" is not a valid HTTP header name`},
		{"duplicate differing in case", map[string]string{"content-type": "a", "Content-Type": "b"}, `header "Content-Type" is given more than once`},
		{"duplicate upper and lower", map[string]string{"X-TRACE": "a", "x-trace": "b"}, `header "X-Trace" is given more than once`},
		{"Connection", map[string]string{"Connection": "close"}, `header "Connection" is managed by Aquifer and may not be set`},
		{"connection lower-case", map[string]string{"connection": "close"}, `header "Connection" is managed by Aquifer and may not be set`},
		{"Keep-Alive", map[string]string{"keep-alive": "timeout=5"}, `header "Keep-Alive" is managed by Aquifer and may not be set`},
		{"Proxy-Connection", map[string]string{"Proxy-Connection": "keep-alive"}, `header "Proxy-Connection" is managed by Aquifer and may not be set`},
		{"Transfer-Encoding", map[string]string{"TRANSFER-ENCODING": "chunked"}, `header "Transfer-Encoding" is managed by Aquifer and may not be set`},
		{"Upgrade", map[string]string{"Upgrade": "websocket"}, `header "Upgrade" is managed by Aquifer and may not be set`},
		{"TE", map[string]string{"TE": "trailers"}, `header "Te" is managed by Aquifer and may not be set`},
		{"Trailer", map[string]string{"Trailer": "X-Sum"}, `header "Trailer" is managed by Aquifer and may not be set`},
		{"Content-Length", map[string]string{"Content-Length": "10"}, `header "Content-Length" is managed by Aquifer and may not be set`},
		{"hop-by-hop wins over bad value", map[string]string{"Connection": "a\nb"}, `header "Connection" is managed by Aquifer and may not be set`},
		{"value too long", map[string]string{"x-big": strings.Repeat("v", domain.MaxHeaderValueLen+1)}, `value of header "X-Big" is longer than 8192 bytes`},
		{"value CR", map[string]string{"X-A": "a\rb"}, `value of header "X-A" contains control characters`},
		{"value LF", map[string]string{"X-A": "a\nb"}, `value of header "X-A" contains control characters`},
		{"value CRLF injection", map[string]string{"X-A": "v\r\nX-Injected: 1"}, `value of header "X-A" contains control characters`},
		{"value NUL", map[string]string{"X-A": "\x00"}, `value of header "X-A" contains control characters`},
		{"value DEL", map[string]string{"X-A": "a\x7f"}, `value of header "X-A" contains control characters`},
		{"value ESC", map[string]string{"x-a": "\x1b[31m"}, `value of header "X-A" contains control characters`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := validRequest()
			r.Headers = tc.headers
			err := r.Validate()
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			wantInvalid(t, err, "headers", tc.msg)
		})
	}
}

func TestValidateHeadersUsesGivenField(t *testing.T) {
	t.Parallel()
	wantInvalid(t, domain.ValidateHeaders("webhook_headers", map[string]string{"Bad Name": "v"}),
		"webhook_headers", `header name "Bad Name" is not a valid HTTP header name`)
	if err := domain.ValidateHeaders("h", nil); err != nil {
		t.Fatalf("ValidateHeaders(nil) = %v", err)
	}
}

func TestJobRequestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		mod        func(r *domain.JobRequest)
		wantMethod string
	}{
		{"baseline", func(r *domain.JobRequest) {}, "POST"},
		{"method defaults to GET", func(r *domain.JobRequest) { r.Method = "" }, "GET"},
		{"method upper-cased", func(r *domain.JobRequest) { r.Method = "post" }, "POST"},
		{"method mixed case upper-cased", func(r *domain.JobRequest) { r.Method = "PaTcH" }, "PATCH"},
		{"custom token method", func(r *domain.JobRequest) { r.Method = "m-search" }, "M-SEARCH"},
		{"method at max length", func(r *domain.JobRequest) { r.Method = strings.Repeat("X", domain.MaxMethodLen) }, strings.Repeat("X", domain.MaxMethodLen)},
		{"http url", func(r *domain.JobRequest) { r.URL = "http://example.com" }, "POST"},
		{"upper-case scheme", func(r *domain.JobRequest) { r.URL = "HTTPS://EXAMPLE.COM/X" }, "POST"},
		{"port 1", func(r *domain.JobRequest) { r.URL = "http://example.com:1/" }, "POST"},
		{"port 65535", func(r *domain.JobRequest) { r.URL = "http://example.com:65535/" }, "POST"},
		{"empty port", func(r *domain.JobRequest) { r.URL = "http://example.com:/" }, "POST"},
		{"ipv6 host", func(r *domain.JobRequest) { r.URL = "http://[::1]:8080/x" }, "POST"},
		{"ipv4 host", func(r *domain.JobRequest) { r.URL = "http://127.0.0.1/x" }, "POST"},
		{"escaped query", func(r *domain.JobRequest) { r.URL = "https://x.com/a%20b?q=%2F#frag" }, "POST"},
		{"url at max length", func(r *domain.JobRequest) {
			r.URL = "https://x.com/" + strings.Repeat("a", domain.MaxURLLen-len("https://x.com/"))
		}, "POST"},
		{"pool instead of url", func(r *domain.JobRequest) { r.URL, r.PoolID = "", "Pool_1.a-B" }, "POST"},
		{"pool_id at max length", func(r *domain.JobRequest) { r.URL, r.PoolID = "", strings.Repeat("p", domain.MaxPoolIDLen) }, "POST"},
		{"webhook_url", func(r *domain.JobRequest) { r.WebhookURL = "https://hooks.example.com/cb?id=1" }, "POST"},
		{"user_id at max length", func(r *domain.JobRequest) { r.UserID = strings.Repeat("u", domain.MaxUserIDLen) }, "POST"},
		{"user_id unicode", func(r *domain.JobRequest) { r.UserID = "ünïcødé 用户" }, "POST"},
		{"user_id with inner spaces", func(r *domain.JobRequest) { r.UserID = " a b " }, "POST"},
		{"idempotent_key at max length", func(r *domain.JobRequest) { r.IdempotentKey = strings.Repeat("k", domain.MaxIdempotentKeyLen) }, "POST"},
		{"empty body", func(r *domain.JobRequest) { r.Body = "" }, "POST"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := validRequest()
			tc.mod(&r)
			if err := r.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if r.Method != tc.wantMethod {
				t.Errorf("Method after Validate = %q, want %q", r.Method, tc.wantMethod)
			}
		})
	}
}

// TestJobRequestValidateOrder checks that with several problems the first one
// in the documented order is reported.
func TestJobRequestValidateOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   domain.JobRequest
		field string
		msg   string
	}{
		{"user_id before idempotent_key", domain.JobRequest{}, "user_id", "user_id is required"},
		{"user_id text before idempotent_key", domain.JobRequest{UserID: "a\nb"}, "user_id", "user_id contains control characters"},
		{"user_id length before utf8 and control", domain.JobRequest{UserID: strings.Repeat("\x00", 300) + "\xff"}, "user_id", "user_id is longer than 256 bytes"},
		{"user_id utf8 before control", domain.JobRequest{UserID: "\x00\xff"}, "user_id", "user_id is not valid UTF-8"},
		{"idempotent_key before url", domain.JobRequest{UserID: "u"}, "idempotent_key", "idempotent_key is required"},
		{"idempotent_key text before url", domain.JobRequest{UserID: "u", IdempotentKey: "\x01"}, "idempotent_key", "idempotent_key contains control characters"},
		{"url presence before method", domain.JobRequest{UserID: "u", IdempotentKey: "k", Method: "BAD METHOD"}, "url", "either url or pool_id is required"},
		{"exclusivity before url shape", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "ftp://x", PoolID: "bad/pool"}, "url", "url and pool_id are mutually exclusive — a job dispatches to one or the other"},
		{"url before method", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "ftp://x", Method: "BAD METHOD"}, "url", "url must be an absolute http or https URL"},
		{"pool_id before method", domain.JobRequest{UserID: "u", IdempotentKey: "k", PoolID: "bad/pool", Method: "CONNECT"}, "pool_id", "pool_id may contain only letters, digits, '.', '_' and '-'"},
		{"url length before whitespace", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "https://x.com/ " + strings.Repeat("a", domain.MaxURLLen)}, "url", "url is longer than 8192 bytes"},
		{"url whitespace before scheme", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "ftp://x .com"}, "url", "url contains whitespace or control characters"},
		{"url scheme before host", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "ftp://"}, "url", "url must be an absolute http or https URL"},
		{"url host before credentials", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://user@"}, "url", "url must include a host"},
		{"url credentials before port", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://user@x.com:0/"}, "url", "url must not contain credentials; send them in a header"},
		{"method before webhook_url", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://x.com", Method: "BAD METHOD", WebhookURL: "ftp://x"}, "method", `method "BAD METHOD" is not a valid HTTP method token`},
		{"CONNECT before webhook_url", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://x.com", Method: "connect", WebhookURL: "ftp://x"}, "method", "method CONNECT is not supported"},
		{"webhook_url before headers", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://x.com", WebhookURL: "ftp://x", Headers: map[string]string{"Connection": "close"}}, "webhook_url", "webhook_url must be an absolute http or https URL"},
		{"headers last", domain.JobRequest{UserID: "u", IdempotentKey: "k", URL: "http://x.com", Headers: map[string]string{"Connection": "close"}}, "headers", `header "Connection" is managed by Aquifer and may not be set`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := tc.req
			wantInvalid(t, r.Validate(), tc.field, tc.msg)
		})
	}
}

func TestJobRequestValidateDoesNotTouchOtherFields(t *testing.T) {
	t.Parallel()
	r := validRequest()
	r.Method = "put"
	r.AccountQueue = domain.AccountQueueEnabled
	want := r
	want.Method = "PUT"
	want.Headers = maps.Clone(r.Headers)
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	if r.Upstream() != "https://api.example.com:443" {
		t.Fatalf("Upstream() = %q", r.Upstream())
	}
	_ = want.Validate() // sets the same derived upstream on want
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("after Validate got %+v, want %+v", r, want)
	}
}

func TestJobRequestUpstream(t *testing.T) {
	t.Parallel()
	pool := domain.JobRequest{UserID: "u", IdempotentKey: "k", PoolID: "readers"}
	if err := pool.Validate(); err != nil || pool.Upstream() != "pool:readers" {
		t.Fatalf("pool request: %v, upstream %q", err, pool.Upstream())
	}
}

func TestValidatePoolID(t *testing.T) {
	t.Parallel()
	wantInvalid(t, domain.ValidatePoolID("pool", ""), "pool", "pool is required")
	wantInvalid(t, domain.ValidatePoolID("pool", strings.Repeat("a", 129)), "pool", "pool is longer than 128 characters")
	wantInvalid(t, domain.ValidatePoolID("pool", "a+b"), "pool", "pool may contain only letters, digits, '.', '_' and '-'")
	for _, ok := range []string{"a", "A-Z_0.9", "..", strings.Repeat("z", 128)} {
		if err := domain.ValidatePoolID("pool", ok); err != nil {
			t.Errorf("ValidatePoolID(%q) = %v, want nil", ok, err)
		}
	}
}

func TestValidationErrorCode(t *testing.T) {
	t.Parallel()
	r := domain.JobRequest{}
	err := fmt.Errorf("submit: %w", r.Validate())
	if got := domain.CodeOf(err); got != domain.CodeInvalid {
		t.Fatalf("CodeOf(wrapped validation error) = %q, want %q", got, domain.CodeInvalid)
	}
	if got := domain.PublicMessage(err); got != "user_id is required" {
		t.Fatalf("PublicMessage = %q", got)
	}
}

func TestNewJob(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	r := validRequest()
	r.WebhookURL = "https://hooks.example.com/cb"
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	lane := domain.TenantQueue("https://api.example.com:443", "t1")
	j := domain.NewJob("0123456789abcdef0123456789abcdef", &r, lane, now)

	want := &domain.Job{
		ID:            "0123456789abcdef0123456789abcdef",
		UserID:        "user-1",
		IdempotentKey: "key-1",
		URL:           r.URL,
		Method:        "POST",
		Headers:       map[string]string{"Content-Type": "application/json"},
		Body:          []byte(`{"a":1}`),
		WebhookURL:    "https://hooks.example.com/cb",
		Queue:         lane,
		ReadyQueue:    lane,
		Status:        domain.StatusQueued,
		CreatedAt:     now,
		UpdatedAt:     now,
		ExpiresAt:     now.Add(24 * time.Hour),
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("NewJob =\n%+v\nwant\n%+v", j, want)
	}
	if j.Phase() != domain.PhaseDispatch {
		t.Errorf("new job phase = %v, want dispatch", j.Phase())
	}
	// The job must not share the request's header map.
	r.Headers["Content-Type"] = "text/plain"
	r.Headers["X-New"] = "1"
	if j.Headers["Content-Type"] != "application/json" || len(j.Headers) != 1 {
		t.Errorf("job headers changed with the request: %v", j.Headers)
	}

	empty := domain.JobRequest{UserID: "u", IdempotentKey: "k", PoolID: "p", Headers: map[string]string{}}
	ej := domain.NewJob("id", &empty, domain.SharedQueue(domain.PoolUpstream("p")), now)
	if ej.Headers != nil {
		t.Errorf("empty headers should become nil, got %#v", ej.Headers)
	}
	if ej.Body != nil {
		t.Errorf("empty body should become nil, got %#v", ej.Body)
	}
}

func TestStatusTerminalAndValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s               domain.Status
		terminal, valid bool
	}{
		{domain.StatusQueued, false, true},
		{domain.StatusInFlight, false, true},
		{domain.StatusCompleted, true, true},
		{domain.StatusFailed, true, true},
		{"", false, false},
		{"QUEUED", false, false},
		{"Completed", false, false},
		{"done", false, false},
	}
	for _, tc := range tests {
		if got := tc.s.Terminal(); got != tc.terminal {
			t.Errorf("Status(%q).Terminal() = %v, want %v", tc.s, got, tc.terminal)
		}
		if got := tc.s.Valid(); got != tc.valid {
			t.Errorf("Status(%q).Valid() = %v, want %v", tc.s, got, tc.valid)
		}
	}
}

func TestEventTypeTerminal(t *testing.T) {
	t.Parallel()
	tests := map[domain.EventType]bool{
		domain.EventQueued: false, domain.EventDispatching: false, domain.EventPosition: false,
		domain.EventCompleted: true, domain.EventFailed: true, "": false,
	}
	for et, want := range tests {
		if got := et.Terminal(); got != want {
			t.Errorf("EventType(%q).Terminal() = %v, want %v", et, got, want)
		}
	}
}

func TestTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    domain.Status
		want time.Duration
	}{
		{domain.StatusQueued, 24 * time.Hour},
		{domain.StatusInFlight, 24 * time.Hour},
		{domain.StatusCompleted, 30 * time.Minute},
		{domain.StatusFailed, 2 * time.Hour},
		{"unknown", 24 * time.Hour},
	}
	for _, tc := range tests {
		if got := domain.TTL(tc.s); got != tc.want {
			t.Errorf("TTL(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestJobExpired(t *testing.T) {
	t.Parallel()
	exp := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		expiresAt time.Time
		now       time.Time
		want      bool
	}{
		{"no expiry never expires", time.Time{}, exp.Add(100 * 365 * 24 * time.Hour), false},
		{"before expiry", exp, exp.Add(-time.Nanosecond), false},
		{"at expiry", exp, exp, true},
		{"after expiry", exp, exp.Add(time.Nanosecond), true},
		{"long after", exp, exp.Add(time.Hour), true},
	}
	for _, tc := range tests {
		j := &domain.Job{ExpiresAt: tc.expiresAt}
		if got := j.Expired(tc.now); got != tc.want {
			t.Errorf("%s: Expired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestJobCloneIsDeep(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	orig := &domain.Job{
		ID: "0123456789abcdef0123456789abcdef", Seq: 7, ReadySeq: 9, ReadyQueue: "https://h.com:443",
		UserID: "u", IdempotentKey: "k", URL: "https://x.com/", Method: "POST",
		Headers: map[string]string{"A": "1", "B": "2"}, Body: []byte("body"),
		WebhookURL: "https://h.com/", Queue: "https://x.com:443", Status: domain.StatusCompleted,
		Attempts: 3, CreatedAt: now, UpdatedAt: now.Add(time.Second), DispatchedAt: now.Add(time.Millisecond),
		ExpiresAt: now.Add(time.Hour),
		Result:    &domain.Result{ResponseStatus: 200, Body: []byte("resp"), BodyTruncated: true, ContentType: "text/plain", Reason: "r"},
		Delivery:  &domain.Delivery{Status: domain.DeliveryPending, Attempts: 1},
	}
	c := orig.Clone()
	if c.Delivery == orig.Delivery {
		t.Fatal("Clone shares the Delivery pointer")
	}
	if c == orig {
		t.Fatal("Clone returned the same pointer")
	}
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone differs:\n%+v\n%+v", c, orig)
	}
	if c.Result == orig.Result {
		t.Fatal("Clone shares the Result pointer")
	}

	c.Headers["A"] = "changed"
	c.Headers["C"] = "new"
	c.Body[0] = 'X'
	c.Result.Body[0] = 'X'
	c.Result.ResponseStatus = 500
	c.Status = domain.StatusFailed

	if orig.Headers["A"] != "1" || len(orig.Headers) != 2 {
		t.Errorf("original headers mutated: %v", orig.Headers)
	}
	if string(orig.Body) != "body" {
		t.Errorf("original body mutated: %q", orig.Body)
	}
	if string(orig.Result.Body) != "resp" || orig.Result.ResponseStatus != 200 {
		t.Errorf("original result mutated: %+v", orig.Result)
	}
	if orig.Status != domain.StatusCompleted {
		t.Errorf("original status mutated: %v", orig.Status)
	}

	// Appending to the clone's body must not write into the original's backing array.
	o2 := &domain.Job{Body: make([]byte, 1, 16)}
	c2 := o2.Clone()
	c2.Body = append(c2.Body, 'z')
	if got := o2.Body[:2][1]; got != 0 {
		t.Errorf("append to clone body wrote into original backing array: %q", got)
	}
}

func TestJobCloneNils(t *testing.T) {
	t.Parallel()
	c := (&domain.Job{ID: "x"}).Clone()
	if c.Headers != nil || c.Body != nil || c.Result != nil {
		t.Fatalf("nil fields should stay nil: %+v", c)
	}
	if c.ID != "x" {
		t.Fatalf("ID = %q", c.ID)
	}
}

func TestLedgerHash(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("u:k"))
	independent := hex.EncodeToString(sum[:])
	const known = "ed1c5fb31de7acab679ea707ff093f8b20aaa9a3d5391f4dd911176893f51cf0"
	if independent != known {
		t.Fatalf("test vector self-check failed: %s", independent)
	}
	if got := domain.LedgerHash("u", "k"); got != known {
		t.Fatalf("LedgerHash(u, k) = %s, want %s", got, known)
	}

	tests := []struct{ user, key string }{
		{"", ""},
		{"user-1", "key-1"},
		{"ünï", "cødé"},
	}
	for _, tc := range tests {
		s := sha256.Sum256([]byte(tc.user + ":" + tc.key))
		if got, want := domain.LedgerHash(tc.user, tc.key), hex.EncodeToString(s[:]); got != want {
			t.Errorf("LedgerHash(%q, %q) = %s, want %s", tc.user, tc.key, got, want)
		}
	}
	if domain.LedgerHash("u", "k") == domain.LedgerHash("k", "u") {
		t.Error("LedgerHash is symmetric in its arguments")
	}
	// Documented ambiguity of the legacy format.
	if domain.LedgerHash("a:b", "c") != domain.LedgerHash("a", "b:c") {
		t.Error("LedgerHash no longer matches the legacy user:key concatenation")
	}
}

func TestJobPhase(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status   domain.Status
		delivery *domain.Delivery
		want     domain.Phase
	}{
		{domain.StatusQueued, nil, domain.PhaseDispatch},
		{domain.StatusInFlight, nil, domain.PhaseDispatch},
		{domain.StatusCompleted, nil, domain.PhaseNone},
		{domain.StatusFailed, &domain.Delivery{Status: domain.DeliveryPending}, domain.PhaseDeliver},
		{domain.StatusCompleted, &domain.Delivery{Status: domain.DeliveryDelivered}, domain.PhaseNone},
		{domain.StatusCompleted, &domain.Delivery{Status: domain.DeliveryFailed}, domain.PhaseNone},
	}
	for _, c := range cases {
		j := &domain.Job{Status: c.status, Delivery: c.delivery}
		if got := j.Phase(); got != c.want {
			t.Errorf("Phase(%s, %+v) = %v, want %v", c.status, c.delivery, got, c.want)
		}
	}
}

// Validate remembers the hosts it parsed, for the destination check; a URL
// changed afterwards is not mistaken for the one it parsed.
func TestJobRequestValidatedHost(t *testing.T) {
	r := validRequest()
	r.URL, r.WebhookURL = "https://API.example.com:8443/v1?x=1", "http://[::1]:9/hook"
	if host, ok := r.ValidatedHost(r.URL); ok || host != "" {
		t.Fatalf("before Validate: ValidatedHost = %q, %v; want nothing", host, ok)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]string{r.URL: "API.example.com", r.WebhookURL: "::1"} {
		if host, ok := r.ValidatedHost(raw); !ok || host != want {
			t.Errorf("ValidatedHost(%q) = %q, %v; want %q, true", raw, host, ok, want)
		}
	}
	r.URL = "http://other.test/"
	if _, ok := r.ValidatedHost(r.URL); ok {
		t.Error("ValidatedHost answered for a URL set after Validate")
	}
	if _, ok := r.ValidatedHost(""); ok {
		t.Error("ValidatedHost answered for an empty URL")
	}
}
