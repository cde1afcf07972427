package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// outcomeCounts are the jobs that ended, as the mode saw them.
type outcomeCounts struct {
	completed    int
	failed       int
	completed429 int // completed with a 429 as the final answer
}

// runResult is one run's totals.
type runResult struct {
	mode string
	outcomeCounts
	remaining int
	drainedAt int // first second with completed+failed >= jobs; 0: never
	requests  totals
	problems  []string
}

// Reputation placeholders for formatCell and csvRow.
const (
	repNone    = -1.0 // the mode has no reputation (regular)
	repEvicted = -2.0 // the member is not in the pool right now
)

// cellWidth is the width worker columns are padded to; longer cells push
// the rest of the row right.
const cellWidth = 12

// headerLines are the two lines before the table (BEHAVIOR.md §27.6).
func headerLines(o options, mode string, specs []workerSpec) []string {
	first := fmt.Sprintf("mode=%s scenario=%s workers=%d jobs=%d configured_rps=%.1f pool=%s",
		mode, o.scenario, o.workers, o.jobs, o.rps, o.pool)
	if mode == modeAquifer {
		sum := 0.0
		for _, w := range specs {
			sum += w.capacity
		}
		first += fmt.Sprintf(" pool_ceiling=%.1f (live sum of members' effective rates; configured_rps does not cap the pool, it paces the webhook receiver)", sum)
	} else {
		first += " (no pool: round-robin at configured_rps)"
	}
	cells := make([]string, len(specs))
	for i, w := range specs {
		cells[i] = fmt.Sprintf("w%d=%s/%srps", w.index, w.behavior, formatNumber(w.capacity))
	}
	return []string{first, "workers: [" + strings.Join(cells, " ") + "]"}
}

// tableHeader is the per-second table's header row.
func tableHeader(specs []workerSpec, poolWidth int) string {
	cols := make([]string, len(specs))
	for i, w := range specs {
		cols[i] = fmt.Sprintf("w%d", w.index)
	}
	return formatRow("sec", "completed", "failed", "pool", poolWidth, cols)
}

func formatRow(sec, completed, failed, pool string, poolWidth int, cells []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%4s %9s %6s %-*s", sec, completed, failed, poolWidth, pool)
	for _, c := range cells {
		fmt.Fprintf(&b, " %-*s", cellWidth, c)
	}
	return strings.TrimRight(b.String(), " ")
}

// formatCell renders one worker's second: the request count; "!" if any
// 500, else "~" if any 429; "/<adv>" if it advertised a rate; "/r<rep>" if
// its reputation is strictly between 0 and 1; "/ev" if it is not in the
// pool (evicted, rep == repEvicted; an addition to BEHAVIOR.md §27.6); "/cr"
// in a crash window, else "/o<score>" when the overload score is at least 3.
// rep == repNone (regular mode) adds nothing.
func formatCell(ws workerSecond, rep float64) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(ws.requests))
	switch {
	case ws.http500 > 0:
		b.WriteByte('!')
	case ws.http429 > 0:
		b.WriteByte('~')
	}
	if ws.advertised > 0 {
		b.WriteString("/" + formatNumber(ws.advertised))
	}
	switch {
	case rep == repEvicted:
		b.WriteString("/ev")
	case rep > 0 && rep < 1:
		fmt.Fprintf(&b, "/r%.2f", rep)
	}
	switch {
	case ws.inCrash:
		b.WriteString("/cr")
	case ws.overload >= overloadSlow:
		fmt.Fprintf(&b, "/o%.1f", ws.overload)
	}
	return b.String()
}

// formatNumber prints v with at most two decimals and no trailing zeros.
func formatNumber(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// summaryLine is the final line of a run (BEHAVIOR.md §27.6), with the
// harness's extra counts at the end.
func summaryLine(r runResult) string {
	return fmt.Sprintf("summary completed=%d failed=%d remaining=%d drained_at=%ds worker_requests=%d http_200=%d http_429=%d http_500=%d requests_while_failing=%d completed_with_429=%d",
		r.completed, r.failed, r.remaining, r.drainedAt, r.requests.requests, r.requests.http200,
		r.requests.http429, r.requests.http500, r.requests.failing, r.completed429)
}

// compareTable prints runs side by side, one column per mode.
func compareTable(w io.Writer, o options, runs []runResult) {
	fmt.Fprintf(w, "compare scenario=%s workers=%d jobs=%d duration=%s rps=%.1f seed=%d\n",
		o.scenario, o.workers, o.jobs, o.duration, o.rps, o.seed)
	rows := []struct {
		name string
		get  func(runResult) string
	}{
		{"completed", func(r runResult) string { return strconv.Itoa(r.completed) }},
		{"failed", func(r runResult) string { return strconv.Itoa(r.failed) }},
		{"remaining", func(r runResult) string { return strconv.Itoa(r.remaining) }},
		{"requests_to_workers", func(r runResult) string { return strconv.Itoa(r.requests.requests) }},
		{"requests_while_failing", func(r runResult) string { return strconv.Itoa(r.requests.failing) }},
		{"http_200", func(r runResult) string { return strconv.Itoa(r.requests.http200) }},
		{"http_429", func(r runResult) string { return strconv.Itoa(r.requests.http429) }},
		{"http_500", func(r runResult) string { return strconv.Itoa(r.requests.http500) }},
		{"completed_with_429", func(r runResult) string { return strconv.Itoa(r.completed429) }},
		{"drained_at", func(r runResult) string { return drained(r.drainedAt) }},
	}
	fmt.Fprintf(w, "%-24s", "")
	for _, r := range runs {
		fmt.Fprintf(w, " %10s", r.mode)
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "%-24s", row.name)
		for _, r := range runs {
			fmt.Fprintf(w, " %10s", row.get(r))
		}
		fmt.Fprintln(w)
	}
}

func drained(s int) string {
	if s == 0 {
		return "never"
	}
	return fmt.Sprintf("%ds", s)
}

// csvHeader is the per-second per-worker CSV's header (BEHAVIOR.md §27.6).
var csvHeader = []string{"second", "completed", "failed", "worker_id", "requests", "http_200", "http_429", "http_500",
	"advertised_rps", "reputation", "overload", "crashed", "behavior", "capacity_rps"}

// csvRow is one worker's second; rep < 0 (none, evicted) leaves the
// reputation empty.
func csvRow(sec int, c outcomeCounts, w workerSpec, ws workerSecond, rep float64) []string {
	adv, reps := "", ""
	if ws.advertised > 0 {
		adv = strconv.FormatFloat(ws.advertised, 'f', 2, 64)
	}
	if rep >= 0 {
		reps = strconv.FormatFloat(rep, 'f', 4, 64)
	}
	return []string{strconv.Itoa(sec), strconv.Itoa(c.completed), strconv.Itoa(c.failed), w.memberID(),
		strconv.Itoa(ws.requests), strconv.Itoa(ws.http200), strconv.Itoa(ws.http429), strconv.Itoa(ws.http500),
		adv, reps, strconv.FormatFloat(ws.overload, 'f', 2, 64), strconv.FormatBool(ws.inCrash),
		string(w.behavior), formatNumber(w.capacity)}
}

// newCSV returns a CSV writer with the header written.
func newCSV(w io.Writer) (*csv.Writer, error) {
	cw := csv.NewWriter(w)
	return cw, cw.Write(csvHeader)
}
