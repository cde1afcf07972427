package main

// Per-job costs beside every rate (issue 21): the daemon's CPU time from
// /proc and its Go runtime's allocation and GC counters from its Prometheus
// /metrics (the Go collector's go_memstats_mallocs_total and
// go_gc_duration_seconds_count), read at the start and at the end of a
// scenario's measured window and divided by the jobs in it. The ceiling
// server serves the same two series from its own runtime, so its row has the
// same columns. Two scrapes per window and nothing per job: the harness
// shares the machine with what it measures.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// Series the bench reads from a /metrics exposition.
const (
	seriesMallocs = "go_memstats_mallocs_total"
	seriesGCs     = "go_gc_duration_seconds_count"
	seriesQueued  = `aquifer_jobs{state="queued"}`
)

// parseExposition reads a Prometheus text exposition (format 0.0.4) into a
// value per series. A series is keyed by its name and label set exactly as
// the exposition spells them (client_golang writes labels in a fixed order),
// e.g. `aquifer_jobs{state="queued"}`; comments and blank lines are skipped,
// timestamps dropped. A line that is not a sample is an error naming it.
func parseExposition(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		series, rest, err := splitSeries(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, line, err)
		}
		fields := strings.Fields(rest)
		if len(fields) < 1 || len(fields) > 2 {
			return nil, fmt.Errorf("metrics line %d %q: want a value and at most a timestamp after the series", n, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: value: %w", n, line, err)
		}
		out[series] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

// splitSeries splits a sample line into its series (name plus label set,
// if any) and the rest. Label values are quoted and may hold spaces, braces
// and backslash escapes.
func splitSeries(line string) (series, rest string, err error) {
	i := strings.IndexAny(line, "{ \t")
	if i == 0 {
		return "", "", fmt.Errorf("no metric name")
	}
	if i < 0 {
		return "", "", fmt.Errorf("no value")
	}
	if line[i] != '{' {
		return line[:i], line[i:], nil
	}
	inQuote := false
	for j := i + 1; j < len(line); j++ {
		switch c := line[j]; {
		case inQuote && c == '\\':
			j++ // the escaped character
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return line[:j+1], line[j+1:], nil
		}
	}
	return "", "", fmt.Errorf("unterminated label set")
}

// runtimeStats are a Go process's cumulative heap allocations (objects, as
// runtime.MemStats.Mallocs counts them) and completed GC cycles.
type runtimeStats struct {
	mallocs, gcs float64
}

// runtimeOf picks the runtime counters out of a parsed exposition.
func runtimeOf(m map[string]float64) (runtimeStats, error) {
	mallocs, ok := m[seriesMallocs]
	if !ok {
		return runtimeStats{}, fmt.Errorf("no %s in /metrics (Go collector off?)", seriesMallocs)
	}
	gcs, ok := m[seriesGCs]
	if !ok {
		return runtimeStats{}, fmt.Errorf("no %s in /metrics (Go collector off?)", seriesGCs)
	}
	return runtimeStats{mallocs: mallocs, gcs: gcs}, nil
}

// scrapeClient reads /metrics. A daemon's scrape reads the store (job
// counts), which takes a while with a million jobs queued.
var scrapeClient = &http.Client{Timeout: 30 * time.Second}

// scrape fetches and parses base/metrics.
func scrape(ctx context.Context, base string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseExposition(io.LimitReader(resp.Body, 16<<20))
}

// cost is what one measured window cost the server per job.
type cost struct {
	cpu     time.Duration // server CPU time per job (0: unknown)
	harness time.Duration // this process's CPU time per job (client, target, receiver)
	allocs  float64       // server heap allocations per job (-1: unknown)
	gcPer1k float64       // server GC cycles per 1,000 jobs (-1: unknown)
	err     string        // why allocs are unknown
}

// unknownCost is a cost with nothing measured.
var unknownCost = cost{allocs: -1, gcPer1k: -1}

// window is one measured window on one server.
type window struct {
	d           *daemon
	cpu0, self0 time.Duration
	rt0         runtimeStats
	rtErr       error
}

// begin opens a measured window: it scrapes the runtime counters first and
// reads the CPU times after, so the scrape's own CPU is outside the window.
// (The scrape's allocations after the runtime's snapshot, about 300 objects,
// fall inside it: under 0.02 per job at 20,000 jobs.)
func (d *daemon) begin(ctx context.Context) *window {
	w := &window{d: d}
	var m map[string]float64
	if m, w.rtErr = scrape(ctx, d.url); w.rtErr == nil {
		w.rt0, w.rtErr = runtimeOf(m)
	}
	w.cpu0, w.self0 = d.cpuTime(), selfCPU()
	return w
}

// end closes the window over jobs jobs: CPU times first, then the scrape.
func (w *window) end(ctx context.Context, jobs int) cost {
	c := unknownCost
	c.cpu = perJob(w.d.cpuTime()-w.cpu0, jobs)
	c.harness = perJob(selfCPU()-w.self0, jobs)
	err := w.rtErr
	if err == nil {
		var m map[string]float64
		if m, err = scrape(ctx, w.d.url); err == nil {
			var rt1 runtimeStats
			if rt1, err = runtimeOf(m); err == nil && jobs > 0 {
				c.allocs = (rt1.mallocs - w.rt0.mallocs) / float64(jobs)
				c.gcPer1k = (rt1.gcs - w.rt0.gcs) * 1000 / float64(jobs)
			}
		}
	}
	if err != nil {
		c.err = err.Error()
	}
	return c
}

// allocsText is allocations per job for a table cell.
func (c cost) allocsText() string {
	if c.allocs < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", c.allocs)
}

// gcText is GC cycles per 1,000 jobs for a table cell.
func (c cost) gcText() string {
	if c.gcPer1k < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.gcPer1k)
}

// cpuText is CPU time per job for a table cell.
func cpuText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%dµs", d.Microseconds())
}

// summary is the cost as a phrase for the options table's result column.
func (c cost) summary() string {
	s := fmt.Sprintf("daemon CPU %s/job, %s allocs/job, %s GC/1k jobs", cpuText(c.cpu), c.allocsText(), c.gcText())
	if c.err != "" {
		s += " (no allocation counts: " + c.err + ")"
	}
	return s
}

// serveRuntimeMetrics answers GET /metrics on the ceiling server with the two
// series the bench reads from aquiferd, from this process's runtime/metrics
// (as client_golang's Go collector computes them, without stopping the world).
func serveRuntimeMetrics(w http.ResponseWriter, _ *http.Request) {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"},
		{Name: "/gc/heap/tiny/allocs:objects"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE %s counter\n%s %d\n# TYPE go_gc_duration_seconds summary\n%s %d\n",
		seriesMallocs, seriesMallocs, v[0]+v[1], seriesGCs, v[2])
}
