package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
)

// clusterResult is one run of the cluster scenario.
type clusterResult struct {
	instances, jobs int
	configured      float64
	aggregate, peak float64 // arrival rate over the run, and over the busiest 2 s
	takeover        time.Duration
	lost, repeated  int
}

// runCluster starts three aquiferd processes on one Postgres schema in front
// of one destination paced at 50 rps, submits o.jobs (at most 1,000)
// round-robin to the three, kills the destination's lane holder with
// SIGKILL a quarter of the way through, and measures the aggregate rate the
// destination saw, how long the lane took to move, and whether every job
// arrived.
func runCluster(ctx context.Context, o options) (*clusterResult, error) {
	o.store = "postgres"
	const instances, rate = 3, 50.0
	n := min(o.jobs, 1000)
	target, err := newArrivals()
	if err != nil {
		return nil, err
	}
	defer target.close()
	schema := "aqbench_cluster_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer dropSchema(o.pgDSN, schema)
	var ds []*daemon
	defer func() {
		for _, d := range ds {
			d.stop()
		}
	}()
	for i := range instances {
		d, err := startDaemonWith(ctx, o, []upstreamRate{{target.host(), rate, 8}}, schema,
			[]string{"AQUIFER_INSTANCE_ID=bench-" + strconv.Itoa(i)})
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var wg sync.WaitGroup
	accepted := make([]int, instances)
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			share := n/instances + boolInt(i < n%instances)
			l := submit(ctx, d.url, "", share, max(o.clients/instances, 1), true, "cluster", func(k int) []byte {
				return jobJSON("cluster", run+"-"+strconv.Itoa(i)+"-"+strconv.Itoa(k), target.url()+"/c", strconv.Itoa(i)+"-"+strconv.Itoa(k))
			})
			accepted[i] = l.accepted
		}()
	}
	wg.Wait()
	total := 0
	for _, a := range accepted {
		total += a
	}
	stop := progress(o.quiet, "cluster arrivals", total, func() int64 { return int64(target.count()) })
	defer stop()
	for target.count() < total/4 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	lane := target.url()
	victim := -1
	for victim < 0 && ctx.Err() == nil {
		for i, d := range ds {
			if laneHeldBy(d.url, lane) {
				victim = i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = ds[victim].cmd.Process.Kill()
	_ = ds[victim].cmd.Wait()
	killed := time.Now()
	var takeover time.Duration
	for takeover == 0 && time.Since(killed) < 30*time.Second && ctx.Err() == nil {
		for i, d := range ds {
			if i != victim && laneHeldBy(d.url, lane) {
				takeover = time.Since(killed)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline := time.Now().Add(o.timeout)
	for len(target.uniqueKeys()) < total && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	times := target.sortedTimes()
	r := &clusterResult{instances: instances, jobs: total, configured: rate, aggregate: target.rate(), takeover: takeover,
		lost: total - len(target.uniqueKeys()), repeated: len(times) - len(target.uniqueKeys())}
	for i, j := 0, 0; i < len(times); i++ {
		for j < len(times) && times[j].Sub(times[i]) < 2*time.Second {
			j++
		}
		if times[len(times)-1].Sub(times[i]) >= 2*time.Second {
			r.peak = max(r.peak, float64(j-i)/2)
		}
	}
	return r, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// laneHeldBy reports whether the instance at base dispatches lane.
func laneHeldBy(base, lane string) bool {
	resp, err := http.Get(base + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h struct {
		Cluster *struct {
			Lanes []string `json:"lanes"`
		} `json:"cluster"`
	}
	if json.Unmarshal(b, &h) != nil || h.Cluster == nil {
		return false
	}
	for _, l := range h.Cluster.Lanes {
		if l == lane {
			return true
		}
	}
	return false
}

func (a *arrivals) uniqueKeys() map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]time.Time, len(a.keys))
	for k, v := range a.keys {
		out[k] = v
	}
	return out
}

func (a *arrivals) sortedTimes() []time.Time {
	a.mu.Lock()
	ts := append([]time.Time(nil), a.times...)
	a.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

func printCluster(w io.Writer, r *clusterResult) {
	fmt.Fprintf(w, "\ncluster (%d aquiferd on one Postgres, destination at %g rps, lane holder killed at 25%%):\n", r.instances, r.configured)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "jobs\taggregate rps\tpeak 2-s rps\t≤ 5% over\tlane moved after\tlost\trepeated\t")
	ok := "yes"
	if r.aggregate > r.configured*1.05 {
		ok = "NO"
	}
	fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%s\t%s\t%d\t%d\t\n", r.jobs, r.aggregate, r.peak, ok, r.takeover.Round(10*time.Millisecond), r.lost, r.repeated)
	tw.Flush()
}
