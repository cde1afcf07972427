package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// The job-option scenarios (issue 19):
//
//	batch      single submissions of -n jobs, then -batch-jobs jobs in
//	           POST /jobs/batch requests of -batch-size, each against a
//	           fresh daemon, back to back: the ratio of the two rates.
//	scheduled  an idle daemon's RSS, then -scheduled-jobs jobs scheduled an
//	           hour ahead (sent in batches), then its RSS again: scheduled
//	           jobs cost disk, not memory.
//	due        -due-jobs jobs scheduled 2–8 s ahead against a fast target;
//	           how late each reaches the target after its not_before.

// optionsResult is one row of the job-options table.
type optionsResult struct {
	scenario string
	jobs     int
	failed   int
	rate     float64 // jobs/s accepted (0: not measured)
	values   []string
}

func printOptions(w io.Writer, rs []optionsResult) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "job options\tjobs\tfailed\tjobs/s\tresult\t")
	for _, r := range rs {
		rate := "-"
		if r.rate > 0 {
			rate = fmt.Sprintf("%.0f", r.rate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t\n", r.scenario, r.jobs, r.failed, rate, strings.Join(r.values, "; "))
	}
	tw.Flush()
}

// batchBody builds a POST /jobs/batch body of the jobs lo..hi-1 made by one.
func batchBody(lo, hi int, one func(i int) []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jobs":[`)
	for i := lo; i < hi; i++ {
		if i > lo {
			b.WriteByte(',')
		}
		b.Write(one(i))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// batchLoad is the outcome of sending batches.
type batchLoad struct {
	created, duplicates, errors int
	requestErrors               int
	firstErr                    string
	elapsed                     time.Duration
	latencies                   []time.Duration // per batch request
}

// submitBatches sends n jobs in batches of size with clients concurrent
// senders (one keep-alive connection each).
func submitBatches(ctx context.Context, base string, n, size, clients int, quiet bool, label string, one func(i int) []byte) *batchLoad {
	res := &batchLoad{}
	var (
		next, done atomic.Int64
		mu         sync.Mutex
		wg         sync.WaitGroup
	)
	batches := (n + size - 1) / size
	stopBar := progress(quiet, label, n, func() int64 { return done.Load() })
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := newLeanConn(base)
			defer conn.close()
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if k >= batches {
					return
				}
				lo, hi := k*size, min((k+1)*size, n)
				t0 := time.Now()
				status, resp, err := conn.post("/jobs/batch", batchBody(lo, hi, one))
				d := time.Since(t0)
				done.Add(int64(hi - lo))
				var out struct {
					Created    int `json:"created"`
					Duplicates int `json:"duplicates"`
					Errors     int `json:"errors"`
				}
				mu.Lock()
				switch {
				case err != nil:
					res.requestErrors++
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
				case status != http.StatusOK || json.Unmarshal(resp, &out) != nil:
					res.requestErrors++
					if res.firstErr == "" {
						res.firstErr = fmt.Sprintf("HTTP %d: %.200s", status, resp)
					}
				default:
					res.created += out.Created
					res.duplicates += out.Duplicates
					res.errors += out.Errors
					res.latencies = append(res.latencies, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	stopBar()
	sort.Slice(res.latencies, func(a, b int) bool { return res.latencies[a] < res.latencies[b] })
	return res
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(p*float64(len(ds)-1))]
}

// runBatch measures single submissions and batches back to back, each on a
// fresh daemon whose target is paced at 1 rps (ingest only): singles with as
// many clients as send the batches (the same caller, one job per request
// instead of 500), and singles with -c clients (what many callers at once
// reach), then the batches.
func runBatch(ctx context.Context, o options) ([]optionsResult, error) {
	target, err := newTarget()
	if err != nil {
		return nil, err
	}
	defer target.close()
	clients := min(o.clients, o.batchClients)
	singles := func(c int) (*load, cost, error) {
		d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 1, 1}})
		if err != nil {
			return nil, unknownCost, err
		}
		defer d.stop()
		w := d.begin(ctx)
		l := submit(ctx, d.url, "", o.jobs, c, o.quiet, fmt.Sprintf("single ×%d", c),
			bodyMaker(o, "single", target.url()+"/t", ""))
		return l, w.end(ctx, l.accepted), nil
	}
	same, sameCost, err := singles(clients)
	if err != nil {
		return nil, err
	}
	many, manyCost, err := singles(o.clients)
	if err != nil {
		return nil, err
	}
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 1, 1}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	w := d.begin(ctx)
	b := submitBatches(ctx, d.url, o.batchJobs, o.batchSize, clients, o.quiet, "batches",
		bodyMaker(o, "batch", target.url()+"/t", ""))
	bc := w.end(ctx, b.created)
	batchRate := float64(b.created) / b.elapsed.Seconds()
	if b.duplicates > 0 || b.created+b.errors < o.batchJobs {
		fmt.Fprintf(os.Stderr, "batch: created %d, duplicates %d, errors %d, failed requests %d of %d jobs\n",
			b.created, b.duplicates, b.errors, b.requestErrors, o.batchJobs)
	}
	row := func(l *load, lc cost, c int) optionsResult {
		return optionsResult{scenario: fmt.Sprintf("single POST /jobs (%d clients)", c), jobs: l.accepted,
			failed: l.rejected + l.errors, rate: l.rate(), values: []string{"p99 " + ms(l.percentile(0.99)), lc.summary()}}
	}
	rs := []optionsResult{row(same, sameCost, clients), row(many, manyCost, o.clients),
		{scenario: fmt.Sprintf("POST /jobs/batch of %d (%d clients)", o.batchSize, clients), jobs: b.created,
			failed: b.errors + b.requestErrors*o.batchSize, rate: batchRate,
			values: []string{fmt.Sprintf("%.1f× single with %d clients", batchRate/same.rate(), clients),
				fmt.Sprintf("%.1f× single with %d", batchRate/many.rate(), o.clients),
				"p50 " + ms(pct(b.latencies, 0.5)) + " per batch", "p99 " + ms(pct(b.latencies, 0.99)) + " per batch",
				bc.summary()}},
	}
	if b.firstErr != "" {
		rs[2].values = append(rs[2].values, "first error: "+b.firstErr)
	}
	return rs, nil
}

