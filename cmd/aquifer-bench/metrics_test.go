package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// exposition is an excerpt of aquiferd's GET /metrics (client_golang's text
// format 0.0.4) after a few jobs, plus a label value with the characters a
// naive split gets wrong and a sample with a timestamp.
const exposition = `# HELP aquifer_jobs Unfinished jobs by state: queued (waiting for dispatch, store-wide), in_flight (attempts running in this process), webhooks_pending (results waiting for delivery, store-wide).
# TYPE aquifer_jobs gauge
aquifer_jobs{state="in_flight"} 0
aquifer_jobs{state="queued"} 1.048576e+06
aquifer_jobs{state="webhooks_pending"} 12
# HELP aquifer_dispatch_duration_seconds Duration of dispatch attempts, from sending the request to reading the response, by upstream.
# TYPE aquifer_dispatch_duration_seconds histogram
aquifer_dispatch_duration_seconds_bucket{upstream="127.0.0.1:40123",le="0.005"} 3
aquifer_dispatch_duration_seconds_bucket{upstream="127.0.0.1:40123",le="+Inf"} 4
aquifer_dispatch_duration_seconds_sum{upstream="127.0.0.1:40123"} 0.0123
aquifer_dispatch_duration_seconds_count{upstream="127.0.0.1:40123"} 4
aquifer_store_max_bytes 8.388608e+08
# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="1"} 0.000311
go_gc_duration_seconds_sum 0.00131
go_gc_duration_seconds_count 17
go_gc_gomemlimit_bytes 9.223372036854776e+18
go_info{version="go1.26.8"} 1
# HELP go_memstats_mallocs_total Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.
# TYPE go_memstats_mallocs_total counter
go_memstats_mallocs_total 8.372215e+06

odd_labels{path="/a b}c",note="say \"hi\" {x}"} 7 1800000000000
nan_gauge NaN
`

func TestParseExposition(t *testing.T) {
	m, err := parseExposition(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		seriesQueued:                           1048576,
		`aquifer_jobs{state="in_flight"}`:      0,
		seriesMallocs:                          8372215,
		seriesGCs:                              17,
		`go_gc_duration_seconds{quantile="1"}`: 0.000311,
		`aquifer_dispatch_duration_seconds_bucket{upstream="127.0.0.1:40123",le="+Inf"}`: 4,
		"aquifer_store_max_bytes":                         838860800,
		`odd_labels{path="/a b}c",note="say \"hi\" {x}"}`: 7,
	} {
		got, ok := m[series]
		if !ok || got != want {
			t.Errorf("%s = %v (present %v); want %v", series, got, ok, want)
		}
	}
	if v, ok := m["nan_gauge"]; !ok || v == v { // NaN is the only value unequal to itself
		t.Errorf("nan_gauge = %v (present %v); want NaN", v, ok)
	}
	if _, ok := m["go_gc_duration_seconds"]; ok {
		t.Error("a summary's name without labels is not a series of its own")
	}
	rt, err := runtimeOf(m)
	if err != nil || rt.mallocs != 8372215 || rt.gcs != 17 {
		t.Fatalf("runtimeOf = %+v, %v; want 8372215 mallocs, 17 GCs", rt, err)
	}
}

func TestParseExpositionErrors(t *testing.T) {
	for _, line := range []string{
		"go_memstats_mallocs_total",            // no value
		`aquifer_jobs{state="queued" 3`,        // unterminated label set
		`aquifer_jobs{state="queued}"} three`,  // not a number
		"go_goroutines 19 1800000000000 extra", // too many fields
		`{state="queued"} 3`,                   // no name
		`aquifer_jobs{state="a\"} 3`,           // the escaped quote does not end the value
	} {
		if _, err := parseExposition(strings.NewReader("# HELP x\n" + line + "\n")); err == nil {
			t.Errorf("%q: parsed; want an error", line)
		} else if !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: error %q does not name line 2", line, err)
		}
	}
	m, _ := parseExposition(strings.NewReader("go_goroutines 19\n"))
	if _, err := runtimeOf(m); err == nil || !strings.Contains(err.Error(), seriesMallocs) {
		t.Errorf("runtimeOf without the Go collector: %v; want an error naming %s", err, seriesMallocs)
	}
}

// keep holds what TestWindowCountsAllocations allocates, so the compiler
// cannot drop it.
var keep []*[64]byte

// TestWindowCountsAllocations measures a window on the ceiling's runtime
// metrics handler serving this test process: the objects allocated inside
// the window show up per job, GC cycles too.
func TestWindowCountsAllocations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(serveRuntimeMetrics))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &daemon{url: srv.URL} // no process: CPU unknown
	w := d.begin(ctx)
	const jobs, perJobAllocs = 100, 50
	keep = keep[:0]
	for range jobs * perJobAllocs {
		keep = append(keep, new([64]byte))
	}
	c := w.end(ctx, jobs)
	if c.err != "" {
		t.Fatal(c.err)
	}
	// The runtime counts small objects when a span is handed back or
	// refilled, so up to a span per P (128 of these) may not have been
	// counted yet: ~1.3 per job here.
	if floor := perJobAllocs * 0.9; c.allocs < floor {
		t.Errorf("allocs/job = %.1f; want at least %.0f of the %d allocated per job", c.allocs, floor, perJobAllocs)
	}
	if c.gcPer1k < 0 {
		t.Errorf("GC/1k jobs = %v; want a count", c.gcPer1k)
	}
	if c.cpu != 0 || cpuText(c.cpu) != "-" {
		t.Errorf("CPU/job = %v for a server without a process; want unknown", c.cpu)
	}

	// A server without the runtime series: the cost says why it has no counts.
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("go_goroutines 3\n"))
	}))
	defer bare.Close()
	c = (&daemon{url: bare.URL}).begin(ctx).end(ctx, jobs)
	if c.allocs != -1 || c.allocsText() != "-" || !strings.Contains(c.err, seriesMallocs) {
		t.Errorf("without go_memstats_mallocs_total: allocs %v (%q), err %q; want unknown with the reason", c.allocs, c.allocsText(), c.err)
	}
}

// A webhook for a job the submissions did not name (or whose job_id could
// not be read) is foreign; it does not make up for a named job without
// one.
func TestSinkWithoutAndForeign(t *testing.T) {
	s := &sink{seen: map[string]int{"a": 1, "b": 2, "x": 1, "": 1}}
	ids := []string{"a", "b", "c", ""} // "" : a submission whose answer had no id
	if got := s.without(ids); !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("without = %v; want [c]", got)
	}
	got := s.foreign(ids)
	sort.Strings(got)
	if !reflect.DeepEqual(got, []string{"", "x"}) {
		t.Fatalf("foreign = %q; want the unreadable one and x", got)
	}
	if s.received() != len(ids) || len(s.without(ids)) == 0 {
		t.Fatal("the test no longer has as many distinct webhooks as jobs with one missing")
	}
}

func TestLastLogs(t *testing.T) {
	d := &daemon{logs: &logBuffer{}}
	if got := d.lastLogs(2); got != "none" {
		t.Fatalf("no output: %q", got)
	}
	fmt.Fprint(d.logs, "one\ntwo\nthree\n")
	if got := d.lastLogs(2); got != "two | three" {
		t.Fatalf("lastLogs(2) = %q", got)
	}
	if got := (&daemon{}).lastLogs(2); got != "none" {
		t.Fatalf("a daemon the bench did not start: %q", got)
	}
}
