package main

import (
	"strings"
	"testing"
)

func TestCheckRounds(t *testing.T) {
	for _, tc := range []struct {
		rounds    int
		scenarios []string
		want      string // "" for no error, else part of the message
	}{
		{1, []string{"pacing", "scale"}, ""},
		{3, []string{"ceiling", "ingest", "e2e", "floor", "backlog", "listing"}, ""},
		{0, []string{"e2e"}, "-rounds 0: want 1 or more"},
		{2, []string{"ceiling", "pacing"}, `scenario "pacing"`},
	} {
		err := checkRounds(tc.rounds, tc.scenarios)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkRounds(%d, %v) = %v; want nil", tc.rounds, tc.scenarios, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("checkRounds(%d, %v) = %v; want an error with %q", tc.rounds, tc.scenarios, err, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{10.93, 11.72}, 11.325},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v; want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Fatalf("median reordered its argument: %v", tc.in)
			}
		}
	}
}

// TestSummarizeRounds: each figure keeps its rounds' values in the first
// round's order, the verdict is the median's, and a figure a round did not
// measure says in how many rounds it was.
func TestSummarizeRounds(t *testing.T) {
	cpu := func(v float64, known bool) targetCheck {
		return targetCheck{row: "e2e", goal: "daemon CPU per e2e job ÷ ceiling CPU per request", value: v, limit: 6, atMost: true, known: known, unit: "×"}
	}
	rate := func(v float64) targetCheck {
		return targetCheck{row: "e2e", goal: "e2e jobs/s ÷ ceiling requests/s", value: v, limit: 0.2, unit: "×", known: true}
	}
	checks := [][]targetCheck{
		{cpu(10.9, true), rate(0.13)},
		{cpu(5.5, true), rate(0.25)},
		{cpu(0, false), rate(0.21)},
		{cpu(5.9, true), rate(0.11)},
	}
	floors := [][]floorLine{
		{{"e2e", "CPU per e2e job ÷ the floor's", 1.88}},
		{{"e2e", "CPU per e2e job ÷ the floor's", 1.50}},
		{{"e2e", "CPU per e2e job ÷ the floor's", 1.71}},
	}
	targets, floor := summarizeRounds(checks, floors)
	if len(targets) != 2 || len(floor) != 1 {
		t.Fatalf("%d targets and %d floor figures; want 2 and 1", len(targets), len(floor))
	}
	if targets[0].what != cpu(0, true).goal || len(targets[0].values) != 3 || median(targets[0].values) != 5.9 || !targets[0].met() {
		t.Errorf("CPU figure %+v: want 3 values, median 5.9, met", targets[0])
	}
	if m := median(targets[1].values); m < 0.17-1e-9 || m > 0.17+1e-9 || targets[1].met() {
		t.Errorf("rate figure %+v: want median 0.17, not met", targets[1])
	}
	if m := median(floor[0].values); m != 1.71 {
		t.Errorf("floor figure %+v: want median 1.71", floor[0])
	}

	var out strings.Builder
	printRoundSummary(&out, targets, floor, 4)
	for _, s := range []string{
		"issue 21 targets over 4 rounds",
		"5.90×", "(5.50–10.90×), 3 of 4 rounds", "≤ 6×", "met",
		"0.17×", "(0.11–0.25×)", "≥ 0.2×", "not met",
		"the floor over 4 rounds", "1.71×", "(1.50–1.88×), 3 of 4 rounds",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, out.String())
		}
	}
	out.Reset()
	printRoundSummary(&out, targets, floor, 1)
	if out.Len() != 0 {
		t.Errorf("one round printed a summary:\n%s", out.String())
	}
}