// currentRSS is the daemon's resident set size now (VmRSS), -1 if unknown.
func (d *daemon) currentRSS() int64 { return d.procStatus("VmRSS:") }

func (d *daemon) procStatus(key string) int64 {
	if d.cmd == nil || d.cmd.Process == nil {
		return -1
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

// sqliteCacheAllowance is the most memory SQLite's page caches may hold in
// aquiferd: 8 MiB for the writer and for each of the 4 readers
// (internal/adapters/outbound/sqlite dsn).
const sqliteCacheAllowance = 5 * 8 << 20

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// runScheduled schedules o.scheduledJobs an hour ahead and compares the
// daemon's RSS with its idle RSS.
func runScheduled(ctx context.Context, o options) ([]optionsResult, error) {
	target, err := newTarget()
	if err != nil {
		return nil, err
	}
	defer target.close()
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 100000, 256}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	time.Sleep(3 * time.Second)
	idle := d.currentRSS()
	mk := bodyMaker(o, "sched", target.url()+"/t", "")
	one := func(i int) []byte {
		b := mk(i)
		return append(b[:len(b)-1], `,"delay_seconds":3600}`...)
	}
	w := d.begin(ctx)
	b := submitBatches(ctx, d.url, o.scheduledJobs, o.batchSize, min(o.clients, o.batchClients), o.quiet, "scheduled", one)
	bc := w.end(ctx, b.created)
	time.Sleep(5 * time.Second) // let the runtime settle and return what it freed
	after, peak := d.currentRSS(), d.peakRSS()
	hits := target.hits.Load()
	ratio := float64(after) / float64(idle+sqliteCacheAllowance)
	values := []string{
		"idle RSS " + mib(idle), "RSS with them scheduled " + mib(after), "peak " + mib(peak),
		fmt.Sprintf("RSS ÷ (idle + %s SQLite cache) = %.2f", mib(sqliteCacheAllowance), ratio),
		fmt.Sprintf("dispatched early: %d", hits), bc.summary(),
	}
	if b.firstErr != "" {
		values = append(values, "first error: "+b.firstErr)
	}
	return []optionsResult{{scenario: fmt.Sprintf("%d scheduled 1 h ahead", o.scheduledJobs), jobs: b.created,
		failed: b.errors + b.requestErrors*o.batchSize, rate: float64(b.created) / b.elapsed.Seconds(), values: values}}, nil
}

// runDue schedules o.dueJobs 2–8 s ahead, each carrying its due time, and
// measures how late each reaches the target.
func runDue(ctx context.Context, o options) ([]optionsResult, error) {
	var (
		mu   sync.Mutex
		late []time.Duration
	)
	ls, err := newLeanServer(200, "application/json", `{"ok":true}`, func(body []byte) {
		at := time.Now()
		// The job's body is {"due":<unix ms>}.
		i := bytes.Index(body, []byte(`"due":`))
		if i < 0 {
			return
		}
		rest := body[i+len(`"due":`):]
		j := bytes.IndexByte(rest, '}')
		if j < 0 {
			return
		}
		due, err := strconv.ParseInt(string(rest[:j]), 10, 64)
		if err != nil {
			return
		}
		mu.Lock()
		late = append(late, at.Sub(time.UnixMilli(due)))
		mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	target := &sink{leanServer: ls}
	defer target.close()
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 100000, 256}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	start := time.Now().Add(2 * time.Second)
	dues := make([]int64, o.dueJobs)
	for i := range dues {
		dues[i] = start.Add(time.Duration(rand.Int64N(int64(6 * time.Second)))).UnixMilli()
	}
	u, _ := json.Marshal(target.url() + "/due")
	run := fmt.Sprintf("due-%d-", time.Now().UnixNano())
	one := func(i int) []byte {
		return fmt.Appendf(nil, `{"user_id":"bench","idempotent_key":"%s%d","method":"POST","url":%s,`+
			`"headers":{"Content-Type":"application/json"},"body":"{\"due\":%d}","not_before":%d}`, run, i, u, dues[i], dues[i])
	}
	b := submitBatches(ctx, d.url, o.dueJobs, min(o.batchSize, 100), min(o.clients, o.batchClients), o.quiet, "due", one)
	if sent := time.Since(start); sent > 0 {
		return nil, fmt.Errorf("submitting %d jobs took longer than the 2 s lead (%v late): use fewer -due-jobs", o.dueJobs, sent)
	}
	deadline := time.Now().Add(o.timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		mu.Lock()
		n := len(late)
		mu.Unlock()
		if n >= b.created {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(late, func(a, b int) bool { return late[a] < late[b] })
	early := 0
	for _, l := range late {
		if l < -time.Millisecond { // due times are whole milliseconds
			early++
		}
	}
	values := []string{"p50 " + ms(pct(late, 0.5)), "p99 " + ms(pct(late, 0.99)), "max " + ms(pct(late, 1)),
		fmt.Sprintf("early: %d", early), fmt.Sprintf("arrived: %d/%d", len(late), b.created)}
	return []optionsResult{{scenario: "due-time accuracy (not_before → target)", jobs: b.created,
		failed: b.errors + b.requestErrors*o.batchSize + b.created - len(late), values: values}}, nil
}
