package pacing

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxPause caps how long any single response can make Aquifer wait (Retry-After or a rate-limit reset).
const MaxPause = time.Hour

// SlowestRPS is what ParseSignals reports in Signals.RPS when the upstream
// sent an explicit rate <= 0 ("as slow as you allow"). It is the smallest
// positive float64, below every possible floor, so Pace.Observe lands on the
// floor. Signals.RPS > 0 therefore always means "an explicit rate was given".
const SlowestRPS = math.SmallestNonzeroFloat64

// Response header names read by ParseSignals, in canonical form, and the
// request header that asks an upstream for ORCA load reports.
const (
	HeaderRPS                = "X-Aqueduct-Rps"
	HeaderRPSAlias           = "X-Aquifer-Rps"
	HeaderMaxConcurrent      = "X-Aqueduct-Max-Concurrent"
	HeaderMaxConcurrentAlias = "X-Aquifer-Max-Concurrent"
	HeaderORCA               = "Endpoint-Load-Metrics"
	HeaderORCAFormat         = "Endpoint-Load-Metrics-Format" // request header; value "text"
	HeaderRetryAfter         = "Retry-After"
)

// Rate-limit header families.
const (
	SourceGitHub = "github"
	SourceOpenAI = "openai"
	SourceIETF   = "ietf"
)

const (
	hGitHubRemaining = "X-Ratelimit-Remaining"
	hGitHubReset     = "X-Ratelimit-Reset"
	hOpenAIRemaining = "X-Ratelimit-Remaining-Requests"
	hOpenAIReset     = "X-Ratelimit-Reset-Requests"
	hIETFRemaining   = "Ratelimit-Remaining"
	hIETFReset       = "Ratelimit-Reset"
	hIETF            = "Ratelimit"
	hIETFPolicy      = "Ratelimit-Policy"
)

// ORCA metric names, in order of preference.
const (
	orcaMetricVLLM   = "kv_cache_usage_perc"  // vLLM
	orcaMetricTriton = "kv_cache_utilization" // Triton / TensorRT-LLM
	orcaNamedPrefix  = "named_metrics."
)

// ORCA utilization tiers: at or above the threshold, the suggested rate.
const (
	orcaTier1, orcaTier1RPS = 0.70, 2
	orcaTier2, orcaTier2RPS = 0.90, 0.5
	orcaTier3, orcaTier3RPS = 0.97, 0.25
)

// Signals are the pacing hints found in one HTTP response.
type Signals struct {
	// RPS is the explicit rate from X-Aqueduct-Rps, else X-Aquifer-Rps;
	// 0 = absent. An explicit value <= 0 is reported as SlowestRPS.
	RPS float64
	// MaxConcurrent is from X-Aqueduct-Max-Concurrent, else
	// X-Aquifer-Max-Concurrent; 0 = absent.
	MaxConcurrent int
	// Utilization is the ORCA KV-cache utilization in [0,1]; valid only if
	// HasUtilization.
	Utilization    float64
	HasUtilization bool
	// RetryAfter is from Retry-After on a 429 or 503 response; 0 = none.
	// Clamped to [0, MaxPause].
	RetryAfter time.Duration
	// ResetIn is set when a rate-limit header family reports 0 requests
	// remaining: wait this long. 0 = not exhausted. Clamped to MaxPause.
	ResetIn time.Duration
	// ResetSource is the family that produced ResetIn: "github", "openai" or
	// "ietf"; "" when ResetIn is 0.
	ResetSource string
	// Budget is the tightest rate-limit window the response reports, at
	// any remaining count (ParseBudget); its zero value when none.
	Budget Budget
}

// ParseSignals reads every signal from one response. status is the HTTP
// status code. Header keys must be canonical, as net/http produces them (and
// as http.Header's Set, Add and Get make them).
func ParseSignals(status int, h http.Header, now time.Time) Signals {
	var s Signals
	if v := preferred(h, HeaderRPS, HeaderRPSAlias); v != "" {
		if r, ok := ParseRPS(v); ok {
			if r <= 0 {
				r = SlowestRPS
			}
			s.RPS = r
		}
	}
	if v := preferred(h, HeaderMaxConcurrent, HeaderMaxConcurrentAlias); v != "" {
		if n, ok := ParseMaxConcurrent(v); ok {
			s.MaxConcurrent = n
		}
	}
	for _, v := range h[HeaderORCA] {
		if u, ok := ParseORCA(v); ok {
			s.Utilization, s.HasUtilization = u, true
			break
		}
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if d, ok := ParseRetryAfter(get(h, HeaderRetryAfter), now); ok {
			s.RetryAfter = d
		}
	}
	if d, src, ok := ParseRateLimit(h, now); ok {
		s.ResetIn, s.ResetSource = d, src
	}
	s.Budget = ParseBudget(h, now)
	return s
}

