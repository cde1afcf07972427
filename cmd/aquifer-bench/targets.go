package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Issue 21's targets, as ratios to the ceiling measured in the same run, so
// that the machine's speed (and how busy it is) cancels out.
const (
	targetCPURatio    = 6.0                   // daemon CPU per e2e job ≤ 6 × the ceiling's CPU per request
	targetE2ERatio    = 0.2                   // e2e jobs/s ≥ 0.2 × the ceiling's requests/s
	targetIngestRatio = 0.5                   // ingest jobs/s ≥ 0.5 × the ceiling's requests/s
	targetIngestP99   = 25 * time.Millisecond // ingest p99 ≤ 25 ms (at 64 clients)
)

// targetCheck is one target checked against one row of this run.
type targetCheck struct {
	row    string  // the row's scenario
	goal   string  // what is compared, in words
	value  float64 // the measured figure (meaningful when known)
	limit  float64
	atMost bool   // met when value ≤ limit (else value ≥ limit)
	known  bool   // false: a figure it needs was not measured
	unit   string // "×" for ratios, "ms" for latencies
}

func (t targetCheck) met() bool { return t.known && meets(t.value, t.limit, t.atMost) }

// meets reports whether v is on the right side of limit: at most it when
// atMost, else at least it.
func meets(v, limit float64, atMost bool) bool {
	if atMost {
		return v <= limit
	}
	return v >= limit
}

