// Package pacing holds Aquifer's pure pacing algorithms: a start-spacing rate
// limiter whose rate can change at any moment, a concurrency gate whose limit
// can change, jitter, the parsers that read pacing signals from upstream
// responses, and the per-lane Pace that turns those signals into a rate and a
// concurrency limit. Nothing here starts goroutines, sleeps or reads the
// clock: callers pass the current time in, and get back how long to wait. That
// makes every algorithm deterministic under test. It imports only the
// standard library, and no input makes it panic.
//
// The types are not safe for concurrent use; each lane owns its own.
//
// # Signals
//
// ParseSignals reads one response. Header names are case-insensitive (keys
// must be canonical, as net/http makes them); values are trimmed.
//
//   - Rate: X-Aqueduct-Rps, or X-Aquifer-Rps when the former is absent or
//     empty. A decimal number (ParseRPS). Garbage, NaN and Inf are ignored; a
//     value <= 0 means "as slow as you allow" and is reported as SlowestRPS.
//     A present but unparseable X-Aqueduct-Rps is ignored without falling
//     back to the alias.
//   - Concurrency: X-Aqueduct-Max-Concurrent, else X-Aquifer-Max-Concurrent
//     (same precedence). A positive integer (ParseMaxConcurrent); 0,
//     negative and garbage are ignored.
//   - ORCA: endpoint-load-metrics, "TEXT name=value, …" or
//     "JSON {"named_metrics":{…}}" (ParseORCA). kv_cache_usage_perc (vLLM)
//     is preferred over kv_cache_utilization (Triton, TensorRT-LLM); values
//     outside [0,1] are ignored. ORCARate maps utilization to a rate:
//     [0.70, 0.90) → 2 rps, [0.90, 0.97) → 0.5, ≥ 0.97 → 0.25, below 0.70
//     nothing.
//   - Retry-After, on 429 and 503 responses only: delta-seconds or an
//     HTTP-date; a past date is 0 (ParseRetryAfter).
//   - Rate-limit headers (ParseRateLimit) on any response: GitHub
//     (X-RateLimit-Remaining/-Reset epoch), OpenAI
//     (x-ratelimit-remaining-requests/x-ratelimit-reset-requests duration) and
//     the three generations of the IETF draft (RateLimit-Remaining/-Reset;
//     RateLimit: limit=…, remaining=0, reset=…; RateLimit: "name";r=0;t=…
//     with RateLimit-Policy w as the fallback). Only remaining exactly 0 with
//     a reset still in the future counts; the longest reset wins.
//
// Every pause (Retry-After, ResetIn) is clamped to [0, MaxPause] (one hour).
//
// ParseBudget reads the same families at any remaining count (with their
// limit headers) into Signals.Budget: the tightest window, the one allowing
// the fewest requests per second to its reset.
//
// # Budget
//
// A BudgetPacer spreads a window's remaining requests over the time to its
// reset: rate = (left − reserve) ÷ time left, capped at the ceiling, where
// left counts requests in flight and every start since the last report,
// and the reserve (5 % of the limit, at least 1) is never spent — so
// Aquifer's own traffic never takes remaining to 0. When the reset passes
// one request probes the next window before the rest go.
//
// # Pace
//
// A Pace starts at its ceiling (the configured rps and max_concurrent). For
// each completion, Observe applies, in order of precedence: an explicit rate,
// clamped to [MinRPS (0.5), ceiling] — it may raise the pace back to the
// ceiling; else an ORCA rate, clamped to [MinORCARPS (0.25), ceiling]; else
// recovery, rate × RecoveryFactor (1.05) up to the ceiling. An explicit
// concurrency is clamped to [1, ceiling]; without one, concurrency below the
// ceiling grows by 1 every ConcurrencyRecoveryEvery (10) completions. Pauses
// are not part of the Pace: the caller holds the lane (Limiter.Delay).
//
// # Adaptive concurrency
//
// An Adaptive finds, for a destination that sends no signals, the
// concurrency where its latency starts to climb: a gradient limit,
// limit × clamp(noLoadRTT ÷ RTT, 0.5, 1) + max(1, √limit ÷ 2) per sampling
// window, rising at once and falling smoothed; × 0.8 after a window with a
// failure; never grown while the lane uses less than half of it; always in
// [1, MaxConcurrent]. The no-load RTT is measured by a probe at
// ProbeConcurrency (4) when it starts and every ProbeEvery (30 s), and is
// the minimum window RTT in between. Samples carry their RTT, so the time
// is the caller's (Observe(now, …)) like everything else here.
package pacing
