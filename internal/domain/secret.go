package domain

import (
	"net/http"
	"strings"
)

// Redacted replaces secret header values wherever jobs are shown.
const Redacted = "[redacted]"

var secretHeaderNames = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Set-Cookie": true,
	"X-Api-Key": true, "Api-Key": true,
}

var secretHeaderWords = []string{"token", "secret", "key", "password", "credential", "session", "signature"}

// IsSecretHeader reports whether a header's value must never be echoed back
// or logged: credentials by name, and any header whose name contains a word
// such as "token", "secret" or "key".
func IsSecretHeader(name string) bool {
	if secretHeaderNames[http.CanonicalHeaderKey(name)] {
		return true
	}
	lower := strings.ToLower(name)
	for _, w := range secretHeaderWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// RedactHeaders returns a copy of h with secret values replaced by Redacted.
func RedactHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if IsSecretHeader(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}