// figureText prints a measured figure in its unit: a ratio ("10.93×") or
// a latency ("8.7 ms").
func figureText(v float64, unit string) string {
	if unit == "ms" {
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f%s", v, unit)
}

// limitText prints a target's limit with its direction ("≤ 6×", "≥ 0.5×",
// "≤ 25 ms").
func limitText(limit float64, atMost bool, unit string) string {
	op := "≥"
	if atMost {
		op = "≤"
	}
	if unit == "ms" {
		return fmt.Sprintf("%s %g ms", op, limit)
	}
	return fmt.Sprintf("%s %g%s", op, limit, unit)
}

// evaluateTargets checks every ingest and e2e row against the ceiling row of
// the same run. It returns nothing without a ceiling row (nothing to compare
// with). clients is the run's -c: the p99 target is stated at 64.
func evaluateTargets(rs []result, clients int) []targetCheck {
	var ceiling *result
	for i := range rs {
		if rs[i].kind == "ceiling" && rs[i].accepted > 0 {
			ceiling = &rs[i]
		}
	}
	if ceiling == nil {
		return nil
	}
	var out []targetCheck
	ratio := func(row, goal string, v, of, limit float64, atMost bool) targetCheck {
		t := targetCheck{row: row, goal: goal, limit: limit, atMost: atMost, unit: "×", known: v > 0 && of > 0}
		if t.known {
			t.value = v / of
		}
		return t
	}
	for _, r := range rs {
		switch r.kind {
		case "ingest":
			out = append(out,
				ratio(r.scenario, "ingest jobs/s ÷ ceiling requests/s", r.ingest, ceiling.ingest, targetIngestRatio, false),
				targetCheck{row: r.scenario, goal: fmt.Sprintf("ingest p99 at %d clients", clients),
					value: float64(r.p99.Microseconds()) / 1000, limit: float64(targetIngestP99.Milliseconds()),
					atMost: true, known: r.accepted > 0, unit: "ms"})
		case "e2e":
			out = append(out,
				ratio(r.scenario, "daemon CPU per e2e job ÷ ceiling CPU per request",
					float64(r.cost.cpu), float64(ceiling.cost.cpu), targetCPURatio, true),
				ratio(r.scenario, "e2e jobs/s ÷ ceiling requests/s", r.e2e, ceiling.ingest, targetE2ERatio, false))
		}
	}
	return out
}

func printTargets(w io.Writer, ts []targetCheck, clients int) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "\nissue 21 targets (ratios to the ceiling of this run):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, t := range ts {
		value, verdict := "-", "not measured"
		if t.known {
			value, verdict = figureText(t.value, t.unit), "not met"
			if t.met() {
				verdict = "met"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t\n", t.row, t.goal, value, limitText(t.limit, t.atMost, t.unit), verdict)
	}
	tw.Flush()
	if clients != 64 {
		fmt.Fprintf(w, "  (the p99 target is stated at 64 clients; this run used %d)\n", clients)
	}
}

// floorLine is one comparison with the floor row (floor.go).
type floorLine struct {
	row   string // the row compared with the floor, or the floor's own
	what  string
	value float64
}

// floorReport relates the floor row to the ceiling and to each e2e row of
// the same run. verdicts name the issue 21 targets the floor itself misses
// in this run: trimming aquiferd's own work cannot meet those here.
type floorReport struct {
	lines    []floorLine
	verdicts []string
}

// floorPair is a floor row's kind and the kind of aquiferd's rows compared
// with it: what a job is called, the rate compared, and the targets a floor
// of that kind is checked against (0: none).
type floorPair struct {
	floor, rows string
	job, rate   string
	rateOf      func(*result) float64
	rateTarget  float64
	cpuTarget   float64
}

var floorPairs = []floorPair{
	{floor: "floor", rows: "e2e", job: "e2e job", rate: "e2e", rateOf: func(r *result) float64 { return r.e2e },
		rateTarget: targetE2ERatio, cpuTarget: targetCPURatio},
	{floor: "floor-ingest", rows: "ingest", job: "ingested job", rate: "ingest", rateOf: func(r *result) float64 { return r.ingest },
		rateTarget: targetIngestRatio},
}

// compareFloor builds the report; it is empty without a floor row with its
// costs measured. The e2e floor is compared with the ceiling and each e2e
// row, the ingest floor with the ceiling and each ingest row.
func compareFloor(rs []result) floorReport {
	var ceiling *result
	for i := range rs {
		if rs[i].kind == "ceiling" && rs[i].accepted > 0 {
			ceiling = &rs[i]
		}
	}
	var fr floorReport
	add := func(row, what string, v float64) { fr.lines = append(fr.lines, floorLine{row, what, v}) }
	for _, p := range floorPairs {
		var f *result
		for i := range rs {
			if rs[i].kind == p.floor && rs[i].accepted > 0 && rs[i].cost.cpu > 0 {
				f = &rs[i]
			}
		}
		if f == nil {
			continue
		}
		if ceiling != nil && ceiling.cost.cpu > 0 {
			v := float64(f.cost.cpu) / float64(ceiling.cost.cpu)
			add(f.scenario, "CPU per "+p.job+" ÷ ceiling CPU per request", v)
			if p.cpuTarget > 0 && v > p.cpuTarget {
				fr.verdicts = append(fr.verdicts, fmt.Sprintf("the floor's CPU per %s is %.2f× the ceiling's, above the %g× target", p.job, v, p.cpuTarget))
			}
		}
		if ceiling != nil && ceiling.ingest > 0 && p.rateOf(f) > 0 {
			v := p.rateOf(f) / ceiling.ingest
			add(f.scenario, p.rate+" jobs/s ÷ ceiling requests/s", v)
			if v < p.rateTarget {
				fr.verdicts = append(fr.verdicts, fmt.Sprintf("the floor's %s rate is %.2f× the ceiling's, below the %g× target", p.rate, v, p.rateTarget))
			}
		}
		for i := range rs {
			r := &rs[i]
			if r.kind != p.rows {
				continue
			}
			if r.cost.cpu > 0 {
				add(r.scenario, "CPU per "+p.job+" ÷ the floor's", float64(r.cost.cpu)/float64(f.cost.cpu))
			}
			if p.rateOf(r) > 0 && p.rateOf(f) > 0 {
				add(r.scenario, p.rate+" jobs/s ÷ the floor's", p.rateOf(r)/p.rateOf(f))
			}
		}
	}
	return fr
}

func printFloor(w io.Writer, fr floorReport) {
	if len(fr.lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nthe floor (the least work a job needs, same parts, same run):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range fr.lines {
		fmt.Fprintf(tw, "  %s\t%s\t%.2f×\t\n", l.row, l.what, l.value)
	}
	tw.Flush()
	for _, v := range fr.verdicts {
		fmt.Fprintf(w, "  %s: even the floor misses it in this run\n", v)
	}
}
