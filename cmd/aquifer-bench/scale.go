package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The scale scenario (issue 21's scale curve): how ingest and end-to-end
// delivery hold up as the store fills. One daemon per store; at each step of
// -scale-backlogs it tops the queue up to the step with -scale-body jobs for
// an upstream paced at 1 rps (in POST /jobs/batch requests; the fill is not
// measured), lets the daemon settle (at most -scale-settle; the output says
// how long it took), then measures ingest (-n jobs of the
// same size for another 1 rps upstream, which stay queued and count towards
// the next step) and e2e (-n jobs for a fast target with a webhook) with the
// same clients as the ingest and e2e scenarios.
//
// The machine's speed drifts over the minutes between steps (on a shared
// 2-core machine, by half from one minute to the next), so each step is
// also judged against a reference measured beside it (-scale-reference, on
// by default): a fresh daemon with an empty store and the same
// configuration, measured with half of -n jobs just before and just after
// each of the step's two measurements. While one daemon is measured the
// other is paused (SIGSTOP), so neither's background work (a backlog's
// counts and compactions) runs in the other's window. The reference rate is
// the mean of the two runs, which cancels a drift that is steady over the
// step; the step's ratio to it is its ratio to an empty store. At the first
// step (0 queued) both daemons are empty: that ratio shows what the method
// itself can resolve.
//
// Admission control is off for it: AQUIFER_DB_MAX_BYTES=0 (a million 1 KiB
// jobs are over a GiB, past the 800 MiB default) and AQUIFER_MEMORY_LIMIT_MB=0.
// Nothing expires mid-run: queued jobs live 24 h (domain.QueuedTTL) and
// completed ones 30 min, longer than a run's steps apart.

// Issue 21's scale targets.
const (
	scaleRateFloor = 0.8       // the rate at the largest backlog ≥ 80 % of the rate at the first
	scalePeakRSS   = 256 << 20 // peak RSS at the largest backlog ≤ 256 MiB
)

// scaleRow is one backlog step on one store.
type scaleRow struct {
	store    string
	backlog  int           // the step
	queued   int           // jobs queued before measuring: submitted for the 1 rps upstreams less their targets' hits
	reported int           // what the daemon's /metrics said then (-1: unknown)
	filled   int           // jobs the fill added
	fillTime time.Duration // how long the fill took
	// How long the daemon took to go quiet after the fill (settle), and
	// whether it did within -scale-settle.
	settleTime time.Duration
	settled    bool
	ingest     result
	e2e        result
	// The reference's runs just before and just after ingest and e2e
	// (-scale-reference; none without it).
	refIngest, refE2E []result
	rss               int64 // after both measurements (VmRSS)
	peak              int64 // since the daemon started (VmHWM)
}

// parseBacklogs parses -scale-backlogs: non-negative job counts in rising
// order, e.g. "0,100000,1000000" (underscores allowed: 1_000_000).
func parseBacklogs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ReplaceAll(strings.TrimSpace(f), "_", "")
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-scale-backlogs: %q is not a job count", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-scale-backlogs: %d after %d: steps must rise (the store only fills)", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-scale-backlogs: no steps")
	}
	return out, nil
}

