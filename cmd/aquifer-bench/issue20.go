package main

// Issue 20's scenarios: pacing that never hits the limit.
//
//	budget    a simulated API with a budget of -budget-limit requests per
//	          -budget-window (GitHub-style X-RateLimit-* headers, 429 +
//	          Retry-After when it is gone); -budget-jobs queued jobs with a
//	          ceiling of -budget-rps; run with budget pacing on, then off.
//	adaptive  a simulated backend with a capacity of 40 concurrent requests
//	          (latency climbs past it, 503 past twice it), max_concurrent 256
//	          and no signals, for -adaptive-seconds; its capacity halves at
//	          half time; run with adaptive concurrency on, then static.
//
// The knobs the issue adds (budget_pacing: false, adaptive: true) are written
// into the daemon's upstream config only with -with-knobs (the default).
// aquiferd from before issue 20 rejects them as unknown keys; with
// -with-knobs=false both rows of each scenario run today's behaviour.

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// knobHint explains a daemon that refused its config because of the knobs.
func knobHint(err error, withKnobs bool) error {
	if withKnobs && err != nil && strings.Contains(err.Error(), "unknown") {
		return fmt.Errorf("%w\n(this aquiferd does not know issue 20's knobs; run with -with-knobs=false to measure today's behaviour)", err)
	}
	return err
}

// budgetResult is one run of the budget scenario.
type budgetResult struct {
	pacing   bool // budget pacing asked for (only meaningful with knobs)
	knobs    bool // the knob was written into the config
	accepted int
	done     int // distinct jobs answered 200
	stats    budgetStats
	timedOut bool
}