// get is h.Get for a key already in canonical form (every header name
// constant here is), skipping the re-canonicalisation.
func get(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// preferred returns the trimmed value of name if it is non-empty, else the
// trimmed value of alias.
func preferred(h http.Header, name, alias string) string {
	if v := strings.TrimSpace(get(h, name)); v != "" {
		return v
	}
	return strings.TrimSpace(get(h, alias))
}

// ParseRPS parses an explicit rate: a decimal number such as "2", "0.5" or
// "1e1", surrounding whitespace ignored. NaN, infinities, hexadecimal and
// anything else that is not a plain decimal number report false. A value
// <= 0 reports (0, true): "as slow as allowed".
func ParseRPS(v string) (float64, bool) {
	f, ok := parseDecimal(v)
	if !ok {
		return 0, false
	}
	if f <= 0 {
		return 0, true
	}
	return f, true
}

// ParseMaxConcurrent parses a concurrency limit: a positive decimal integer,
// surrounding whitespace ignored, optional leading "+". Zero, negative
// numbers and garbage report false. A value too large for an int reports
// math.MaxInt.
func ParseMaxConcurrent(v string) (int, bool) {
	v = strings.TrimSpace(v)
	v = strings.TrimPrefix(v, "+")
	if v == "" || !allDigits(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 0)
	if err != nil {
		// Only a range error is possible here: all digits, so the value is huge.
		return math.MaxInt, true
	}
	if n <= 0 {
		return 0, false
	}
	return int(n), true
}

// ParseORCA reads the KV-cache utilization from an endpoint-load-metrics
// response header value. The value is split at the first space into a format
// (TEXT or JSON, any case) and a payload:
//
//	TEXT named_metrics.kv_cache_usage_perc=0.82, named_metrics.num_requests_waiting=3
//	JSON {"named_metrics":{"kv_cache_usage_perc":0.82}}
//
// In TEXT, the payload is comma-separated name=value pairs; a name may carry
// a "named_metrics." prefix; malformed pairs are skipped; if a metric
// appears twice the last valid value wins. Metric names are case-sensitive.
// kv_cache_usage_perc
// (vLLM) is preferred; kv_cache_utilization (Triton, TensorRT-LLM) is used
// when the first is absent. A value outside [0,1] (or not a decimal number)
// counts as absent. It reports false when no usable metric is present.
func ParseORCA(v string) (float64, bool) {
	format, payload, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		return 0, false
	}
	payload = strings.TrimSpace(payload)
	var vllm, triton float64
	var hasVLLM, hasTriton bool
	set := func(name string, f float64) {
		if !(f >= 0 && f <= 1) { // also rejects NaN
			return
		}
		switch strings.TrimPrefix(strings.TrimSpace(name), orcaNamedPrefix) {
		case orcaMetricVLLM:
			vllm, hasVLLM = f, true
		case orcaMetricTriton:
			triton, hasTriton = f, true
		}
	}
	switch {
	case strings.EqualFold(format, "TEXT"):
		for pair := range strings.SplitSeq(payload, ",") {
			name, val, ok := strings.Cut(pair, "=")
			if !ok {
				continue
			}
			if f, ok := parseDecimal(val); ok {
				set(name, f)
			}
		}
	case strings.EqualFold(format, "JSON"):
		var doc struct {
			NamedMetrics map[string]json.RawMessage `json:"named_metrics"`
		}
		if json.Unmarshal([]byte(payload), &doc) != nil {
			return 0, false
		}
		// Direct look-ups, not map iteration, so the result is deterministic.
		for _, name := range [...]string{orcaMetricVLLM, orcaMetricTriton} {
			var f *float64 // stays nil for null
			if raw, ok := doc.NamedMetrics[name]; ok && json.Unmarshal(raw, &f) == nil && f != nil {
				set(name, *f)
			}
		}
	default:
		return 0, false
	}
	switch {
	case hasVLLM:
		return vllm, true
	case hasTriton:
		return triton, true
	}
	return 0, false
}

