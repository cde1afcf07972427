package pacing_test

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; plain `go test` replays
// them. Run a fuzzer with, for example:
//
//	go test -run XXX -fuzz FuzzParseSignals -fuzztime 20s ./internal/pacing/

// parseHeaderBlock turns "Name: value" lines into a header with Add, the way
// net/http canonicalises a response's header.
func parseHeaderBlock(raw string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(raw, "\n") {
		name, value, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if !ok || strings.TrimSpace(name) == "" {
			continue
		}
		h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return h
}

func checkPause(t *testing.T, what string, d time.Duration) {
	t.Helper()
	if d < 0 || d > pacing.MaxPause {
		t.Fatalf("%s = %v, outside [0, MaxPause]", what, d)
	}
}

func FuzzParseSignals(f *testing.F) {
	f.Fuzz(func(t *testing.T, status int, raw string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		h := parseHeaderBlock(raw)
		s := pacing.ParseSignals(status, h, now)

		if !(s.RPS >= 0) || math.IsInf(s.RPS, 0) {
			t.Fatalf("RPS = %v", s.RPS)
		}
		if s.MaxConcurrent < 0 {
			t.Fatalf("MaxConcurrent = %d", s.MaxConcurrent)
		}
		if s.HasUtilization && !(s.Utilization >= 0 && s.Utilization <= 1) {
			t.Fatalf("Utilization = %v", s.Utilization)
		}
		if !s.HasUtilization && s.Utilization != 0 {
			t.Fatalf("Utilization = %v without HasUtilization", s.Utilization)
		}
		checkPause(t, "RetryAfter", s.RetryAfter)
		checkPause(t, "ResetIn", s.ResetIn)
		if status != 429 && status != 503 && s.RetryAfter != 0 {
			t.Fatalf("RetryAfter = %v on status %d", s.RetryAfter, status)
		}
		switch s.ResetSource {
		case "":
			if s.ResetIn != 0 {
				t.Fatalf("ResetIn = %v without a source", s.ResetIn)
			}
		case "github", "openai", "ietf":
			if s.ResetIn == 0 {
				t.Fatalf("source %q with ResetIn 0", s.ResetSource)
			}
		default:
			t.Fatalf("ResetSource = %q", s.ResetSource)
		}
		if again := pacing.ParseSignals(status, h, now); again != s {
			t.Fatalf("not deterministic: %+v then %+v", s, again)
		}

		// Whatever the response says, a pace stays within [floor, ceiling].
		p := pacing.NewPace(pacing.PaceConfig{RPS: 10, MaxConcurrent: 4})
		for range 3 {
			p.Observe(s)
			if r := p.RPS(); !(r >= 0.25 && r <= 10) {
				t.Fatalf("pace RPS = %v after %+v", r, s)
			}
			if c := p.MaxConcurrent(); c < 1 || c > 4 {
				t.Fatalf("pace MaxConcurrent = %d after %+v", c, s)
			}
		}
		if s.RPS > 0 && p.RPS() < 0.5 {
			t.Fatalf("explicit rate %v drove the pace to %v, below MinRPS", s.RPS, p.RPS())
		}
	})
}

func FuzzParseRPS(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		r, ok := pacing.ParseRPS(v)
		if !ok {
			if r != 0 {
				t.Fatalf("ParseRPS(%q) = %v, false", v, r)
			}
			return
		}
		if !(r >= 0) || math.IsInf(r, 0) {
			t.Fatalf("ParseRPS(%q) = %v", v, r)
		}
		if r > 0 {
			back, ok := pacing.ParseRPS(strconv.FormatFloat(r, 'g', -1, 64))
			if !ok || back != r {
				t.Fatalf("ParseRPS(%q) = %v, but its formatting parses as %v, %v", v, r, back, ok)
			}
		}
	})
}

func FuzzParseMaxConcurrent(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		n, ok := pacing.ParseMaxConcurrent(v)
		if ok != (n > 0) {
			t.Fatalf("ParseMaxConcurrent(%q) = %d, %v", v, n, ok)
		}
		if ok && n < math.MaxInt {
			if back, ok := pacing.ParseMaxConcurrent(strconv.Itoa(n)); !ok || back != n {
				t.Fatalf("ParseMaxConcurrent(%q) = %d, but its formatting parses as %d, %v", v, n, back, ok)
			}
		}
	})
}

func FuzzParseORCA(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		u, ok := pacing.ParseORCA(v)
		if !ok {
			if u != 0 {
				t.Fatalf("ParseORCA(%q) = %v, false", v, u)
			}
			return
		}
		if !(u >= 0 && u <= 1) {
			t.Fatalf("ParseORCA(%q) = %v", v, u)
		}
		r, rok := pacing.ORCARate(u)
		if rok != (u >= 0.70) || (rok && r != 2 && r != 0.5 && r != 0.25) {
			t.Fatalf("ORCARate(%v) = %v, %v", u, r, rok)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		d, ok := pacing.ParseRetryAfter(v, now)
		checkPause(t, "ParseRetryAfter", d)
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false", v, d)
		}
		// Delta-seconds do not depend on the clock.
		if ok && strings.TrimSpace(v) != "" && strings.Trim(strings.TrimSpace(v), "0123456789") == "" {
			if d2, _ := pacing.ParseRetryAfter(v, now.Add(time.Hour)); d2 != d {
				t.Fatalf("ParseRetryAfter(%q) depends on now: %v vs %v", v, d, d2)
			}
		}
	})
}

func FuzzParseRateLimit(f *testing.F) {
	f.Fuzz(func(t *testing.T, ghRemaining, ghReset, oaRemaining, oaReset, ietfRemaining, ietfReset, rateLimit, policy string, nowUnix int64) {
		h := http.Header{}
		for _, kv := range [][2]string{
			{"X-RateLimit-Remaining", ghRemaining}, {"X-RateLimit-Reset", ghReset},
			{"x-ratelimit-remaining-requests", oaRemaining}, {"x-ratelimit-reset-requests", oaReset},
			{"RateLimit-Remaining", ietfRemaining}, {"RateLimit-Reset", ietfReset},
			{"RateLimit", rateLimit}, {"RateLimit-Policy", policy},
		} {
			if kv[1] != "" {
				h.Set(kv[0], kv[1])
			}
		}
		now := time.Unix(nowUnix, 0)
		d, src, ok := pacing.ParseRateLimit(h, now)
		checkPause(t, "resetIn", d)
		if ok != (d > 0) || ok != (src != "") {
			t.Fatalf("ParseRateLimit = %v, %q, %v", d, src, ok)
		}
		if ok && src != "github" && src != "openai" && src != "ietf" {
			t.Fatalf("source %q", src)
		}
		if d2, src2, ok2 := pacing.ParseRateLimit(h, now); d2 != d || src2 != src || ok2 != ok {
			t.Fatalf("not deterministic: %v %q %v then %v %q %v", d, src, ok, d2, src2, ok2)
		}
	})
}
