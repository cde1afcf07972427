package pacing

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Limit header names read by ParseBudget, besides the remaining and reset
// headers ParseRateLimit reads.
const (
	hGitHubLimit = "X-Ratelimit-Limit"
	hOpenAILimit = "X-Ratelimit-Limit-Requests"
	hIETFLimit   = "Ratelimit-Limit"
)

// Budget is a rate-limit window as one response reports it: how many
// requests the window allows (Limit, 0 when the response does not say), how
// many of them are left (Remaining) and how long until the window starts
// afresh (ResetIn). It is read whatever Remaining is, so a lane can spread
// what is left over the time left instead of running until it is gone.
type Budget struct {
	Limit     float64
	Remaining float64
	ResetIn   time.Duration
	// Source is the family that reported it ("github", "openai", "ietf");
	// "" when the response carried no usable budget.
	Source string
}

// Known reports whether the response carried a budget.
func (b Budget) Known() bool { return b.Source != "" }

// ParseBudget reads the request budget of every rate-limit family
// ParseRateLimit knows, at any remaining count, and returns the tightest:
// the one allowing the fewest requests per second from now to its reset
// (Remaining ÷ ResetIn; on a tie, the first in the order github, openai,
// ietf). A family counts only with a remaining count that is a number >= 0
// and a reset still in the future; resets are clamped to MaxPause. Limits
// are the families' limit headers (X-RateLimit-Limit,
// x-ratelimit-limit-requests, RateLimit-Limit, limit= of the combined
// RateLimit field, q= of the RateLimit-Policy item of the same name); a
// limit below the remaining count is dropped as inconsistent.
func ParseBudget(h http.Header, now time.Time) Budget {
	var best Budget
	bestRate := math.Inf(1)
	consider := func(b Budget, ok bool) {
		if !ok || b.ResetIn <= 0 || !(b.Remaining >= 0) {
			return
		}
		if b.Limit < b.Remaining {
			b.Limit = 0
		}
		if r := b.Remaining / b.ResetIn.Seconds(); r < bestRate {
			best, bestRate = b, r
		}
	}
	consider(githubBudget(h, now))
	consider(openAIBudget(h))
	for _, b := range ietfBudgets(h) {
		consider(b, true)
	}
	return best
}

func githubBudget(h http.Header, now time.Time) (Budget, bool) {
	rem, ok := parseDecimal(get(h, hGitHubRemaining))
	if !ok {
		return Budget{}, false
	}
	epoch, ok := parseDecimal(get(h, hGitHubReset))
	if !ok {
		return Budget{}, false
	}
	sec := epoch - float64(now.Unix()) - float64(now.Nanosecond())/1e9
	limit, _ := parseDecimal(get(h, hGitHubLimit))
	return Budget{Limit: limit, Remaining: rem, ResetIn: secondsToPause(sec), Source: SourceGitHub}, true
}

func openAIBudget(h http.Header) (Budget, bool) {
	rem, ok := parseDecimal(get(h, hOpenAIRemaining))
	if !ok {
		return Budget{}, false
	}
	v := strings.TrimSpace(get(h, hOpenAIReset))
	d, ok := time.Duration(0), false
	if sec, isNum := parseDecimal(v); isNum {
		d, ok = secondsToPause(sec), true
	} else {
		d, ok = parseDuration(v)
	}
	if !ok {
		return Budget{}, false
	}
	limit, _ := parseDecimal(get(h, hOpenAILimit))
	return Budget{Limit: limit, Remaining: rem, ResetIn: d, Source: SourceOpenAI}, true
}

// ietfBudgets reads the three generations of the IETF draft: separate
// fields, the combined dictionary and structured items (each item a budget
// of its own).
func ietfBudgets(h http.Header) []Budget {
	var out []Budget
	mk := func(limit, remaining, reset string) {
		rem, ok := parseDecimal(remaining)
		if !ok {
			return
		}
		sec, ok := parseDecimal(reset)
		if !ok {
			return
		}
		lim, _ := parseDecimal(limit)
		out = append(out, Budget{Limit: lim, Remaining: rem, ResetIn: secondsToPause(sec), Source: SourceIETF})
	}
	mk(get(h, hIETFLimit), get(h, hIETFRemaining), get(h, hIETFReset))
	rl := strings.Join(h[hIETF], ",")
	if strings.TrimSpace(rl) == "" {
		return out
	}
	var policy map[string]sfItem
	var dictLimit, dictRemaining, dictReset string
	for _, member := range splitSF(rl, ',') {
		it := parseSFItem(member)
		if it.dictKey != "" {
			switch strings.ToLower(it.dictKey) {
			case "limit":
				dictLimit = it.name
			case "remaining":
				dictRemaining = it.name
			case "reset":
				dictReset = it.name
			}
			continue
		}
		r, ok := it.param("r")
		if !ok {
			continue
		}
		if policy == nil {
			policy = policyItems(h)
		}
		pol := policy[it.name]
		t, ok := it.param("t")
		if !ok {
			t, _ = pol.param("w")
		}
		q, _ := pol.param("q")
		mk(q, r, t)
	}
	if dictRemaining != "" {
		mk(dictLimit, dictRemaining, dictReset)
	}
	return out
}

// policyItems maps each RateLimit-Policy item name to the item (the first
// of a name wins).
func policyItems(h http.Header) map[string]sfItem {
	m := map[string]sfItem{}
	for _, member := range splitSF(strings.Join(h[hIETFPolicy], ","), ',') {
		it := parseSFItem(member)
		if _, seen := m[it.name]; seen || it.dictKey != "" {
			continue
		}
		m[it.name] = it
	}
	return m
}
