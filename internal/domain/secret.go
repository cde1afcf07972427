package domain

import (
	"errors"
	"net/url"
	"strings"
	"unicode"
)

// Redacted replaces secret values (header values, URL query parameters and
// credentials) wherever jobs are shown.
const Redacted = "[redacted]"

// One rule decides which names carry secrets, for request headers and for
// URL query (and fragment) parameters alike: IsSecretName.

// secretNames are secret by their whole name, in any case.
var secretNames = map[string]bool{"cookie": true, "set-cookie": true}

// secretWords make a name secret wherever they appear in it, in any case:
// "X-Auth-Token", "client_secret", "X-Api-Key", "Authorization".
var secretWords = []string{"token", "secret", "key", "password", "passwd", "credential", "session", "signature", "auth"}

// secretParts make a name secret when they are one whole part of it (see
// nameParts): "sig" and "hmacSig" are secret, "signal" and "design" are not.
var secretParts = map[string]bool{"sig": true, "pwd": true, "pass": true, "jwt": true}

// IsSecretName reports whether the value of a header or URL parameter with
// this name must never be echoed back or logged: Cookie and Set-Cookie, any
// name containing a word such as "token", "secret", "key", "password",
// "credential", "session", "signature" or "auth", and any name one of whose
// parts is "sig", "pwd", "pass" or "jwt".
func IsSecretName(name string) bool {
	lower := strings.ToLower(name)
	if secretNames[lower] {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	for _, p := range nameParts(name) {
		if secretParts[p] {
			return true
		}
	}
	return false
}

// nameParts splits a name into lower-case parts at every character that is
// not a letter and where a lower-case letter is followed by an upper-case
// one: "X-Hub-Sig256" → x, hub, sig; "hmacSig" → hmac, sig.
func nameParts(name string) []string {
	var parts []string
	start, prev := -1, rune(0)
	for i, r := range name {
		switch {
		case !unicode.IsLetter(r):
			if start >= 0 {
				parts = append(parts, strings.ToLower(name[start:i]))
				start = -1
			}
		case start < 0:
			start = i
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			parts = append(parts, strings.ToLower(name[start:i]))
			start = i
		}
		prev = r
	}
	if start >= 0 {
		parts = append(parts, strings.ToLower(name[start:]))
	}
	return parts
}

// RedactHeaders returns a copy of h with secret values replaced by Redacted.
func RedactHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if IsSecretName(k) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}

// RedactURL returns raw as it may be shown: the values of secret query and
// fragment parameters (IsSecretName of the decoded name) replaced by
// Redacted, and any user information replaced by Redacted (escaped, so the
// result still parses). Everything else is kept byte for byte, in order.
// The stored URL is not affected: it is what gets sent.
func RedactURL(raw string) string {
	if !strings.ContainsAny(raw, "?#@") {
		return raw
	}
	rest, frag, hasFrag := strings.Cut(raw, "#")
	base, query, hasQuery := strings.Cut(rest, "?")
	var b strings.Builder
	b.Grow(len(raw) + 16)
	b.WriteString(redactUserinfo(base))
	if hasQuery {
		b.WriteByte('?')
		redactParams(&b, query)
	}
	if hasFrag {
		b.WriteByte('#')
		redactParams(&b, frag)
	}
	return b.String()
}

// redactUserinfo replaces the user information of an absolute URL without
// query or fragment ("http://user:pw@host/p") by Redacted.
func redactUserinfo(base string) string {
	scheme, rest, ok := strings.Cut(base, "://")
	if !ok {
		return base
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return base
	}
	return scheme + "://" + url.PathEscape(Redacted) + authority[at:] + path
}

// redactParams writes the parameters of s (separated by '&' or ';', as
// servers may read either) with the values of secret ones replaced.
func redactParams(b *strings.Builder, s string) {
	for s != "" {
		i := strings.IndexAny(s, "&;")
		param, sep := s, ""
		if i >= 0 {
			param, sep, s = s[:i], s[i:i+1], s[i+1:]
		} else {
			s = ""
		}
		if name, _, ok := strings.Cut(param, "="); ok && secretParam(name) {
			param = name + "=" + Redacted
		}
		b.WriteString(param)
		b.WriteString(sep)
	}
}

// secretParam reports whether a parameter name, as written or decoded,
// is secret.
func secretParam(name string) bool {
	if IsSecretName(name) {
		return true
	}
	decoded, err := url.QueryUnescape(name)
	return err == nil && IsSecretName(decoded)
}

// WithoutURL returns the cause of a failed outbound request without the URL
// that net/http's *url.Error puts in front of it: `Post "http://h/p?token=x":
// dial tcp 127.0.0.1:1: connect: connection refused` becomes `dial tcp
// 127.0.0.1:1: connect: connection refused`. The cause names the operation
// and the address, which is what a reason needs; the URL may carry secrets
// in its query and is the job's own anyway. Other errors are returned as
// they are.
func WithoutURL(err error) error {
	var ue *url.Error
	for errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	return err
}
