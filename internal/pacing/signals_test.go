package pacing_test

import (
	"bufio"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// hdr builds a header from name, value pairs with Add, which canonicalises
// the names like net/http does for a real response.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// epoch formats t0+d as unix epoch seconds.
func epoch(d time.Duration) string { return strconv.FormatInt(at(d).Unix(), 10) }

func TestParseRPS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"2", 2, true},
		{"0.5", 0.5, true},
		{"10.25", 10.25, true},
		{".5", 0.5, true},
		{"5.", 5, true},
		{"+3", 3, true},
		{"1e1", 10, true},
		{"2E-1", 0.2, true},
		{"  7  ", 7, true},
		{"\t1.5\t", 1.5, true},
		{"1e308", 1e308, true},
		{"1e-400", 0, true}, // underflows to 0: as slow as allowed
		// <= 0: present, meaning "as slow as allowed".
		{"0", 0, true},
		{"0.0", 0, true},
		{"-0", 0, true},
		{"-1", 0, true},
		{"-0.001", 0, true},
		// Garbage.
		{"", 0, false},
		{"   ", 0, false},
		{"fast", 0, false},
		{"10rps", 0, false},
		{"2 rps", 0, false},
		{"1,5", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"+", 0, false},
		{"-", 0, false},
		{"e5", 0, false},
		{"1e", 0, false},
		{"1e+", 0, false},
		{"NaN", 0, false},
		{"nan", 0, false},
		{"Inf", 0, false},
		{"+Inf", 0, false},
		{"-Inf", 0, false},
		{"infinity", 0, false},
		{"1e400", 0, false}, // overflows to Inf
		{"0x10", 0, false},
		{"0x1p-2", 0, false},
		{"1_000", 0, false},
		{"--1", 0, false},
	}
	for _, tc := range tests {
		got, ok := pacing.ParseRPS(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRPS(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseMaxConcurrent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"1", 1, true},
		{"3", 3, true},
		{"007", 7, true},
		{"+4", 4, true},
		{" 5 ", 5, true},
		{"99999999999999999999999", math.MaxInt, true}, // positive, too big: the ceiling will clamp it
		{"0", 0, false},
		{"00", 0, false},
		{"-1", 0, false},
		{"-0", 0, false},
		{"", 0, false},
		{" ", 0, false},
		{"+", 0, false},
		{"++1", 0, false},
		{"2.0", 0, false},
		{"1.5", 0, false},
		{"1e2", 0, false},
		{"two", 0, false},
		{"3 slots", 0, false},
		{"0x10", 0, false},
		{"1_0", 0, false},
	}
	for _, tc := range tests {
		got, ok := pacing.ParseMaxConcurrent(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseMaxConcurrent(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseORCA(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want float64
		ok   bool
	}{
		{"text vllm", "TEXT named_metrics.kv_cache_usage_perc=0.82, named_metrics.num_requests_waiting=3", 0.82, true},
		{"text lowercase format", "text named_metrics.kv_cache_usage_perc=0.5", 0.5, true},
		{"text mixed-case format", "Text named_metrics.kv_cache_usage_perc=0.5", 0.5, true},
		{"text without prefix", "TEXT kv_cache_usage_perc=0.9", 0.9, true},
		{"text triton", "TEXT named_metrics.kv_cache_utilization=0.75", 0.75, true},
		{"text vllm preferred, listed second", "TEXT named_metrics.kv_cache_utilization=0.1, named_metrics.kv_cache_usage_perc=0.95", 0.95, true},
		{"text vllm preferred, listed first", "TEXT kv_cache_usage_perc=0.95,kv_cache_utilization=0.1", 0.95, true},
		{"text vllm out of range falls back to triton", "TEXT kv_cache_usage_perc=82, kv_cache_utilization=0.8", 0.8, true},
		{"text whitespace", "  TEXT    named_metrics.kv_cache_usage_perc = 0.3 ,  x=1  ", 0.3, true},
		{"text malformed pairs skipped", "TEXT garbage, =, a=, =1, named_metrics.kv_cache_usage_perc=0.7, b=c", 0.7, true},
		{"text bad value then good", "TEXT kv_cache_usage_perc=high, kv_cache_usage_perc=0.4", 0.4, true},
		{"text last valid wins", "TEXT kv_cache_usage_perc=0.4, kv_cache_usage_perc=0.6", 0.6, true},
		{"text zero", "TEXT kv_cache_usage_perc=0", 0, true},
		{"text one", "TEXT kv_cache_usage_perc=1", 1, true},
		{"text one point oh", "TEXT kv_cache_usage_perc=1.0", 1, true},
		{"text above one", "TEXT kv_cache_usage_perc=1.01", 0, false},
		{"text negative", "TEXT kv_cache_usage_perc=-0.1", 0, false},
		{"text NaN", "TEXT kv_cache_usage_perc=NaN", 0, false},
		{"text Inf", "TEXT kv_cache_usage_perc=Inf", 0, false},
		{"text names are case-sensitive", "TEXT KV_CACHE_USAGE_PERC=0.9", 0, false},
		{"text other metrics only", "TEXT cpu_utilization=0.9, named_metrics.num_requests_waiting=3", 0, false},
		{"text empty payload", "TEXT ", 0, false},
		{"json vllm", `JSON {"named_metrics":{"kv_cache_usage_perc":0.82}}`, 0.82, true},
		{"json lowercase format", `json {"named_metrics":{"kv_cache_usage_perc":0.82}}`, 0.82, true},
		{"json triton", `JSON {"named_metrics":{"kv_cache_utilization":0.97}}`, 0.97, true},
		{"json both", `JSON {"named_metrics":{"kv_cache_utilization":0.1,"kv_cache_usage_perc":0.91}}`, 0.91, true},
		{"json vllm null falls back", `JSON {"named_metrics":{"kv_cache_usage_perc":null,"kv_cache_utilization":0.8}}`, 0.8, true},
		{"json vllm string falls back", `JSON {"named_metrics":{"kv_cache_usage_perc":"0.9","kv_cache_utilization":0.8}}`, 0.8, true},
		{"json spaced", ` JSON   { "named_metrics" : { "kv_cache_usage_perc" : 0.5 } } `, 0.5, true},
		{"json other fields", `JSON {"cpu_utilization":0.3,"named_metrics":{"kv_cache_usage_perc":0.5,"x":"y"}}`, 0.5, true},
		{"json out of range", `JSON {"named_metrics":{"kv_cache_usage_perc":5}}`, 0, false},
		{"json empty metrics", `JSON {"named_metrics":{}}`, 0, false},
		{"json no metrics", `JSON {}`, 0, false},
		{"json invalid", `JSON {"named_metrics":`, 0, false},
		{"json not an object", `JSON [1,2]`, 0, false},
		{"json metrics not a map", `JSON {"named_metrics":0.9}`, 0, false},
		{"json huge number", `JSON {"named_metrics":{"kv_cache_usage_perc":1e400}}`, 0, false},
		{"no space", "TEXT", 0, false},
		{"no space with payload", "TEXTkv_cache_usage_perc=0.9", 0, false},
		{"empty", "", 0, false},
		{"unknown format", "BIN AAAA", 0, false},
		{"tab is not the separator", "TEXT\tkv_cache_usage_perc=0.9", 0, false},
	}
	for _, tc := range tests {
		got, ok := pacing.ParseORCA(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ParseORCA(%q) = %v, %v; want %v, %v", tc.name, tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestORCARate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		util float64
		want float64
		ok   bool
	}{
		{0, 0, false},
		{0.5, 0, false},
		{0.6999, 0, false},
		{math.Nextafter(0.70, 0), 0, false},
		{0.70, 2, true},
		{0.8, 2, true},
		{math.Nextafter(0.90, 0), 2, true},
		{0.90, 0.5, true},
		{0.95, 0.5, true},
		{math.Nextafter(0.97, 0), 0.5, true},
		{0.97, 0.25, true},
		{0.99, 0.25, true},
		{1, 0.25, true},
		{1.5, 0.25, true},
		{math.Inf(1), 0.25, true},
		{-1, 0, false},
		{math.Inf(-1), 0, false},
		{math.NaN(), 0, false},
	}
	for _, tc := range tests {
		got, ok := pacing.ORCARate(tc.util)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ORCARate(%v) = %v, %v; want %v, %v", tc.util, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := at(500 * time.Millisecond) // sub-second "now": dates are whole seconds
	date := func(d time.Duration) string { return t0.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"0005", 5 * time.Second, true},
		{"3599", 3599 * time.Second, true},
		{"3600", pacing.MaxPause, true},
		{"3601", pacing.MaxPause, true},
		{"86400", pacing.MaxPause, true},
		{"99999999999999999999999999", pacing.MaxPause, true},
		// HTTP-date, all three formats http.ParseTime accepts.
		{date(10 * time.Second), 9500 * time.Millisecond, true},
		{t0.Add(10 * time.Second).Format(time.RFC850), 9500 * time.Millisecond, true},
		{t0.Add(10 * time.Second).Format(time.ANSIC), 9500 * time.Millisecond, true},
		{date(30 * time.Minute), 30*time.Minute - 500*time.Millisecond, true},
		{date(2 * time.Hour), pacing.MaxPause, true},
		{date(0), 0, true},          // just passed
		{date(-time.Hour), 0, true}, // in the past
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0, true},
		// Garbage.
		{"", 0, false},
		{"  ", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"NaN", 0, false},
		{"Fri, 01 Mar 2024 12:00:10", 0, false}, // no zone
		{"2024-03-01T12:00:10Z", 0, false},      // not an HTTP-date
	}
	for _, tc := range tests {
		got, ok := pacing.ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		h      http.Header
		want   time.Duration
		source string
	}{
		{"none", hdr(), 0, ""},
		{"nil header", nil, 0, ""},

		// GitHub.
		{"github exhausted", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(30*time.Second)), 30 * time.Second, "github"},
		{"github lowercase names", hdr("x-ratelimit-remaining", "0", "x-ratelimit-reset", epoch(30*time.Second)), 30 * time.Second, "github"},
		{"github whitespace", hdr("X-RateLimit-Remaining", " 0 ", "X-RateLimit-Reset", " "+epoch(30*time.Second)+" "), 30 * time.Second, "github"},
		{"github fractional epoch", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(30*time.Second)+".5"), 30500 * time.Millisecond, "github"},
		{"github remaining > 0", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", epoch(30*time.Second)), 0, ""},
		{"github remaining garbage", hdr("X-RateLimit-Remaining", "none", "X-RateLimit-Reset", epoch(30*time.Second)), 0, ""},
		{"github missing reset", hdr("X-RateLimit-Remaining", "0"), 0, ""},
		{"github garbage reset", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "later"), 0, ""},
		{"github missing remaining", hdr("X-RateLimit-Reset", epoch(30*time.Second)), 0, ""},
		{"github reset passed", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(-time.Second)), 0, ""},
		{"github reset now", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(0)), 0, ""},
		{"github reset is delta, so long past", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "60"), 0, ""},
		{"github clamped", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(5*time.Hour)), pacing.MaxPause, "github"},
		{"github huge", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1e300"), pacing.MaxPause, "github"},

		// OpenAI.
		{"openai seconds", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"), time.Second, "openai"},
		{"openai ms", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms"), 20 * time.Millisecond, "openai"},
		{"openai minutes", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6m0s"), 6 * time.Minute, "openai"},
		{"openai compound", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1h2m3.5s"), pacing.MaxPause, "openai"},
		{"openai compound below cap", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2m3.5s"), 123500 * time.Millisecond, "openai"},
		{"openai fractional", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0.5s"), 500 * time.Millisecond, "openai"},
		{"openai leading dot", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", ".25s"), 250 * time.Millisecond, "openai"},
		{"openai micro", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1500us"), 1500 * time.Microsecond, "openai"},
		{"openai micro sign", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1500µs"), 1500 * time.Microsecond, "openai"},
		{"openai nanos", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "7ns"), 7, "openai"},
		{"openai bare seconds", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "3"), 3 * time.Second, "openai"},
		{"openai bare fractional", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0.5"), 500 * time.Millisecond, "openai"},
		{"openai canonical names", hdr("X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "2s"), 2 * time.Second, "openai"},
		{"openai huge clamps", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "99999999999h"), pacing.MaxPause, "openai"},
		{"openai zero", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0s"), 0, ""},
		{"openai negative", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "-5s"), 0, ""},
		{"openai remaining > 0", hdr("x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "1s"), 0, ""},
		{"openai missing reset", hdr("x-ratelimit-remaining-requests", "0"), 0, ""},
		{"openai garbage reset", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1d"), 0, ""},
		{"openai unit only", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "s"), 0, ""},
		{"openai tokens are not requests", hdr("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s"), 0, ""},

		// IETF, separate fields.
		{"ietf separate", hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "5"), 5 * time.Second, "ietf"},
		{"ietf separate lowercase", hdr("ratelimit-remaining", "0", "ratelimit-reset", "5"), 5 * time.Second, "ietf"},
		{"ietf separate remaining > 0", hdr("RateLimit-Remaining", "3", "RateLimit-Reset", "5"), 0, ""},
		{"ietf separate missing reset", hdr("RateLimit-Remaining", "0"), 0, ""},
		{"ietf separate reset 0", hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "0"), 0, ""},
		{"ietf separate clamped", hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "7200"), pacing.MaxPause, "ietf"},

		// IETF, combined dictionary.
		{"ietf combined", hdr("RateLimit", "limit=100, remaining=0, reset=5"), 5 * time.Second, "ietf"},
		{"ietf combined any order", hdr("RateLimit", "reset=7,remaining=0,limit=10"), 7 * time.Second, "ietf"},
		{"ietf combined spaced", hdr("RateLimit", "  limit = 100 ,  remaining = 0 , reset = 5 "), 5 * time.Second, "ietf"},
		{"ietf combined remaining > 0", hdr("RateLimit", "limit=100, remaining=1, reset=5"), 0, ""},
		{"ietf combined missing reset", hdr("RateLimit", "limit=100, remaining=0"), 0, ""},
		{"ietf combined missing remaining", hdr("RateLimit", "limit=100, reset=5"), 0, ""},

		// IETF, structured fields.
		{"ietf sf", hdr("RateLimit", `"default";r=0;t=5`), 5 * time.Second, "ietf"},
		{"ietf sf token name", hdr("RateLimit", `default;r=0;t=5`), 5 * time.Second, "ietf"},
		{"ietf sf spaced", hdr("RateLimit", ` "default" ; r=0 ; t=5 `), 5 * time.Second, "ietf"},
		{"ietf sf not exhausted", hdr("RateLimit", `"default";r=10;t=5`), 0, ""},
		{"ietf sf largest exhausted t", hdr("RateLimit", `"burst";r=0;t=2, "day";r=0;t=40, "hour";r=7;t=900`), 40 * time.Second, "ietf"},
		{"ietf sf two header lines", hdr("RateLimit", `"burst";r=0;t=2`, "RateLimit", `"day";r=0;t=40`), 40 * time.Second, "ietf"},
		{"ietf sf comma inside name", hdr("RateLimit", `"a,b";r=0;t=9`), 9 * time.Second, "ietf"},
		{"ietf sf escaped quote in name", hdr("RateLimit", `"a\",b";r=0;t=9`), 9 * time.Second, "ietf"},
		{"ietf sf t from policy", hdr("RateLimit", `"default";r=0`, "RateLimit-Policy", `"default";q=100;w=60`), time.Minute, "ietf"},
		{"ietf sf policy token name", hdr("RateLimit", `"default";r=0`, "RateLimit-Policy", `default;q=100;w=60`), time.Minute, "ietf"},
		{"ietf sf policy picks same name", hdr("RateLimit", `"day";r=0`, "RateLimit-Policy", `"burst";q=10;w=1, "day";q=1000;w=600`), 10 * time.Minute, "ietf"},
		{"ietf sf policy other name", hdr("RateLimit", `"day";r=0`, "RateLimit-Policy", `"burst";q=10;w=1`), 0, ""},
		{"ietf sf policy without w", hdr("RateLimit", `"day";r=0`, "RateLimit-Policy", `"day";q=10`), 0, ""},
		{"ietf sf no t, no policy", hdr("RateLimit", `"default";r=0`), 0, ""},
		{"ietf sf t beats policy", hdr("RateLimit", `"default";r=0;t=3`, "RateLimit-Policy", `"default";q=100;w=60`), 3 * time.Second, "ietf"},
		{"ietf sf mixed t and policy", hdr("RateLimit", `"a";r=0;t=3, "b";r=0`, "RateLimit-Policy", `"b";w=30`), 30 * time.Second, "ietf"},
		{"ietf sf t garbage", hdr("RateLimit", `"default";r=0;t=soon`), 0, ""},
		{"ietf sf unterminated quote", hdr("RateLimit", `"default;r=0;t=5`), 0, ""},
		{"ietf sf garbage", hdr("RateLimit", `;;,,=,"`), 0, ""},

		// Several families: the longest wins.
		{"longest: ietf", hdr(
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(10*time.Second),
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s",
			"RateLimit", `"default";r=0;t=30`,
		), 30 * time.Second, "ietf"},
		{"longest: github", hdr(
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(50*time.Second),
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s",
			"RateLimit", `"default";r=0;t=30`,
		), 50 * time.Second, "github"},
		{"longest: openai", hdr(
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(10*time.Second),
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m",
		), time.Minute, "openai"},
		{"longest: only exhausted count", hdr(
			"X-RateLimit-Remaining", "5", "X-RateLimit-Reset", epoch(50*time.Second),
			"RateLimit-Remaining", "0", "RateLimit-Reset", "4",
		), 4 * time.Second, "ietf"},
		{"longest: ietf forms", hdr(
			"RateLimit-Remaining", "0", "RateLimit-Reset", "4",
			"RateLimit", "limit=1, remaining=0, reset=8",
		), 8 * time.Second, "ietf"},
		{"tie: first family", hdr(
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(10*time.Second),
			"RateLimit-Remaining", "0", "RateLimit-Reset", "10",
		), 10 * time.Second, "github"},
	}
	for _, tc := range tests {
		got, src, ok := pacing.ParseRateLimit(tc.h, t0)
		if got != tc.want || src != tc.source || ok != (tc.want > 0) {
			t.Errorf("%s: ParseRateLimit = %v, %q, %v; want %v, %q, %v", tc.name, got, src, ok, tc.want, tc.source, tc.want > 0)
		}
	}
}

func TestParseSignals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		h      http.Header
		want   pacing.Signals
	}{
		{"empty", 200, hdr(), pacing.Signals{}},
		{"nil header", 200, nil, pacing.Signals{}},

		// Rate and its alias.
		{"rps", 200, hdr("X-Aqueduct-Rps", "3"), pacing.Signals{RPS: 3}},
		{"rps lowercase name", 200, hdr("x-aqueduct-rps", "3"), pacing.Signals{RPS: 3}},
		{"rps alias", 200, hdr("X-Aquifer-Rps", "4"), pacing.Signals{RPS: 4}},
		{"rps preferred wins", 200, hdr("X-Aquifer-Rps", "4", "X-Aqueduct-Rps", "3"), pacing.Signals{RPS: 3}},
		{"rps empty preferred uses alias", 200, hdr("X-Aqueduct-Rps", "", "X-Aquifer-Rps", "4"), pacing.Signals{RPS: 4}},
		{"rps blank preferred uses alias", 200, hdr("X-Aqueduct-Rps", "   ", "X-Aquifer-Rps", "4"), pacing.Signals{RPS: 4}},
		{"rps garbage preferred does not fall back", 200, hdr("X-Aqueduct-Rps", "fast", "X-Aquifer-Rps", "4"), pacing.Signals{}},
		{"rps garbage", 200, hdr("X-Aqueduct-Rps", "fast"), pacing.Signals{}},
		{"rps zero is the slowest", 200, hdr("X-Aqueduct-Rps", "0"), pacing.Signals{RPS: pacing.SlowestRPS}},
		{"rps negative is the slowest", 200, hdr("X-Aquifer-Rps", "-2"), pacing.Signals{RPS: pacing.SlowestRPS}},
		{"rps NaN ignored", 200, hdr("X-Aqueduct-Rps", "NaN"), pacing.Signals{}},

		// Concurrency and its alias.
		{"conc", 200, hdr("X-Aqueduct-Max-Concurrent", "2"), pacing.Signals{MaxConcurrent: 2}},
		{"conc alias", 200, hdr("x-aquifer-max-concurrent", "5"), pacing.Signals{MaxConcurrent: 5}},
		{"conc preferred wins", 200, hdr("X-Aqueduct-Max-Concurrent", "2", "X-Aquifer-Max-Concurrent", "5"), pacing.Signals{MaxConcurrent: 2}},
		{"conc empty preferred uses alias", 200, hdr("X-Aqueduct-Max-Concurrent", "", "X-Aquifer-Max-Concurrent", "5"), pacing.Signals{MaxConcurrent: 5}},
		{"conc zero ignored", 200, hdr("X-Aqueduct-Max-Concurrent", "0"), pacing.Signals{}},
		{"conc negative ignored", 200, hdr("X-Aqueduct-Max-Concurrent", "-3"), pacing.Signals{}},
		{"conc garbage ignored", 200, hdr("X-Aqueduct-Max-Concurrent", "many"), pacing.Signals{}},

		// ORCA.
		{"orca", 200, hdr("endpoint-load-metrics", "TEXT named_metrics.kv_cache_usage_perc=0.82"),
			pacing.Signals{Utilization: 0.82, HasUtilization: true}},
		{"orca second value used when first unusable", 200, hdr("Endpoint-Load-Metrics", "BIN xx", "Endpoint-Load-Metrics", `JSON {"named_metrics":{"kv_cache_utilization":0.3}}`),
			pacing.Signals{Utilization: 0.3, HasUtilization: true}},
		{"orca garbage", 200, hdr("Endpoint-Load-Metrics", "TEXT nothing"), pacing.Signals{}},
		{"orca with rps: both reported", 200, hdr("X-Aqueduct-Rps", "3", "Endpoint-Load-Metrics", "TEXT kv_cache_usage_perc=0.99"),
			pacing.Signals{RPS: 3, Utilization: 0.99, HasUtilization: true}},

		// Retry-After only on 429 and 503.
		{"retry-after 429", 429, hdr("Retry-After", "7"), pacing.Signals{RetryAfter: 7 * time.Second}},
		{"retry-after 503", 503, hdr("retry-after", "7"), pacing.Signals{RetryAfter: 7 * time.Second}},
		{"retry-after date", 429, hdr("Retry-After", t0.Add(time.Minute).Format(http.TimeFormat)), pacing.Signals{RetryAfter: time.Minute}},
		{"retry-after past date", 503, hdr("Retry-After", t0.Add(-time.Minute).Format(http.TimeFormat)), pacing.Signals{}},
		{"retry-after clamped", 429, hdr("Retry-After", "100000"), pacing.Signals{RetryAfter: pacing.MaxPause}},
		{"retry-after garbage", 429, hdr("Retry-After", "later"), pacing.Signals{}},
		{"retry-after on 200 ignored", 200, hdr("Retry-After", "7"), pacing.Signals{}},
		{"retry-after on 500 ignored", 500, hdr("Retry-After", "7"), pacing.Signals{}},
		{"retry-after on 301 ignored", 301, hdr("Retry-After", "7"), pacing.Signals{}},

		// Rate-limit families on any status.
		{"ratelimit on 200", 200, hdr("RateLimit", `"default";r=0;t=5`), pacing.Signals{ResetIn: 5 * time.Second, ResetSource: "ietf",
			Budget: pacing.Budget{ResetIn: 5 * time.Second, Source: "ietf"}}},
		{"ratelimit on 429 with retry-after", 429, hdr("Retry-After", "2", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(9*time.Second)),
			pacing.Signals{RetryAfter: 2 * time.Second, ResetIn: 9 * time.Second, ResetSource: "github",
				Budget: pacing.Budget{ResetIn: 9 * time.Second, Source: "github"}}},
		{"ratelimit not exhausted", 200, hdr("RateLimit", `"default";r=1;t=5`),
			pacing.Signals{Budget: pacing.Budget{Remaining: 1, ResetIn: 5 * time.Second, Source: "ietf"}}},

		// Everything at once.
		{"all", 503, hdr(
			"X-Aquifer-Rps", "1.5",
			"X-Aqueduct-Max-Concurrent", "2",
			"Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.91",
			"Retry-After", "3",
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "4s",
		), pacing.Signals{RPS: 1.5, MaxConcurrent: 2, Utilization: 0.91, HasUtilization: true, RetryAfter: 3 * time.Second, ResetIn: 4 * time.Second, ResetSource: "openai",
			Budget: pacing.Budget{ResetIn: 4 * time.Second, Source: "openai"}}},
	}
	for _, tc := range tests {
		got := pacing.ParseSignals(tc.status, tc.h, t0)
		if got != tc.want {
			t.Errorf("%s: ParseSignals = %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestParseSignalsRawResponse reads headers off the wire, spelled in
// whatever case the upstream chose, the way the app gets them.
func TestParseSignalsRawResponse(t *testing.T) {
	t.Parallel()
	raw := "HTTP/1.1 429 Too Many Requests\r\n" +
		"x-aqueduct-rps: 0.75\r\n" +
		"X-AQUIFER-MAX-CONCURRENT: 2\r\n" +
		"ENDPOINT-LOAD-METRICS: text named_metrics.kv_cache_utilization=0.95\r\n" +
		"retry-after: 12\r\n" +
		"ratelimit: limit=10, remaining=0, reset=20\r\n" +
		"Content-Length: 0\r\n\r\n"
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := pacing.ParseSignals(resp.StatusCode, resp.Header, t0)
	want := pacing.Signals{RPS: 0.75, MaxConcurrent: 2, Utilization: 0.95, HasUtilization: true,
		RetryAfter: 12 * time.Second, ResetIn: 20 * time.Second, ResetSource: "ietf",
		Budget: pacing.Budget{Limit: 10, ResetIn: 20 * time.Second, Source: "ietf"}}
	if got != want {
		t.Errorf("ParseSignals = %+v\nwant %+v", got, want)
	}
}

// TestParseSignalsDeterministic checks that the same input always gives the
// same output (nothing depends on map order or the clock).
func TestParseSignalsDeterministic(t *testing.T) {
	t.Parallel()
	h := hdr(
		"Endpoint-Load-Metrics", `JSON {"named_metrics":{"kv_cache_utilization":0.1,"kv_cache_usage_perc":0.91,"a":1,"b":2,"c":3}}`,
		"RateLimit", `"a";r=0;t=3, "b";r=0, "c";r=0;t=3`,
		"RateLimit-Policy", `"b";w=3, "b";w=9`,
		"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(3*time.Second),
	)
	first := pacing.ParseSignals(429, h, t0)
	want := pacing.Signals{Utilization: 0.91, HasUtilization: true, ResetIn: 3 * time.Second, ResetSource: "github",
		Budget: pacing.Budget{ResetIn: 3 * time.Second, Source: "github"}}
	if first != want {
		t.Fatalf("ParseSignals = %+v\nwant %+v", first, want)
	}
	for range 200 {
		if got := pacing.ParseSignals(429, h, t0); got != first {
			t.Fatalf("ParseSignals changed: %+v then %+v", first, got)
		}
	}
}

func BenchmarkParseSignals(b *testing.B) {
	plain := hdr("Content-Type", "application/json", "Content-Length", "42", "Date", "Fri, 01 Mar 2024 12:00:00 GMT", "Server", "nginx")
	full := hdr(
		"Content-Type", "application/json",
		"X-Aqueduct-Rps", "2.5",
		"X-Aqueduct-Max-Concurrent", "3",
		"Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc=0.82, named_metrics.num_requests_waiting=3",
		"Retry-After", "5",
		"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(30*time.Second),
		"RateLimit", `"default";r=0`, "RateLimit-Policy", `"default";q=100;w=60`,
	)
	for _, bc := range []struct {
		name string
		h    http.Header
	}{{"plain", plain}, {"full", full}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				pacing.ParseSignals(429, bc.h, t0)
			}
		})
	}
}

// TestHeaderConstantsCanonical: ParseSignals indexes the header map with
// these names directly, so they must be in canonical form.
func TestHeaderConstantsCanonical(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		pacing.HeaderRPS, pacing.HeaderRPSAlias, pacing.HeaderMaxConcurrent, pacing.HeaderMaxConcurrentAlias,
		pacing.HeaderORCA, pacing.HeaderORCAFormat, pacing.HeaderRetryAfter,
	} {
		if c := http.CanonicalHeaderKey(name); c != name {
			t.Errorf("%q is not canonical (%q)", name, c)
		}
	}
}