// runBudget runs the budget scenario with budget pacing on, then off.
func runBudget(ctx context.Context, o options) ([]budgetResult, error) {
	var out []budgetResult
	for _, on := range []bool{true, false} {
		r, err := budgetRun(ctx, o, on)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func budgetRun(ctx context.Context, o options, pacing bool) (budgetResult, error) {
	res := budgetResult{pacing: pacing, knobs: o.withKnobs}
	api := newBudgetAPI(o.budgetLimit, o.budgetWindow, o.budgetLatency)
	if err := api.start(); err != nil {
		return res, err
	}
	defer api.close()
	rate := upstreamRate{host: api.host(), rps: o.budgetRPS, maxConcurrent: o.budgetConcurrent}
	if o.withKnobs && !pacing {
		o.knobs = map[string][]string{rate.host: {"budget_pacing: false"}}
	}
	d, err := startDaemon(ctx, o, []upstreamRate{rate})
	if err != nil {
		return res, knobHint(err, o.withKnobs)
	}
	defer d.stop()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	label := "budget (pacing on)"
	if !pacing {
		label = "budget (pacing off)"
	}
	l := submit(ctx, d.url, "", o.budgetJobs, min(o.clients, 16), true, label, func(i int) []byte {
		return jobJSON("budget", run+strconv.Itoa(i), api.url()+"/repos/o/r/issues", "job-"+strconv.Itoa(i))
	})
	if l.accepted == 0 {
		return res, fmt.Errorf("no job accepted: %s", l.firstErr)
	}
	res.accepted = l.accepted
	budgetPerSec := float64(o.budgetLimit) / o.budgetWindow.Seconds()
	deadline := time.Now().Add(time.Duration(float64(l.accepted)/budgetPerSec*float64(time.Second)) + 2*o.budgetWindow + 30*time.Second)
	stop := progress(o.quiet, label, l.accepted, func() int64 { return int64(api.done()) })
	for api.done() < l.accepted && ctx.Err() == nil {
		if time.Now().After(deadline) {
			res.timedOut = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	res.done = api.done()
	res.stats = api.stats()
	return res, ctx.Err()
}

func printBudget(w io.Writer, o options, rs []budgetResult) {
	budgetPerSec := float64(o.budgetLimit) / o.budgetWindow.Seconds()
	fmt.Fprintf(w, "\nbudget (simulated API: %d requests per %s, %s per answer, GitHub X-RateLimit-* headers, 429 + Retry-After when spent; ceiling rps %g, max_concurrent %d):\n",
		o.budgetLimit, o.budgetWindow, o.budgetLatency, o.budgetRPS, o.budgetConcurrent)
	fmt.Fprintln(w, "throughput = 200s ÷ (first request → last 200), which the run's last, partly used window flatters; budget used = 200s in every window but the last ÷ their budget")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "budget pacing\tjobs\tdone\t429s\telapsed\tthroughput\tvs budget rate\tbudget used (full windows)\t")
	for _, r := range rs {
		tput := float64(r.stats.ok) / max(r.stats.elapsed.Seconds(), 1e-9)
		use := "–"
		if !math.IsNaN(r.stats.fullWindowUse) {
			use = fmt.Sprintf("%.0f%%", r.stats.fullWindowUse*100)
		}
		done := strconv.Itoa(r.done)
		if r.timedOut {
			done += " (timed out)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1fs\t%.2f/s\t%.0f%%\t%s\t\n", onOff(r.pacing, r.knobs), r.accepted, done,
			r.stats.denied, r.stats.elapsed.Seconds(), tput, tput/budgetPerSec*100, use)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nper %s window: 200s (429s) and the span from its first 200 to its last\n", o.budgetWindow)
	for _, r := range rs {
		var cells []string
		for _, c := range r.stats.windows {
			cells = append(cells, fmt.Sprintf("%d (%d) %.1fs", c.ok, c.limited, c.span().Seconds()))
		}
		fmt.Fprintf(w, "  %-32s %s\n", onOff(r.pacing, r.knobs)+":", strings.Join(cells, "  "))
	}
}

// onOff names a row's setting; without knobs both rows ran today's default.
func onOff(on, knobs bool) string {
	s := "off"
	if on {
		s = "on"
	}
	if !knobs {
		s += " (no knob: today's default)"
	}
	return s
}

// adaptiveName names an adaptive scenario row: "on" or "static".
func adaptiveName(r adaptiveResult) string {
	s := "static"
	if r.adaptive {
		s = "on"
	}
	if !r.knobs {
		s += " (no knob: today's default)"
	}
	return s
}

// adaptiveResult is one run of the adaptive scenario.
type adaptiveResult struct {
	adaptive bool
	knobs    bool
	base     time.Duration
	half     time.Duration // when capacity halved, since the first request
	end      time.Duration
	records  []capRecord
	samples  []capSample
}

// runAdaptive runs the adaptive scenario with adaptive concurrency on, then
// with the static limit.
func runAdaptive(ctx context.Context, o options) ([]adaptiveResult, error) {
	var out []adaptiveResult
	for _, on := range []bool{true, false} {
		r, err := adaptiveRun(ctx, o, on)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// adaptiveCapacity is the simulated backend's capacity before half time.
const adaptiveCapacity = 40

func adaptiveRun(ctx context.Context, o options, adaptive bool) (adaptiveResult, error) {
	total := time.Duration(o.adaptiveSeconds * float64(time.Second))
	res := adaptiveResult{adaptive: adaptive, knobs: o.withKnobs, base: o.adaptiveBase, half: total / 2, end: total}
	b, err := newCapacityBackend(adaptiveCapacity, o.adaptiveBase)
	if err != nil {
		return res, err
	}
	defer b.close()
	rate := upstreamRate{host: b.host(), rps: 100000, maxConcurrent: 256}
	if o.withKnobs && adaptive {
		o.knobs = map[string][]string{rate.host: {"adaptive: true"}}
	}
	d, err := startDaemon(ctx, o, []upstreamRate{rate})
	if err != nil {
		return res, knobHint(err, o.withKnobs)
	}
	defer d.stop()
	// Enough work that the queue never runs dry: a quarter more than the
	// backend could do at full capacity for the whole run.
	maxRate := float64(adaptiveCapacity) / o.adaptiveBase.Seconds()
	n := int(maxRate * o.adaptiveSeconds * 1.25)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	label := "adaptive (on)"
	if !adaptive {
		label = "adaptive (static)"
	}
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	submitted := make(chan *load, 1)
	go func() {
		submitted <- submit(subCtx, d.url, "", n, min(o.clients, 8), true, label, func(i int) []byte {
			return jobJSON("adaptive", run+strconv.Itoa(i), b.url()+"/work", "x")
		})
	}()
	for b.started().IsZero() {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := b.started()
	stop := progress(o.quiet, label, int(total/time.Second), func() int64 { return int64(time.Since(start) / time.Second) })
	halved := false
	for ctx.Err() == nil {
		el := time.Since(start)
		if !halved && el >= res.half {
			b.setCapacity(adaptiveCapacity / 2)
			halved = true
		}
		if el >= total {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	res.records, res.samples = b.snapshot()
	cancel()
	if l := <-submitted; l.accepted == 0 {
		return res, fmt.Errorf("no job accepted: %s", l.firstErr)
	}
	return res, ctx.Err()
}

// adaptiveSettle is when the adaptive scenario's measurements begin: the
// issue allows a controller its first ten seconds to find the limit.
const adaptiveSettle = 10 * time.Second

func printAdaptive(w io.Writer, o options, rs []adaptiveResult) {
	maxRate := float64(adaptiveCapacity) / o.adaptiveBase.Seconds()
	fmt.Fprintf(w, "\nadaptive (simulated backend: capacity %d then %d at %.0fs, latency %s × (in-flight ÷ capacity)² past it, 503 past 2× capacity; max_concurrent 256, no signals; max %.0f/s):\n",
		adaptiveCapacity, adaptiveCapacity/2, o.adaptiveSeconds/2, o.adaptiveBase, maxRate)
	fmt.Fprintf(w, "settled = %s → half time; p99 is the backend's arrival → answer, unloaded %s\n", adaptiveSettle, o.adaptiveBase)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "adaptive\tsettled in-flight\tvs 40\tthroughput\tvs max\tp99\tvs unloaded\t503s first 10s\t503s 10s → halving\t503s after halving\tin-flight after halving\tfollows 20 within 20% after\t")
	for _, r := range rs {
		from, to := adaptiveSettle, r.half
		if to <= from { // a short run: measure the whole first half
			from = 0
		}
		inflight := meanInflight(r.samples, from, to)
		okRate, _, p99 := period(r.records, from, to)
		_, shedEarly, _ := period(r.records, 0, adaptiveSettle)
		_, shedSettled, _ := period(r.records, adaptiveSettle, r.half)
		_, shedHalved, _ := period(r.records, r.half, r.end)
		after := meanInflight(r.samples, r.half+r.end/4, r.end) // the second half's second half
		follow := "never"
		if d, ok := followTime(r.samples, r.half, r.end, adaptiveCapacity/2, 0.2); ok {
			follow = fmt.Sprintf("%.0fs", d.Seconds())
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%+.0f%%\t%.0f/s\t%.0f%%\t%.0fms\t%.1f×\t%d\t%d\t%d\t%.1f\t%s\t\n",
			adaptiveName(r), inflight, (inflight-adaptiveCapacity)/adaptiveCapacity*100, okRate, okRate/maxRate*100,
			float64(p99.Microseconds())/1000, float64(p99)/float64(r.base), shedEarly, shedSettled, shedHalved, after, follow)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nper-second mean in-flight at the backend (| marks the halving):")
	for _, r := range rs {
		var cells []string
		for s := time.Duration(0); s+time.Second <= r.end; s += time.Second {
			c := fmt.Sprintf("%.0f", meanInflight(r.samples, s, s+time.Second))
			if s == r.half.Truncate(time.Second) {
				c = "| " + c
			}
			cells = append(cells, c)
		}
		fmt.Fprintf(w, "  %-36s %s\n", adaptiveName(r)+":", strings.Join(cells, " "))
	}
}
