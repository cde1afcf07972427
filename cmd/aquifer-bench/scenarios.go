package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

type result struct {
	scenario string
	accepted int
	failed   int
	ingest   float64 // accepted jobs/s
	p50, p99 time.Duration
	max      time.Duration
	e2e      float64 // jobs/s, accepted → webhook received (0 = not measured)
	lost     int     // accepted jobs whose webhook never arrived (-1 = not measured)
	rss      int64   // daemon peak RSS (-1 = unknown)
	note     string
	cost     cost   // the server's CPU, allocations and GC cycles per accepted job
	listing  bool   // note reports the listings run during the scenario
	kind     string // the scenario: ceiling, ingest, e2e, backlog, listing (targets)
	store    string // the daemon's store ("" for the ceiling)
}

// selfCPU returns this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sink is a loopback target or webhook receiver that counts what reaches it.
type sink struct {
	*leanServer
	mu   sync.Mutex
	seen map[string]int // webhook job_id → deliveries
}

// newTarget answers every request 200 {"ok":true}.
func newTarget() (*sink, error) {
	ls, err := newLeanServer(200, "application/json", `{"ok":true}`, nil)
	if err != nil {
		return nil, err
	}
	return &sink{leanServer: ls}, nil
}

// newReceiver records the job_id of each webhook and answers 204. A
// request without a body is not a webhook (aquiferd's GET /.well-known/l8,
// which asks a receiver once whether it speaks L8) and is not recorded.
func newReceiver() (*sink, error) {
	s := &sink{seen: map[string]int{}}
	ls, err := newLeanServer(204, "", "", func(body []byte) {
		if len(body) == 0 {
			return
		}
		id := jobIDOf(body)
		s.mu.Lock()
		s.seen[id]++
		s.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	s.leanServer = ls
	return s, nil
}

// newTargetAndReceiver starts a target (newTarget) and a webhook receiver
// (newReceiver); closeBoth stops them.
func newTargetAndReceiver() (target, hooks *sink, closeBoth func(), err error) {
	if target, err = newTarget(); err != nil {
		return nil, nil, nil, err
	}
	if hooks, err = newReceiver(); err != nil {
		target.close()
		return nil, nil, nil, err
	}
	return target, hooks, func() { target.close(); hooks.close() }, nil
}

// reset forgets the webhooks seen so far.
func (s *sink) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = map[string]int{}
}

func (s *sink) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func jobIDOf(body []byte) string {
	const key = `"job_id":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		var p struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(body, &p)
		return p.JobID
	}
	rest := body[i+len(key):]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// bodyMaker returns a function building the JSON body of job i. The constant
// parts are encoded once.
func bodyMaker(o options, prefix, url, webhook string) func(i int) []byte {
	payload, _ := json.Marshal(`{"payload":"` + strings.Repeat("x", o.bodyBytes) + `"}`)
	u, _ := json.Marshal(url)
	head := []byte(`{"user_id":"bench","method":"POST","headers":{"Content-Type":"application/json"},"url":` + string(u) +
		`,"body":` + string(payload))
	if webhook != "" {
		wh, _ := json.Marshal(webhook)
		head = append(head, `,"webhook_url":`+string(wh)...)
	}
	run := fmt.Sprintf("%s-%d-", prefix, time.Now().UnixNano())
	return func(i int) []byte {
		b := make([]byte, 0, len(head)+64)
		b = append(b, head...)
		b = append(b, `,"idempotent_key":"`+run...)
		b = strconv.AppendInt(b, int64(i), 10)
		return append(b, `"}`...)
	}
}

// runCeiling measures a trivial Go HTTP server, in its own process, with the
// same clients: the ceiling any HTTP service has on this machine.
func runCeiling(ctx context.Context, o options) ([]result, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	dieWithBench(cmd)
	cmd.Env = append(os.Environ(), fmt.Sprintf("AQUIFER_BENCH_CEILING_ADDR=127.0.0.1:%d", port))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	d := &daemon{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
	if err := d.waitHealthy(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	w := d.begin(ctx)
	l := submit(ctx, d.url, "", o.jobs, o.clients, o.quiet, "ceiling", bodyMaker(o, "ceiling", "http://127.0.0.1:1/", ""))
	return []result{{scenario: "ceiling (trivial Go server)", kind: "ceiling", accepted: l.accepted, failed: l.rejected + l.errors,
		ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99), max: l.percentile(1),
		lost: -1, rss: d.peakRSS(), note: l.firstErr, cost: w.end(ctx, l.accepted)}}, nil
}

func perJob(cpu time.Duration, n int) time.Duration {
	if cpu <= 0 || n == 0 {
		return 0
	}
	return cpu / time.Duration(n)
}

// serveCeiling is the trivial server runCeiling starts: it reads the body
// and answers 201 with a small JSON document. GET /metrics, which the load
// never hits, serves its runtime's allocation and GC counters.
func serveCeiling(addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", serveRuntimeMetrics)
	mux.HandleFunc("POST /jobs", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"job_id":"00000000000000000000000000000000","status":"queued"}`))
	})
	return (&http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe()
}

// runIngest measures durable ingest alone: the upstream is paced at 1 rps, so
// dispatch does not compete for the CPU.
func runIngest(ctx context.Context, o options) ([]result, error) {
	return ingestWith(ctx, o, "ingest (durable, "+o.sync+" sync)", "ingest", nil)
}

// ingestWith runs the ingest scenario as name. beside, if set, starts
// work that runs alongside the submissions (given the daemon's and the
// target's URLs); the function it returns stops that work and says what it
// did, for the row's note, and how many of its requests failed.
func ingestWith(ctx context.Context, o options, name, prefix string,
	beside func(ctx context.Context, daemonURL, targetURL string) (stop func() (note string, failed int))) ([]result, error) {
	target, err := newTarget()
	if err != nil {
		return nil, err
	}
	defer target.close()
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 1, 1}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	stop := func() (string, int) { return "", 0 }
	if beside != nil {
		stop = beside(ctx, d.url, target.url())
	}
	w := d.begin(ctx)
	l := submit(ctx, d.url, "", o.jobs, o.clients, o.quiet, name, bodyMaker(o, prefix, target.url()+"/t", ""))
	c := w.end(ctx, l.accepted)
	note, failed := stop()
	r := result{scenario: name, kind: prefix, store: o.store, accepted: l.accepted, failed: l.rejected + l.errors + failed,
		ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99), max: l.percentile(1),
		lost: -1, rss: d.peakRSS(), note: l.firstErr, cost: c}
	if beside != nil {
		r.note, r.listing = note, true
		if l.firstErr != "" {
			r.note += "; ingest: " + l.firstErr
		}
	}
	return []result{r}, nil
}

// runE2E measures accepted → target → webhook with a fast loopback target.
func runE2E(ctx context.Context, o options) ([]result, error) {
	target, hooks, closeBoth, err := newTargetAndReceiver()
	if err != nil {
		return nil, err
	}
	defer closeBoth()
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 100000, 256}, {hooks.host(), 100000, 256}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	r := e2eOn(ctx, o, d, target, hooks, "e2e")
	r.scenario = "e2e (target + webhook)"
	return []result{r}, nil
}

// e2eOn submits o.jobs jobs for target with hooks as their webhook to d
// and waits for every webhook (at most o.timeout). The daemon's config must
// give both hosts a high rate. It forgets what hooks saw before, so one
// receiver serves several runs one after another.
//
// The wait ends when every job the submissions named has its webhook: a
// webhook for a job this run did not name (a submission whose answer could
// not be read, a body without a job_id) does not stand in for one that has
// not arrived. Such webhooks, and the jobs still without one when the wait
// gave up, are described in the result's note, with the daemon's last log
// lines when a job's webhook never came.
func e2eOn(ctx context.Context, o options, d *daemon, target, hooks *sink, label string) result {
	hooks.reset()
	w := d.begin(ctx)
	l := submit(ctx, d.url, "", o.jobs, o.clients, o.quiet, label+" submit", bodyMaker(o, label, target.url()+"/t", hooks.url()+"/hook"))
	stopBar := progress(o.quiet, label+" webhooks", l.accepted, func() int64 { return int64(hooks.received()) })
	deadline := time.Now().Add(o.timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		// Counting distinct webhooks is cheap; looking each job up only
		// once there are as many as jobs.
		if hooks.received() >= l.accepted && len(hooks.without(l.ids)) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	e2eElapsed := time.Since(l.start)
	c := w.end(ctx, l.accepted)
	stopBar()
	missing, foreign := hooks.without(l.ids), hooks.foreign(l.ids)
	lost := len(missing)
	note := l.firstErr
	if len(foreign) > 0 {
		note = join(note, fmt.Sprintf("%d webhooks for jobs the submissions did not name (first: %q)", len(foreign), foreign[0]))
	}
	if lost > 0 {
		note = join(note, fmt.Sprintf("no webhook after %s for %d jobs (first: %s); the daemon's last log lines: %s",
			o.timeout, lost, missing[0], d.lastLogs(5)))
	}
	return result{scenario: label, kind: "e2e", store: o.store, accepted: l.accepted, failed: l.rejected + l.errors,
		ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99), max: l.percentile(1),
		e2e: float64(l.accepted-lost) / e2eElapsed.Seconds(), lost: lost, rss: d.peakRSS(), note: note, cost: c}
}

// without returns the ids (of those not empty) hooks has seen no webhook for.
func (s *sink) without(ids []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, id := range ids {
		if id != "" && s.seen[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// foreign returns the job ids hooks saw webhooks for that are not in ids
// ("" for a webhook whose job_id could not be read), in no order.
func (s *sink) foreign(ids []string) []string {
	known := make(map[string]bool, len(ids))
	for _, id := range ids {
		known[id] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.seen {
		if id == "" || !known[id] {
			out = append(out, id)
		}
	}
	return out
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// runBacklog queues o.backlog jobs against a 2 rps upstream and reports the
// daemon's peak RSS.
func runBacklog(ctx context.Context, o options) ([]result, error) {
	target, err := newTarget()
	if err != nil {
		return nil, err
	}
	defer target.close()
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), 2, 1}})
	if err != nil {
		return nil, err
	}
	defer d.stop()
	w := d.begin(ctx)
	l := submit(ctx, d.url, "", o.backlog, o.clients, o.quiet, "backlog", bodyMaker(o, "backlog", target.url()+"/t", ""))
	c := w.end(ctx, l.accepted)
	time.Sleep(2 * time.Second) // let the lane settle with the backlog queued
	return []result{{scenario: fmt.Sprintf("backlog (%d queued, 2 rps)", l.accepted), kind: "backlog", store: o.store,
		accepted: l.accepted, failed: l.rejected + l.errors, ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99),
		max: l.percentile(1), lost: -1, rss: d.peakRSS(), note: l.firstErr, cost: c}}, nil
}

func printTable(w io.Writer, rs []result) {
	var ceiling float64
	for _, r := range rs {
		if r.kind == "ceiling" {
			ceiling = r.ingest
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\taccepted\tfailed\tingest jobs/s\tvs ceiling\tp50\tp99\tmax\te2e jobs/s\tlost\tpeak RSS\tserver CPU/job\tallocs/job\tGC/1k jobs\tharness CPU/job\t")
	for _, r := range rs {
		ratio, e2e, lost, rss := "-", "-", "-", "-"
		if ceiling > 0 && r.kind != "ceiling" {
			ratio = fmt.Sprintf("%.2f", r.ingest/ceiling)
		}
		if r.e2e > 0 {
			e2e = fmt.Sprintf("%.0f", r.e2e)
		}
		if r.lost >= 0 {
			lost = fmt.Sprint(r.lost)
		}
		if r.rss > 0 {
			rss = mib(r.rss)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.scenario, r.accepted, r.failed, r.ingest, ratio,
			ms(r.p50), ms(r.p99), ms(r.max), e2e, lost, rss, cpuText(r.cost.cpu), r.cost.allocsText(), r.cost.gcText(), cpuText(r.cost.harness))
	}
	tw.Flush()
	for _, r := range rs {
		switch {
		case r.note != "" && r.listing:
			fmt.Fprintf(w, "%s: %s\n", r.scenario, r.note)
		case r.note != "" && r.failed > 0:
			fmt.Fprintf(w, "%s: first failure: %s\n", r.scenario, r.note)
		case r.note != "":
			fmt.Fprintf(w, "%s: %s\n", r.scenario, r.note)
		}
		if r.cost.err != "" {
			fmt.Fprintf(w, "%s: no allocation counts: %s\n", r.scenario, r.cost.err)
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