// ORCARate maps a KV-cache utilization to a suggested rate:
//
//	u < 0.70         no override (0, false)
//	0.70 <= u < 0.90 2 rps
//	0.90 <= u < 0.97 0.5 rps
//	u >= 0.97        0.25 rps
//
// NaN reports false.
func ORCARate(util float64) (float64, bool) {
	switch {
	case util >= orcaTier3:
		return orcaTier3RPS, true
	case util >= orcaTier2:
		return orcaTier2RPS, true
	case util >= orcaTier1:
		return orcaTier1RPS, true
	}
	return 0, false
}

// ParseRetryAfter parses a Retry-After value: delta-seconds (a non-negative
// decimal integer) or an HTTP-date in any format http.ParseTime accepts. A
// date in the past reports (0, true); the result is clamped to MaxPause.
// Anything else (including negative or fractional numbers) reports false.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if allDigits(v) {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= uint64(MaxPause/time.Second) {
			return MaxPause, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampPause(t.Sub(now)), true
}

// ParseRateLimit reports whether a rate-limit header family says no requests
// remain, and how long until its reset. Families:
//
//   - "github": X-RateLimit-Remaining: 0 with X-RateLimit-Reset: <unix epoch seconds>.
//   - "openai": x-ratelimit-remaining-requests: 0 with
//     x-ratelimit-reset-requests: <duration> such as 1s, 20ms, 6m0s,
//     1h2m3.5s, or a bare number of seconds.
//   - "ietf" (draft-ietf-httpapi-ratelimit-headers): RateLimit-Remaining: 0
//     with RateLimit-Reset: <seconds>; RateLimit: limit=100, remaining=0,
//     reset=5; or RateLimit: "default";r=0;t=5 (several items allowed; an
//     exhausted item without t takes the w of the same-named item in
//     RateLimit-Policy).
//
// A family counts only when remaining is exactly 0 and its reset is known and
// still in the future; resets are clamped to MaxPause. When several families
// are exhausted the longest reset wins (on a tie, the first in the order
// above). exhausted is false, with resetIn 0 and source "", otherwise.
func ParseRateLimit(h http.Header, now time.Time) (resetIn time.Duration, source string, exhausted bool) {
	consider := func(d time.Duration, ok bool, src string) {
		if ok && d > resetIn {
			resetIn, source = d, src
		}
	}
	d, ok := githubReset(h, now)
	consider(d, ok, SourceGitHub)
	d, ok = openAIReset(h)
	consider(d, ok, SourceOpenAI)
	d, ok = ietfReset(h)
	consider(d, ok, SourceIETF)
	if resetIn <= 0 {
		return 0, "", false
	}
	return resetIn, source, true
}

func githubReset(h http.Header, now time.Time) (time.Duration, bool) {
	if !isZero(get(h, hGitHubRemaining)) {
		return 0, false
	}
	epoch, ok := parseDecimal(get(h, hGitHubReset))
	if !ok {
		return 0, false
	}
	// Subtract in float seconds: epoch may be anything, and converting a huge
	// float to an int64 is undefined.
	sec := epoch - float64(now.Unix()) - float64(now.Nanosecond())/1e9
	return secondsToPause(sec), true
}

func openAIReset(h http.Header) (time.Duration, bool) {
	if !isZero(get(h, hOpenAIRemaining)) {
		return 0, false
	}
	v := strings.TrimSpace(get(h, hOpenAIReset))
	if sec, ok := parseDecimal(v); ok {
		return secondsToPause(sec), true
	}
	return parseDuration(v)
}

func ietfReset(h http.Header) (time.Duration, bool) {
	var best time.Duration
	found := false
	consider := func(sec float64) {
		if d := secondsToPause(sec); !found || d > best {
			best, found = d, true
		}
	}
	// Separate fields (early drafts).
	if isZero(get(h, hIETFRemaining)) {
		if sec, ok := parseDecimal(get(h, hIETFReset)); ok {
			consider(sec)
		}
	}
	rl := strings.Join(h[hIETF], ",")
	if strings.TrimSpace(rl) == "" {
		return best, found
	}
	var policyW map[string]string // name -> w; parsed lazily: only an exhausted item without t needs it
	// Combined dictionary (limit=…, remaining=…, reset=…) and structured items
	// ("name";r=…;t=…) are told apart member by member.
	var dictRemaining, dictReset string
	for _, member := range splitSF(rl, ',') {
		it := parseSFItem(member)
		if it.dictKey != "" {
			switch strings.ToLower(it.dictKey) {
			case "remaining":
				dictRemaining = it.name
			case "reset":
				dictReset = it.name
			}
			continue
		}
		r, ok := it.param("r")
		if !ok || !isZero(r) {
			continue
		}
		if t, ok := it.param("t"); ok {
			if sec, ok := parseDecimal(t); ok {
				consider(sec)
			}
			continue
		}
		if policyW == nil {
			policyW = policyWindows(h)
		}
		if w, ok := policyW[it.name]; ok {
			if sec, ok := parseDecimal(w); ok {
				consider(sec)
			}
		}
	}
	if isZero(dictRemaining) {
		if sec, ok := parseDecimal(dictReset); ok {
			consider(sec)
		}
	}
	return best, found
}