// runScale runs the scale steps on one daemon for o.store.
func runScale(ctx context.Context, o options) ([]scaleRow, error) {
	o.bodyBytes = o.scaleBody
	var sinks []*sink
	defer func() {
		for _, s := range sinks {
			s.close()
		}
	}()
	sinkOf := func(mk func() (*sink, error)) (*sink, error) {
		s, err := mk()
		if err == nil {
			sinks = append(sinks, s)
		}
		return s, err
	}
	fillTarget, err := sinkOf(newTarget)
	if err != nil {
		return nil, err
	}
	ingestTarget, err := sinkOf(newTarget)
	if err != nil {
		return nil, err
	}
	target, err := sinkOf(newTarget)
	if err != nil {
		return nil, err
	}
	hooks, err := sinkOf(newReceiver)
	if err != nil {
		return nil, err
	}
	env := []string{"AQUIFER_DB_MAX_BYTES=0", "AQUIFER_MEMORY_LIMIT_MB=0"}
	d, err := startDaemonWith(ctx, o, []upstreamRate{{fillTarget.host(), 1, 1}, {ingestTarget.host(), 1, 1},
		{target.host(), 100000, 256}, {hooks.host(), 100000, 256}}, "", env)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	// The reference daemons' own targets: their 1 rps target's hits must
	// not count against the backlog's.
	var refSinks [3]*sink
	if o.scaleRef && o.addr == "" {
		for i, mk := range []func() (*sink, error){newTarget, newTarget, newReceiver} {
			if refSinks[i], err = sinkOf(mk); err != nil {
				return nil, err
			}
		}
	}
	startRef := func() (*daemon, error) {
		if refSinks[0] == nil {
			return nil, nil
		}
		// AQUIFER_DEBUG_ADDR is the step's daemon's alone (profiles).
		return startDaemonWith(ctx, o, []upstreamRate{{refSinks[0].host(), 1, 1}, {refSinks[1].host(), 100000, 256},
			{refSinks[2].host(), 100000, 256}}, "", append(env, "AQUIFER_DEBUG_ADDR="))
	}
	// The backlog is counted here, not read from the daemon: its count is
	// the store's, which may time out (and read 0) with a million rows.
	slow := 0 // jobs accepted for the two 1 rps upstreams
	queued := func() int { return slow - int(fillTarget.hits.Load()+ingestTarget.hits.Load()) }
	var rows []scaleRow
	for _, step := range o.scaleBacklogs {
		row := scaleRow{store: o.store, backlog: step}
		if fill := step - queued(); fill > 0 {
			b := submitBatches(ctx, d.url, fill, o.batchSize, min(o.clients, o.batchClients), o.quiet,
				fmt.Sprintf("fill to %d", step), bodyMaker(o, "fill"+strconv.Itoa(step), fillTarget.url()+"/t", ""))
			row.filled, row.fillTime = b.created, b.elapsed
			slow += b.created
			if b.created < fill {
				return rows, fmt.Errorf("backlog %d: the fill created %d of %d jobs (%d errors, %d failed requests; first: %s)",
					step, b.created, fill, b.errors, b.requestErrors, b.firstErr)
			}
			row.settleTime, row.settled = d.settle(ctx, o.scaleSettle)
		}
		row.queued, row.reported = queued(), d.queued(ctx)
		ref, err := startRef()
		if err != nil {
			return rows, fmt.Errorf("backlog %d: the reference daemon: %w", step, err)
		}
		label := fmt.Sprintf("%s @%d", o.store, step)
		half := o
		half.jobs = max(o.jobs/2, 1)
		// beside runs a reference measurement with the step's daemon paused.
		beside := func(into *[]result, when string, run func(ref *daemon, label string) result) {
			if ref != nil && ctx.Err() == nil {
				*into = append(*into, alone(d, func() result { return run(ref, "scale reference "+label+" ("+when+")") }))
			}
		}
		refIngest := func(ref *daemon, name string) result {
			return ingestOn(ctx, half, ref, refSinks[0], name, "scale-ref-ingest")
		}
		refE2E := func(ref *daemon, name string) result {
			return e2eOn(ctx, half, ref, refSinks[1], refSinks[2], name)
		}
		beside(&row.refIngest, "before", refIngest)
		row.ingest = alone(ref, func() result { return ingestOn(ctx, o, d, ingestTarget, "scale ingest "+label, "scale-ingest") })
		slow += row.ingest.accepted
		beside(&row.refIngest, "after", refIngest)
		beside(&row.refE2E, "before", refE2E)
		if ctx.Err() == nil {
			row.e2e = alone(ref, func() result { return e2eOn(ctx, o, d, target, hooks, "scale e2e "+label) })
		}
		beside(&row.refE2E, "after", refE2E)
		if ref != nil {
			ref.stop()
		}
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		row.rss, row.peak = d.currentRSS(), d.peakRSS()
		rows = append(rows, row)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

// ingestOn submits o.jobs jobs for target (which the daemon's config must
// pace slowly, so nothing is dispatched meanwhile) to d and measures them.
func ingestOn(ctx context.Context, o options, d *daemon, target *sink, name, prefix string) result {
	w := d.begin(ctx)
	l := submit(ctx, d.url, "", o.jobs, o.clients, o.quiet, name, bodyMaker(o, prefix, target.url()+"/t", ""))
	c := w.end(ctx, l.accepted)
	return result{scenario: name, kind: "ingest", store: o.store, accepted: l.accepted, failed: l.rejected + l.errors,
		ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99), max: l.percentile(1),
		lost: -1, rss: d.peakRSS(), note: l.firstErr, cost: c}
}

// queued is the number of queued jobs the daemon reports on /metrics, -1
// when it cannot be read.
func (d *daemon) queued(ctx context.Context) int {
	m, err := scrape(ctx, d.url)
	if err != nil {
		return -1
	}
	q, ok := m[seriesQueued]
	if !ok {
		return -1
	}
	return int(q)
}

// disagrees reports whether the daemon's count of queued jobs is off the
// bench's by more than 1 % (jobs in flight at 1 rps make a few).
func (r scaleRow) disagrees() bool {
	diff := r.reported - r.queued
	return r.reported >= 0 && (diff > r.queued/100+10 || -diff > r.queued/100+10)
}

// settle waits until the daemon has used under a tenth of a core for
// settleQuiet in a row (a store's compactions and checkpoints after a fill:
// Pebble's run one after another with short gaps, which a single quiet
// half second mistook for the end), at most limit. It returns how long it
// waited and whether the daemon went quiet.
func (d *daemon) settle(ctx context.Context, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	var q quietness
	prev := d.cpuTime()
	for time.Since(start) < limit && ctx.Err() == nil {
		time.Sleep(settleEvery)
		now := d.cpuTime()
		if q.observe(now - prev) {
			return time.Since(start), true
		}
		prev = now
	}
	return time.Since(start), false
}

// settleEvery is how often settle reads the daemon's CPU time, and
// settleQuiet how long it must stay under a tenth of a core.
const (
	settleEvery = 500 * time.Millisecond
	settleQuiet = 2 * time.Second
)

// quietness counts the consecutive settle windows in which the daemon used
// under a tenth of a core.
type quietness struct{ windows int }

// observe adds a window in which the daemon used cpu and reports whether
// the last settleQuiet of windows were all quiet.
func (q *quietness) observe(cpu time.Duration) bool {
	if cpu >= settleEvery/10 {
		q.windows = 0
		return false
	}
	q.windows++
	return time.Duration(q.windows)*settleEvery >= settleQuiet
}

// scaleCheck is one of the scale targets for one store.
type scaleCheck struct {
	store, goal string
	value       string
	met         bool
	known       bool
}

// alone runs f while other (when not nil) is paused.
func alone(other *daemon, f func() result) result {
	if other != nil && other.pause() {
		defer other.resume()
	}
	return f()
}

// refRate is the mean of rate over a step's reference runs, 0 when there
// are none or one of them has no rate.
func refRate(runs []result, rate func(result) float64) float64 {
	sum := 0.0
	for _, r := range runs {
		if rate(r) <= 0 {
			return 0
		}
		sum += rate(r)
	}
	if len(runs) == 0 {
		return 0
	}
	return sum / float64(len(runs))
}

func ingestRate(r result) float64 { return r.ingest }
func e2eRate(r result) float64    { return r.e2e }

// evaluateScale checks each store's largest step: both rates at least
// scaleRateFloor of the reference measured beside that step when it has
// one, otherwise of the store's first step's, and the peak RSS at the
// largest step within scalePeakRSS. A store with one step and no reference
// has nothing to compare its rates with and gets the RSS check only.
func evaluateScale(rows []scaleRow) []scaleCheck {
	var out []scaleCheck
	for _, store := range scaleStores(rows) {
		var first, last *scaleRow
		for i := range rows {
			if rows[i].store != store {
				continue
			}
			if first == nil {
				first = &rows[i]
			}
			last = &rows[i]
		}
		paired := len(last.refIngest) > 0 || len(last.refE2E) > 0
		if last != first || paired {
			rate := func(what string, at, base float64) scaleCheck {
				of := fmt.Sprintf("at %d", first.backlog)
				if paired {
					of = "an empty store's beside it"
				}
				c := scaleCheck{store: store, goal: fmt.Sprintf("%s jobs/s at %d queued ≥ %.0f %% of %s", what, last.backlog,
					scaleRateFloor*100, of), value: "-", known: at > 0 && base > 0}
				if c.known {
					c.value = fmt.Sprintf("%.0f %%", at/base*100)
					c.met = at >= scaleRateFloor*base
				}
				return c
			}
			ingestBase, e2eBase := first.ingest.ingest, first.e2e.e2e
			if paired {
				ingestBase, e2eBase = refRate(last.refIngest, ingestRate), refRate(last.refE2E, e2eRate)
			}
			out = append(out, rate("ingest", last.ingest.ingest, ingestBase), rate("e2e", last.e2e.e2e, e2eBase))
		}
		c := scaleCheck{store: store, goal: fmt.Sprintf("peak RSS at %d queued ≤ %s", last.backlog, mib(scalePeakRSS)),
			value: "-", known: last.peak > 0}
		if c.known {
			c.value, c.met = mib(last.peak), last.peak <= scalePeakRSS
		}
		out = append(out, c)
	}
	return out
}

// scaleStores lists the stores of rows in order of appearance.
func scaleStores(rows []scaleRow) []string {
	var out []string
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1] != r.store {
			out = append(out, r.store)
		}
	}
	return out
}

