package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// arrivals is a loopback target that records when each request arrived and
// what its body said.
type arrivals struct {
	*leanServer
	mu    sync.Mutex
	times []time.Time
	keys  map[string]time.Time // body → first arrival
}

func newArrivals() (*arrivals, error) {
	a := &arrivals{keys: map[string]time.Time{}}
	ls, err := newLeanServer(200, "application/json", `{"ok":true}`, func(body []byte) {
		now := time.Now()
		a.mu.Lock()
		a.times = append(a.times, now)
		if _, ok := a.keys[string(body)]; !ok {
			a.keys[string(body)] = now
		}
		a.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	a.leanServer = ls
	return a, nil
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.times)
}

func (a *arrivals) at(key string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.keys[key]
	return t, ok
}

// rate is the arrival rate over the run, first to last arrival.
func (a *arrivals) rate() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.times)
	if n < 2 {
		return 0
	}
	ts := append([]time.Time(nil), a.times...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return float64(n-1) / ts[n-1].Sub(ts[0]).Seconds()
}

func jobJSON(user, key, url, body string) []byte {
	b, _ := json.Marshal(map[string]any{"user_id": user, "idempotent_key": key, "url": url, "method": "POST",
		"headers": map[string]string{"Authorization": "Bearer " + user}, "body": body})
	return b
}

// pacingResult is one configured rate and what the target measured.
type pacingResult struct {
	configured float64
	jobs       int
	measured   float64
}

// runPacing configures a loopback upstream at each of -pacing-rates (20,
// 200 and 2,000 rps by default), queues about -pacing-seconds of work for
// it (at least 10 jobs) and measures the arrival rate.
func runPacing(ctx context.Context, o options) ([]pacingResult, error) {
	var out []pacingResult
	for _, rate := range o.pacingRates {
		target, err := newArrivals()
		if err != nil {
			return nil, err
		}
		d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), rate, 64}})
		if err != nil {
			target.close()
			return nil, err
		}
		n := max(int(rate*o.pacingSeconds), 10)
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		l := submit(ctx, d.url, "", n, min(o.clients, n), true, "pacing", func(i int) []byte {
			return jobJSON("pace", run+strconv.Itoa(i), target.url()+"/p", "x")
		})
		deadline := time.Now().Add(time.Duration(float64(n)/rate*float64(time.Second)) + 30*time.Second)
		stop := progress(o.quiet, fmt.Sprintf("pacing %g rps", rate), l.accepted, func() int64 { return int64(target.count()) })
		for target.count() < l.accepted && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		out = append(out, pacingResult{configured: rate, jobs: target.count(), measured: target.rate()})
		d.stop()
		target.close()
	}
	return out, nil
}

// parseRates reads -pacing-rates: positive rps, comma-separated.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) {
			return nil, fmt.Errorf("-pacing-rates: %q is not a positive rate", f)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-pacing-rates: no rates")
	}
	return out, nil
}

func printPacing(w io.Writer, rs []pacingResult) {
	fmt.Fprintln(w, "\npacing accuracy (loopback target, max_concurrent 64):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configured rps\tjobs\tmeasured rps\terror\twithin ±5%\t")
	for _, r := range rs {
		errPct := (r.measured - r.configured) / r.configured * 100
		ok := "yes"
		if errPct > 5 || errPct < -5 {
			ok = "NO"
		}
		fmt.Fprintf(tw, "%g\t%d\t%.1f\t%+.2f%%\t%s\t\n", r.configured, r.jobs, r.measured, errPct, ok)
	}
	tw.Flush()
}

// fairnessResult is one run of the fairness scenario.
type fairnessResult struct {
	accountQueues bool
	floodJobs     int
	quietLatency  []time.Duration // submit → arrival at the target, per quiet job
}

// runFairness has a noisy tenant flood one upstream while a quiet tenant
// submits a few spaced jobs to it, once with account queues on and once
// without, and records how long each quiet job waited.
func runFairness(ctx context.Context, o options) ([]fairnessResult, error) {
	var out []fairnessResult
	for _, on := range []bool{true, false} {
		r, err := fairnessRun(ctx, o, on)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func fairnessRun(ctx context.Context, o options, accountQueues bool) (fairnessResult, error) {
	res := fairnessResult{accountQueues: accountQueues, floodJobs: o.flood}
	target, err := newArrivals()
	if err != nil {
		return res, err
	}
	defer target.close()
	const rate = 500
	d, err := startDaemon(ctx, o, []upstreamRate{{target.host(), rate, 8}})
	if err != nil {
		return res, err
	}
	defer d.stop()
	header := ""
	if accountQueues {
		header = "X-Aqueduct-Account-Queue: enabled\r\n"
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	label := "flood (shared)"
	if accountQueues {
		label = "flood (accounts)"
	}
	flood := submit(ctx, d.url, header, o.flood, o.clients, true, label, func(i int) []byte {
		return jobJSON("noisy", run+"n"+strconv.Itoa(i), target.url()+"/f", "noisy")
	})
	if flood.accepted == 0 {
		return res, fmt.Errorf("flood not accepted: %s", flood.firstErr)
	}
	quiet := newLeanConn(d.url)
	quiet.extra = header
	defer quiet.close()
	submitted := make([]time.Time, o.quiet5)
	for i := range o.quiet5 {
		time.Sleep(500 * time.Millisecond)
		submitted[i] = time.Now()
		if status, body, err := quiet.post("/jobs", jobJSON("quiet", run+"q"+strconv.Itoa(i), target.url()+"/q", "quiet-"+strconv.Itoa(i))); err != nil || status != 201 {
			return res, fmt.Errorf("quiet job %d: %v %d %s", i, err, status, body)
		}
	}
	deadline := time.Now().Add(time.Duration(o.flood/rate)*time.Second + 30*time.Second)
	for i := range o.quiet5 {
		for {
			if at, ok := target.at("quiet-" + strconv.Itoa(i)); ok {
				res.quietLatency = append(res.quietLatency, at.Sub(submitted[i]))
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return res, fmt.Errorf("quiet job %d never arrived", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return res, nil
}

func printFairness(w io.Writer, rs []fairnessResult) {
	fmt.Fprintln(w, "\nfairness (upstream at 500 rps / 8 concurrent; a noisy tenant floods, a quiet tenant sends jobs 0.5 s apart):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "account queues\tflood jobs\tquiet job waits (submit → upstream)\tworst\tall within 2 s\t")
	for _, r := range rs {
		var parts []string
		worst := time.Duration(0)
		for _, l := range r.quietLatency {
			parts = append(parts, fmt.Sprintf("%.0fms", float64(l.Microseconds())/1000))
			worst = max(worst, l)
		}
		on, ok := "off", "yes"
		if r.accountQueues {
			on = "on"
		}
		if worst > 2*time.Second {
			ok = "no"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0fms\t%s\t\n", on, r.floodJobs, strings.Join(parts, " "), float64(worst.Microseconds())/1000, ok)
	}
	tw.Flush()
}
