package main

import (
	"strings"
	"testing"
	"time"
)

func TestFormatCell(t *testing.T) {
	cases := []struct {
		name string
		ws   workerSecond
		rep  float64
		want string
	}{
		{"idle", workerSecond{}, repNone, "0"},
		{"plain", workerSecond{secondStats: secondStats{requests: 5, http200: 5}}, 1, "5"},
		{"500 wins over 429", workerSecond{secondStats: secondStats{requests: 7, http200: 4, http429: 2, http500: 1}}, repNone, "7!"},
		{"429", workerSecond{secondStats: secondStats{requests: 7, http200: 5, http429: 2, advertised: 4}}, repNone, "7~/4"},
		{"advert with decimals", workerSecond{secondStats: secondStats{requests: 3, advertised: 2.54}}, repNone, "3/2.54"},
		{"advert trailing zero", workerSecond{secondStats: secondStats{requests: 3, advertised: 3.5}}, repNone, "3/3.5"},
		{"reputation", workerSecond{secondStats: secondStats{requests: 2, http500: 2, advertised: 1}}, 0.25, "2!/1/r0.25"},
		{"reputation rounds", workerSecond{secondStats: secondStats{requests: 1}}, 0.03125, "1/r0.03"},
		{"full reputation hidden", workerSecond{secondStats: secondStats{requests: 1}}, 1, "1"},
		{"evicted", workerSecond{}, repEvicted, "0/ev"},
		{"crash beats overload", workerSecond{secondStats: secondStats{requests: 8, http500: 8, advertised: 1}, overload: 9, inCrash: true}, 0.0625, "8!/1/r0.06/cr"},
		{"overload shown from 3", workerSecond{secondStats: secondStats{requests: 6, advertised: 2.5}, overload: 4.2}, repNone, "6/2.5/o4.2"},
		{"overload below 3 hidden", workerSecond{secondStats: secondStats{requests: 6}, overload: 2.99}, repNone, "6"},
		{"window with no requests", workerSecond{inCrash: true, overload: 1}, repNone, "0/cr"},
	}
	for _, c := range cases {
		if got := formatCell(c.ws, c.rep); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{1: "1", 3.5: "3.5", 2.54: "2.54", 2.999: "3", 0.7: "0.7", 12: "12", 2.005: "2"} {
		if got := formatNumber(v); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestHeaderAndTable(t *testing.T) {
	o := options{workers: 2, jobs: 30, rps: 50, pool: "p", scenario: "weighted"}
	specs := population("weighted", 2)
	h := headerLines(o, modeAquifer, specs)
	if !strings.HasPrefix(h[0], "mode=aquifer scenario=weighted workers=2 jobs=30 configured_rps=50.0 pool=p pool_ceiling=5.0 ") ||
		!strings.Contains(h[0], "does not cap the pool") {
		t.Errorf("header: %q", h[0])
	}
	if h[1] != "workers: [w1=stable/2rps w2=stable/3rps]" {
		t.Errorf("workers line: %q", h[1])
	}
	if h := headerLines(o, modeRegular, specs); !strings.HasPrefix(h[0], "mode=regular ") || strings.Contains(h[0], "pool_ceiling") {
		t.Errorf("regular header: %q", h[0])
	}
	if got := tableHeader(specs, 4); got != " sec completed failed pool w1           w2" {
		t.Errorf("table header %q", got)
	}
	if got := formatRow("3", "12", "0", "p", 4, []string{"5!/1/r0.50", "2"}); got != "   3        12      0 p    5!/1/r0.50   2" {
		t.Errorf("row %q", got)
	}
}

func TestSummaryAndCompare(t *testing.T) {
	r := runResult{mode: modeAquifer, outcomeCounts: outcomeCounts{completed: 480, failed: 5, completed429: 2}, remaining: 15,
		drainedAt: 0, requests: totals{requests: 600, http200: 550, http429: 20, http500: 30, failing: 12}}
	want := "summary completed=480 failed=5 remaining=15 drained_at=0s worker_requests=600 http_200=550 http_429=20 http_500=30 requests_while_failing=12 completed_with_429=2"
	if got := summaryLine(r); got != want {
		t.Errorf("summary\n got %q\nwant %q", got, want)
	}
	var b strings.Builder
	r2 := r
	r2.mode, r2.drainedAt = modeRegular, 21
	compareTable(&b, options{scenario: "harsh", workers: 10, jobs: 500, duration: 30 * time.Second, rps: 50, seed: 1}, []runResult{r, r2})
	out := b.String()
	for _, want := range []string{
		"compare scenario=harsh workers=10 jobs=500 duration=30s rps=50.0 seed=1\n",
		"aquifer    regular\n",
		"requests_while_failing           12         12\n",
		"drained_at                    never        21s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("compare output lacks %q:\n%s", want, out)
		}
	}
}

func TestCSVRow(t *testing.T) {
	w := workerSpec{index: 3, behavior: fragile, capacity: 3}
	ws := workerSecond{secondStats: secondStats{requests: 4, http200: 3, http500: 1, advertised: 2.3}, overload: 4.2, inCrash: true}
	got := strings.Join(csvRow(7, outcomeCounts{completed: 100, failed: 2}, w, ws, 0.5), ",")
	if want := "7,100,2,worker-03,4,3,0,1,2.30,0.5000,4.20,true,fragile,3"; got != want {
		t.Errorf("csv row\n got %s\nwant %s", got, want)
	}
	got = strings.Join(csvRow(1, outcomeCounts{}, w, workerSecond{}, repNone), ",")
	if want := "1,0,0,worker-03,0,0,0,0,,,0.00,false,fragile,3"; got != want {
		t.Errorf("empty csv row\n got %s\nwant %s", got, want)
	}
	if len(csvHeader) != 14 || csvHeader[0] != "second" || csvHeader[13] != "capacity_rps" {
		t.Errorf("header %v", csvHeader)
	}
}
