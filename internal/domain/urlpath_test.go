package domain

import "testing"

// plainPath, where it answers, answers what url.Parse does; where it does
// not, URLPath falls back to url.Parse.
func FuzzURLPath(f *testing.F) {
	for _, s := range []string{
		"http://a.test/v1/chat/completions", "https://api.example.com:8443/x/y?key=secret",
		"HTTPS://Host.Test/A;b=c/@x:y$z&w+q,r", "http://a.test", "http://a.test?x=/y", "http://a.test:/p",
		"http://a.test/p#frag", "http://a.test/%41%2Fb", "http://[::1]:80/p", "http://user@a.test/p",
		"http://a b/p", "http://a.test/p q", "http://a.test/p\x7f", "http://a.test:8x/p", "http:///p",
		"ftp://a.test/p", "http://a.test/!*'()", "http://a.test/\u00e9", "http://a.test/p?\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		want := parsedPath(raw)
		if got, ok := plainPath(raw); ok && got != want {
			t.Fatalf("plainPath(%q) = %q, url.Parse gives %q", raw, got, want)
		}
		if got := URLPath(raw); got != want {
			t.Fatalf("URLPath(%q) = %q, url.Parse gives %q", raw, got, want)
		}
	})
}

// The usual URLs take the fast path (a change that sent them all through
// url.Parse would still be correct, but this test says it happened).
func TestURLPathFastPathTakesTheUsualURLs(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:8080/hook":                 "/hook",
		"https://api.openai.com/v1/chat/completions": "/v1/chat/completions",
		"https://hooks.example.com/in?token=abc&x=1": "/in",
		"http://a.test":                "",
		"HTTP://A.TEST/Mixed/Case;v=1": "/Mixed/Case;v=1",
	} {
		got, ok := plainPath(raw)
		if !ok || got != want {
			t.Errorf("plainPath(%q) = %q, %v; want %q, true", raw, got, ok, want)
		}
	}
	for _, raw := range []string{"http://a.test/%7E", "http://a.test/p#f", "http://[::1]/p", "http://u@a.test/"} {
		if _, ok := plainPath(raw); ok {
			t.Errorf("plainPath(%q) answered; it should leave it to url.Parse", raw)
		}
	}
}