// policyWindows maps each RateLimit-Policy item name to its w parameter
// ("" when it has none). The first item of a name wins.
func policyWindows(h http.Header) map[string]string {
	m := map[string]string{}
	for _, member := range splitSF(strings.Join(h[hIETFPolicy], ","), ',') {
		it := parseSFItem(member)
		if _, seen := m[it.name]; seen || it.dictKey != "" {
			continue
		}
		w, _ := it.param("w")
		m[it.name] = w
	}
	return m
}

// sfItem is one member of a structured-field list: a bare item (a string or
// token) with parameters, or, for the combined draft form, a dictionary
// member key=value (dictKey set, the value in name).
type sfItem struct {
	name    string
	dictKey string
	params  []string // "key=value" or "key", trimmed
}

func (it sfItem) param(key string) (string, bool) {
	for _, p := range it.params {
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), key) {
			return unquote(strings.TrimSpace(v)), true
		}
	}
	return "", false
}

func parseSFItem(member string) sfItem {
	parts := splitSF(member, ';')
	var it sfItem
	head := ""
	if len(parts) > 0 {
		head = strings.TrimSpace(parts[0])
		it.params = parts[1:]
		for i := range it.params {
			it.params[i] = strings.TrimSpace(it.params[i])
		}
	}
	if !strings.HasPrefix(head, `"`) {
		if k, v, ok := strings.Cut(head, "="); ok {
			it.dictKey = strings.TrimSpace(k)
			it.name = unquote(strings.TrimSpace(v))
			return it
		}
	}
	it.name = unquote(head)
	return it
}

// splitSF splits s at sep outside double-quoted strings (which may contain
// backslash escapes).
func splitSF(s string, sep byte) []string {
	var out []string
	start, inQuote := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++ // skip the escaped byte
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// unquote removes the double quotes (and backslash escapes) of a
// structured-field string; anything else is returned unchanged.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseDuration parses a Go-style duration ("1h2m3.5s", "20ms", "-1s"),
// accumulating in floating point so that huge values clamp to MaxPause
// instead of overflowing. Negative results become 0.
func parseDuration(s string) (time.Duration, bool) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	var ns float64
	for s != "" {
		i := 0
		for i < len(s) && (s[i] == '.' || s[i] >= '0' && s[i] <= '9') {
			i++
		}
		num, ok := parseDecimal(s[:i]) // digits and dots only: never negative
		if !ok {
			return 0, false
		}
		s = s[i:]
		j := 0
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		unit, ok := durationUnits[s[:j]]
		if !ok {
			return 0, false
		}
		s = s[j:]
		ns += num * unit
	}
	if neg {
		ns = -ns
	}
	return secondsToPause(ns / 1e9), true
}

var durationUnits = map[string]float64{
	"ns": 1,
	"us": 1e3,
	"µs": 1e3, // U+00B5
	"μs": 1e3, // U+03BC
	"ms": 1e6,
	"s":  1e9,
	"m":  60e9,
	"h":  3600e9,
}

// secondsToPause converts seconds to a Duration in [0, MaxPause], rounding to
// the nearest nanosecond. NaN becomes 0.
func secondsToPause(sec float64) time.Duration {
	switch {
	case !(sec > 0):
		return 0
	case sec >= MaxPause.Seconds():
		return MaxPause
	}
	return time.Duration(math.Round(sec * 1e9))
}

func clampPause(d time.Duration) time.Duration {
	return min(max(d, 0), MaxPause)
}

// isZero reports whether v is a decimal number equal to 0.
func isZero(v string) bool {
	f, ok := parseDecimal(v)
	return ok && f == 0
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseDecimal parses a plain decimal number, surrounding whitespace
// ignored: an optional sign, digits with an optional fraction (at least one
// digit in total) and an optional exponent. Unlike strconv.ParseFloat it
// rejects NaN, Inf, hexadecimal and underscores; an overflowing value reports
// false.
func parseDecimal(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return 0, false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			exp++
		}
		if exp == 0 {
			return 0, false
		}
	}
	if i != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}
