package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// roundScenarios are the scenarios -rounds can repeat: the ones whose rows
// go into the main table, the issue 21 targets and the floor comparison.
var roundScenarios = []string{"ceiling", "ingest", "e2e", "floor", "backlog", "listing"}

// checkRounds refuses -rounds below 1, and -rounds above 1 with a scenario
// whose results are not ratios of one run's rows (pacing, scale, ...).
func checkRounds(rounds int, scenarios []string) error {
	if rounds < 1 {
		return fmt.Errorf("-rounds %d: want 1 or more", rounds)
	}
	if rounds == 1 {
		return nil
	}
	for _, s := range scenarios {
		if !slices.Contains(roundScenarios, s) {
			return fmt.Errorf("-rounds %d with scenario %q: -rounds repeats only %s", rounds, s, strings.Join(roundScenarios, ", "))
		}
	}
	return nil
}

// runCore runs one of roundScenarios on each of stores (the ceiling and
// the floor once, whatever the stores) and names each row after its store
// when there is more than one.
func runCore(ctx context.Context, o options, s string, stores []string) ([]result, error) {
	if s == "ceiling" || s == "floor" {
		run := runCeiling
		if s == "floor" {
			run = runFloor
		}
		r, err := run(ctx, o)
		if err != nil {
			return r, fmt.Errorf("%s: %w", s, err)
		}
		return r, nil
	}
	var out []result
	for _, store := range stores {
		o := o
		o.store = strings.TrimSpace(store)
		var (
			r   []result
			err error
		)
		switch s {
		case "ingest":
			r, err = runIngest(ctx, o)
		case "e2e":
			r, err = runE2E(ctx, o)
		case "backlog":
			r, err = runBacklog(ctx, o)
		case "listing":
			r, err = runListing(ctx, o)
		default:
			return out, fmt.Errorf("unknown scenario %q", s)
		}
		if err != nil {
			return out, fmt.Errorf("%s on %s: %w", s, o.store, err)
		}
		if len(stores) > 1 {
			for i := range r {
				r[i].scenario = o.store + ": " + r[i].scenario
			}
		}
		out = append(out, r...)
	}
	return out, nil
}

// runRounds runs o.scenarios o.rounds times in turn, prints each round as a
// single run prints it, and then the median and range of every target ratio
// and floor comparison over the rounds. On this shared machine one run's
// ratios move by a third with the ceiling alone; a median over rounds taken
// in turn moves less.
func runRounds(ctx context.Context, o options) error {
	fmt.Printf("aquifer-bench: %d rounds of %d jobs, %d clients, store=%s sync=%s, scenarios=%s\n",
		o.rounds, o.jobs, o.clients, o.store, o.sync, strings.Join(o.scenarios, ","))
	stores := strings.Split(o.store, ",")
	var checks [][]targetCheck
	var floors [][]floorLine
	summary := func() {
		targets, floor := summarizeRounds(checks, floors)
		printRoundSummary(os.Stdout, targets, floor, len(checks))
	}
	for k := 1; k <= o.rounds; k++ {
		fmt.Printf("\nround %d of %d\n", k, o.rounds)
		var results []result
		for _, s := range o.scenarios {
			r, err := runCore(ctx, o, s, stores)
			results = append(results, r...)
			if err != nil {
				if len(results) > 0 {
					printTable(os.Stdout, results)
				}
				summary()
				return fmt.Errorf("round %d: %w", k, err)
			}
		}
		printTable(os.Stdout, results)
		ts := evaluateTargets(results, o.clients)
		fr := compareFloor(results)
		printTargets(os.Stdout, ts, o.clients)
		printFloor(os.Stdout, fr)
		checks = append(checks, ts)
		floors = append(floors, fr.lines)
	}
	summary()
	return nil
}

// roundFigure is one figure (a target check or a floor comparison of one
// row) over the rounds that measured it.
type roundFigure struct {
	row, what string
	values    []float64
	unit      string  // "×" or "ms"
	limit     float64 // a target's limit; 0 for a floor comparison
	atMost    bool
}

// median returns the middle value of vs (the mean of the middle two for an
// even count); vs must not be empty.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (f roundFigure) met() bool { return meets(median(f.values), f.limit, f.atMost) }

// summarizeRounds gathers each figure's values over the rounds, in the
// order the first round printed them; a target not measured in a round
// (unknown) adds no value for it.
func summarizeRounds(checks [][]targetCheck, floors [][]floorLine) (targets, floor []roundFigure) {
	index := map[string]int{}
	add := func(list *[]roundFigure, key string, f roundFigure, v float64) {
		i, ok := index[key]
		if !ok {
			i = len(*list)
			index[key] = i
			*list = append(*list, f)
		}
		(*list)[i].values = append((*list)[i].values, v)
	}
	for _, round := range checks {
		for _, c := range round {
			if c.known {
				add(&targets, "target|"+c.row+"|"+c.goal, roundFigure{row: c.row, what: c.goal, unit: c.unit, limit: c.limit, atMost: c.atMost}, c.value)
			}
		}
	}
	for _, round := range floors {
		for _, l := range round {
			add(&floor, "floor|"+l.row+"|"+l.what, roundFigure{row: l.row, what: l.what, unit: "×"}, l.value)
		}
	}
	return targets, floor
}

func printRoundSummary(w io.Writer, targets, floor []roundFigure, rounds int) {
	if rounds < 2 || len(targets)+len(floor) == 0 {
		return
	}
	spread := func(f roundFigure) string {
		lo, hi := slices.Min(f.values), slices.Max(f.values)
		s := fmt.Sprintf("(%.2f–%.2f×)", lo, hi)
		if f.unit == "ms" {
			s = fmt.Sprintf("(%.1f–%.1f ms)", lo, hi)
		}
		if len(f.values) < rounds {
			s += fmt.Sprintf(", %d of %d rounds", len(f.values), rounds)
		}
		return s
	}
	if len(targets) > 0 {
		fmt.Fprintf(w, "\nissue 21 targets over %d rounds (the median of the rounds' ratios, and their range):\n", rounds)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range targets {
			verdict := "not met"
			if f.met() {
				verdict = "met"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", f.row, f.what, figureText(median(f.values), f.unit), spread(f),
				limitText(f.limit, f.atMost, f.unit), verdict)
		}
		tw.Flush()
	}
	if len(floor) > 0 {
		fmt.Fprintf(w, "\nthe floor over %d rounds (the median of the rounds' ratios, and their range):\n", rounds)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, f := range floor {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", f.row, f.what, figureText(median(f.values), f.unit), spread(f))
		}
		tw.Flush()
	}
}