// scaleBase is the row each row's rates are compared with: its store's first.
func scaleBase(rows []scaleRow, i int) *scaleRow {
	for j := range rows {
		if rows[j].store == rows[i].store {
			return &rows[j]
		}
	}
	return nil
}

func vsText(v, base float64) string {
	if v <= 0 || base <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/base)
}

func printScale(w io.Writer, rows []scaleRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nscale curve (%d jobs per measurement; CPU and allocs per job: ingest / e2e; \"vs first\" is the store's first step, \"vs ref\" an empty store's measured beside the step):\n",
		rows[0].ingest.accepted)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tbacklog\tqueued\tingest jobs/s\tvs first\tvs ref\tp99\te2e jobs/s\tvs first\tvs ref\tlost\tserver CPU/job\tallocs/job\tRSS now\tpeak RSS\t")
	for i, r := range rows {
		base := scaleBase(rows, i)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%.0f\t%s\t%s\t%d\t%s / %s\t%s / %s\t%s\t%s\t\n", r.store, r.backlog, r.queued,
			r.ingest.ingest, vsText(r.ingest.ingest, base.ingest.ingest), vsText(r.ingest.ingest, refRate(r.refIngest, ingestRate)),
			ms(r.ingest.p99),
			r.e2e.e2e, vsText(r.e2e.e2e, base.e2e.e2e), vsText(r.e2e.e2e, refRate(r.refE2E, e2eRate)), r.e2e.lost,
			cpuText(r.ingest.cost.cpu), cpuText(r.e2e.cost.cpu), r.ingest.cost.allocsText(), r.e2e.cost.allocsText(),
			mib(r.rss), mib(r.peak))
	}
	tw.Flush()
	for _, r := range rows {
		if r.filled > 0 && !r.settled {
			fmt.Fprintf(w, "%s @%d: the daemon was still busy %s after the fill (the store's work on it runs into the measurement; -scale-settle waits longer)\n",
				r.store, r.backlog, r.settleTime.Round(time.Second))
		} else if r.filled > 0 {
			fmt.Fprintf(w, "%s @%d: filled %d jobs in %s; the daemon was quiet %s later\n",
				r.store, r.backlog, r.filled, r.fillTime.Round(time.Second), r.settleTime.Round(time.Second))
		}
		if len(r.refIngest)+len(r.refE2E) > 0 {
			fmt.Fprintf(w, "%s @%d: the reference (an empty store, %d jobs a run, before and after): ingest %s jobs/s, e2e %s jobs/s\n",
				r.store, r.backlog, max(r.ingest.accepted/2, 1), ratesText(r.refIngest, ingestRate), ratesText(r.refE2E, e2eRate))
		}
		if r.disagrees() {
			fmt.Fprintf(w, "%s @%d: the daemon's /metrics said %d queued, the bench had queued %d (the daemon's counts are spaced out while counting is slow — /health's jobs.age_ms says how old they are — or the count failed)\n",
				r.store, r.backlog, r.reported, r.queued)
		}
		for _, x := range append([]result{r.ingest, r.e2e}, append(r.refIngest, r.refE2E...)...) {
			if x.note != "" && x.failed > 0 {
				fmt.Fprintf(w, "%s: %d failed; first failure: %s\n", x.scenario, x.failed, x.note)
			} else if x.note != "" {
				fmt.Fprintf(w, "%s: %s\n", x.scenario, x.note)
			}
			if x.cost.err != "" {
				fmt.Fprintf(w, "%s: no allocation counts: %s\n", x.scenario, x.cost.err)
			}
		}
	}
	fmt.Fprintln(w, "\nissue 21 scale targets:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range evaluateScale(rows) {
		verdict := "not measured"
		if c.known {
			verdict = "not met"
			if c.met {
				verdict = "met"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", c.store, c.goal, c.value, verdict)
	}
	tw.Flush()
}

// ratesText lists the runs' rates: "10234 and 9876".
func ratesText(runs []result, rate func(result) float64) string {
	var parts []string
	for _, r := range runs {
		parts = append(parts, fmt.Sprintf("%.0f", rate(r)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " and ")
}

// writeScaleCSV writes rows as CSV with a header line, for plotting.
func writeScaleCSV(w io.Writer, rows []scaleRow) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"store", "backlog", "queued", "daemon_queued", "filled", "fill_seconds",
		"ingest_jobs_per_s", "ingest_vs_first", "ingest_p50_ms", "ingest_p99_ms", "ingest_failed",
		"e2e_jobs_per_s", "e2e_vs_first", "e2e_lost",
		"ingest_cpu_us_per_job", "e2e_cpu_us_per_job", "ingest_allocs_per_job", "e2e_allocs_per_job",
		"ingest_gc_per_1k_jobs", "e2e_gc_per_1k_jobs", "rss_bytes", "peak_rss_bytes",
		"ref_ingest_jobs_per_s", "ingest_vs_ref", "ref_e2e_jobs_per_s", "e2e_vs_ref"})
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	known := func(v float64, prec int) string {
		if v < 0 {
			return ""
		}
		return f(v, prec)
	}
	msf := func(d time.Duration) string { return f(float64(d.Microseconds())/1000, 3) }
	for i, r := range rows {
		base := scaleBase(rows, i)
		refIngest, refE2E := refRate(r.refIngest, ingestRate), refRate(r.refE2E, e2eRate)
		if refIngest == 0 {
			refIngest = -1 // none: an empty cell
		}
		if refE2E == 0 {
			refE2E = -1
		}
		vs := func(v, b float64) string {
			if v <= 0 || b <= 0 {
				return ""
			}
			return f(v/b, 3)
		}
		_ = cw.Write([]string{r.store, strconv.Itoa(r.backlog), strconv.Itoa(r.queued), known(float64(r.reported), 0), strconv.Itoa(r.filled),
			f(r.fillTime.Seconds(), 1),
			f(r.ingest.ingest, 1), vs(r.ingest.ingest, base.ingest.ingest), msf(r.ingest.p50), msf(r.ingest.p99),
			strconv.Itoa(r.ingest.failed),
			f(r.e2e.e2e, 1), vs(r.e2e.e2e, base.e2e.e2e), strconv.Itoa(r.e2e.lost),
			strconv.FormatInt(r.ingest.cost.cpu.Microseconds(), 10), strconv.FormatInt(r.e2e.cost.cpu.Microseconds(), 10),
			known(r.ingest.cost.allocs, 1), known(r.e2e.cost.allocs, 1),
			known(r.ingest.cost.gcPer1k, 3), known(r.e2e.cost.gcPer1k, 3),
			strconv.FormatInt(r.rss, 10), strconv.FormatInt(r.peak, 10),
			known(refIngest, 1), vs(r.ingest.ingest, refIngest), known(refE2E, 1), vs(r.e2e.e2e, refE2E)})
	}
	cw.Flush()
	return cw.Error()
}

// saveScaleCSV writes rows to path (see writeScaleCSV).
func saveScaleCSV(path string, rows []scaleRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeScaleCSV(f, rows); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
