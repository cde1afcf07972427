package main

import (
	"encoding/csv"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseBacklogs(t *testing.T) {
	for in, want := range map[string][]int{
		"0,100000,1000000":    {0, 100000, 1000000},
		" 0, 1_000 ,1000000 ": {0, 1000, 1000000},
		"5000":                {5000},
	} {
		got, err := parseBacklogs(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseBacklogs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "0,-1", "0,1e6", "100,100", "1000,10"} {
		if got, err := parseBacklogs(in); err == nil {
			t.Errorf("parseBacklogs(%q) = %v; want an error", in, got)
		}
	}
}

func scaleRowOf(store string, backlog int, ingest, e2e float64, peakMiB int64) scaleRow {
	return scaleRow{store: store, backlog: backlog, queued: backlog, reported: backlog,
		ingest: result{kind: "ingest", accepted: 100, ingest: ingest, cost: unknownCost},
		e2e:    result{kind: "e2e", accepted: 100, e2e: e2e, cost: unknownCost},
		rss:    peakMiB << 20, peak: peakMiB << 20}
}

// TestEvaluateScale checks the largest step against the first per store: a
// rate at exactly 80 % is met, below is not; the RSS limit is inclusive.
func TestEvaluateScale(t *testing.T) {
	rows := []scaleRow{
		scaleRowOf("sqlite", 0, 5000, 2000, 90),
		scaleRowOf("sqlite", 100000, 100, 100, 300), // a middle step is not judged
		scaleRowOf("sqlite", 1000000, 4000, 1599, 256),
		scaleRowOf("pebble", 1000000, 6000, 3000, 257),
	}
	type want struct {
		store, goal, value string
		met                bool
	}
	wants := []want{
		{"sqlite", "ingest jobs/s at 1000000 queued ≥ 80 % of at 0", "80 %", true},
		{"sqlite", "e2e jobs/s at 1000000 queued ≥ 80 % of at 0", "80 %", false}, // 79.95 %
		{"sqlite", "peak RSS at 1000000 queued ≤ 256.0 MiB", "256.0 MiB", true},
		{"pebble", "peak RSS at 1000000 queued ≤ 256.0 MiB", "257.0 MiB", false}, // one step: RSS only
	}
	got := evaluateScale(rows)
	if len(got) != len(wants) {
		t.Fatalf("%d checks; want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		c := got[i]
		if c.store != w.store || c.goal != w.goal || c.value != w.value || c.met != w.met || !c.known {
			t.Errorf("check %d = %+v; want %+v", i, c, w)
		}
	}
	rows[2].e2e.e2e = 0 // no webhook arrived: not measured, not met
	if c := evaluateScale(rows)[1]; c.known || c.met {
		t.Errorf("e2e without a rate: %+v; want not measured", c)
	}
}

func TestWriteScaleCSV(t *testing.T) {
	rows := []scaleRow{scaleRowOf("sqlite", 0, 5000, 2000, 90), scaleRowOf("sqlite", 1000, 2500, 2000, 91),
		scaleRowOf("pebble", 0, 6000, 3000, 80)}
	rows[1].ingest.cost.allocs = 123.45
	rows[2].reported = -1
	cell := scaleCSV(t, rows)
	for _, c := range []struct {
		row       int
		name, val string
	}{
		{1, "ingest_vs_first", "1.000"}, {2, "ingest_vs_first", "0.500"}, {3, "ingest_vs_first", "1.000"}, // each store's own first
		{2, "ingest_allocs_per_job", "123.5"}, {1, "ingest_allocs_per_job", ""}, // unknown stays empty
		{2, "backlog", "1000"}, {3, "store", "pebble"}, {3, "peak_rss_bytes", "83886080"},
		{2, "daemon_queued", "1000"}, {3, "daemon_queued", ""}, // unknown stays empty
	} {
		if got := cell(c.row, c.name); got != c.val {
			t.Errorf("row %d %s = %q; want %q", c.row, c.name, got, c.val)
		}
	}
}

// scaleCSV writes rows with writeScaleCSV, checks that it wrote a header
// and a record per row, and returns the cell of a record (1 is the first
// row) in a named column.
func scaleCSV(t *testing.T, rows []scaleRow) (cell func(row int, name string) string) {
	t.Helper()
	var b strings.Builder
	if err := writeScaleCSV(&b, rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(rows) {
		t.Fatalf("%d records; want a header and %d rows", len(recs), len(rows))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	return func(row int, name string) string {
		t.Helper()
		i, ok := col[name]
		if !ok {
			t.Fatalf("no column %s in %v", name, recs[0])
		}
		return recs[row][i]
	}
}

// TestScaleRowDisagrees checks when the daemon's queue count is reported as
// off the bench's: beyond 1 % (plus a few in flight), either way; not when
// it could not be read.
func TestScaleRowDisagrees(t *testing.T) {
	for _, c := range []struct {
		queued, reported int
		want             bool
	}{
		{1000000, 0, true}, {1000000, 990000, false}, {1000000, 989989, true}, {1000000, 1010010, false},
		{1000000, 1010011, true}, {0, 10, false}, {0, 11, true}, {1000000, -1, false},
	} {
		r := scaleRow{queued: c.queued, reported: c.reported}
		if got := r.disagrees(); got != c.want {
			t.Errorf("queued %d, daemon said %d: disagrees = %v; want %v", c.queued, c.reported, got, c.want)
		}
	}
}

func TestParseRates(t *testing.T) {
	got, err := parseRates(" 1, 20,5000 ")
	if err != nil || len(got) != 3 || got[0] != 1 || got[2] != 5000 {
		t.Fatalf("parseRates = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "x", "Inf"} {
		if _, err := parseRates(bad); err == nil {
			t.Errorf("parseRates(%q) accepted", bad)
		}
	}
}

// TestQuietnessNeedsTwoQuietSeconds: one quiet half second between two
// busy ones (a gap between two compactions) is not the end of the store's
// work; four in a row are.
func TestQuietnessNeedsTwoQuietSeconds(t *testing.T) {
	busy, idle := settleEvery/2, settleEvery/20
	var q quietness
	for i, c := range []time.Duration{busy, idle, busy, idle, idle, idle} {
		if q.observe(c) {
			t.Fatalf("window %d: quiet after %d windows, want four quiet ones in a row", i, i+1)
		}
	}
	if !q.observe(idle) {
		t.Fatal("four quiet windows in a row: not quiet")
	}
	if q.observe(settleEvery / 10) {
		t.Fatal("a tenth of a core counted as quiet")
	}
}

// With a reference beside the largest step, its rates are judged against
// the reference's mean, not the first step's, and a store with one step
// gets rate checks too.
func TestEvaluateScaleAgainstTheReference(t *testing.T) {
	run := func(ingest, e2e float64) result {
		return result{kind: "ingest", accepted: 50, ingest: ingest, e2e: e2e, cost: unknownCost}
	}
	rows := []scaleRow{
		scaleRowOf("pebble", 0, 9000, 9000, 90), // the first step would fail both
		scaleRowOf("pebble", 1000000, 4000, 1600, 200),
		scaleRowOf("sqlite", 1000000, 4000, 1600, 200),
	}
	rows[1].refIngest = []result{run(4500, 0), run(5500, 0)} // mean 5000: 80 %
	rows[1].refE2E = []result{run(0, 1800), run(0, 2300)}    // mean 2050: 78 %
	rows[2].refIngest = []result{run(4000, 0), run(0, 0)}    // a run without a rate: no reference
	rows[2].refE2E = []result{run(0, 1000), run(0, 1000)}
	got := evaluateScale(rows)
	want := []scaleCheck{
		{store: "pebble", goal: "ingest jobs/s at 1000000 queued ≥ 80 % of an empty store's beside it", value: "80 %", met: true, known: true},
		{store: "pebble", goal: "e2e jobs/s at 1000000 queued ≥ 80 % of an empty store's beside it", value: "78 %", met: false, known: true},
		{store: "pebble", goal: "peak RSS at 1000000 queued ≤ 256.0 MiB", value: "200.0 MiB", met: true, known: true},
		{store: "sqlite", goal: "ingest jobs/s at 1000000 queued ≥ 80 % of an empty store's beside it", value: "-"},
		{store: "sqlite", goal: "e2e jobs/s at 1000000 queued ≥ 80 % of an empty store's beside it", value: "160 %", met: true, known: true},
		{store: "sqlite", goal: "peak RSS at 1000000 queued ≤ 256.0 MiB", value: "200.0 MiB", met: true, known: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("checks:\n%+v\nwant:\n%+v", got, want)
	}
	cell := scaleCSV(t, rows)
	for _, c := range []struct {
		row       int
		name, val string
	}{
		{1, "ref_ingest_jobs_per_s", ""}, {1, "e2e_vs_ref", ""}, // the first step has no reference here
		{2, "ref_ingest_jobs_per_s", "5000.0"}, {2, "ingest_vs_ref", "0.800"},
		{2, "ref_e2e_jobs_per_s", "2050.0"}, {2, "e2e_vs_ref", "0.780"},
		{3, "ref_ingest_jobs_per_s", ""}, {3, "ingest_vs_ref", ""},
	} {
		if got := cell(c.row, c.name); got != c.val {
			t.Errorf("row %d %s = %q; want %q", c.row, c.name, got, c.val)
		}
	}
}

// pause stops a process until resume: the kernel reports it stopped, then
// running or sleeping again.
func TestPauseStopsTheProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep command: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	d := &daemon{cmd: cmd}
	for deadline := time.Now().Add(5 * time.Second); d.state() != 'S' && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !d.pause() {
		t.Fatal("pause did not stop the process")
	}
	if s := d.state(); s != 'T' {
		t.Fatalf("paused process in state %q; want T", s)
	}
	d.resume()
	deadline := time.Now().Add(5 * time.Second)
	for d.state() == 'T' && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := d.state(); s == 'T' || s == 0 {
		t.Fatalf("resumed process in state %q", s)
	}
	if (&daemon{}).pause() {
		t.Fatal("pause of a daemon the bench did not start (-addr) claims to have stopped it")
	}
}
