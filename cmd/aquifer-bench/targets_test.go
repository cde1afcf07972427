package main

import (
	"strings"
	"testing"
	"time"
)

// TestEvaluateTargets checks each target against rows on both sides of its
// limit, per store, and that a missing figure is "not measured", not met.
func TestEvaluateTargets(t *testing.T) {
	ceiling := result{scenario: "ceiling (trivial Go server)", kind: "ceiling", accepted: 1000, ingest: 20000,
		cost: cost{cpu: 50 * time.Microsecond}}
	rows := []result{
		ceiling,
		{scenario: "sqlite: ingest", kind: "ingest", store: "sqlite", accepted: 1000, ingest: 10000, p99: 25 * time.Millisecond},
		{scenario: "pebble: ingest", kind: "ingest", store: "pebble", accepted: 1000, ingest: 9999, p99: 25100 * time.Microsecond},
		{scenario: "sqlite: e2e", kind: "e2e", store: "sqlite", accepted: 1000, e2e: 4000, cost: cost{cpu: 300 * time.Microsecond}},
		{scenario: "pebble: e2e", kind: "e2e", store: "pebble", accepted: 1000, e2e: 3999, cost: cost{cpu: 301 * time.Microsecond}},
		{scenario: "postgres: e2e", kind: "e2e", store: "postgres", accepted: 1000, e2e: 5000}, // CPU unknown (-addr)
		{scenario: "backlog", kind: "backlog", accepted: 1000, ingest: 100},
	}
	type want struct {
		value float64
		met   bool
		known bool
	}
	wants := map[string]want{
		"sqlite: ingest|ingest jobs/s ÷ ceiling requests/s":              {0.5, true, true},
		"sqlite: ingest|ingest p99 at 64 clients":                        {25, true, true},
		"pebble: ingest|ingest jobs/s ÷ ceiling requests/s":              {0.49995, false, true},
		"pebble: ingest|ingest p99 at 64 clients":                        {25.1, false, true},
		"sqlite: e2e|daemon CPU per e2e job ÷ ceiling CPU per request":   {6, true, true},
		"sqlite: e2e|e2e jobs/s ÷ ceiling requests/s":                    {0.2, true, true},
		"pebble: e2e|daemon CPU per e2e job ÷ ceiling CPU per request":   {6.02, false, true},
		"pebble: e2e|e2e jobs/s ÷ ceiling requests/s":                    {0.19995, false, true},
		"postgres: e2e|daemon CPU per e2e job ÷ ceiling CPU per request": {0, false, false},
		"postgres: e2e|e2e jobs/s ÷ ceiling requests/s":                  {0.25, true, true},
	}
	got := evaluateTargets(rows, 64)
	if len(got) != len(wants) {
		t.Fatalf("%d checks; want %d: %+v", len(got), len(wants), got)
	}
	for _, c := range got {
		w, ok := wants[c.row+"|"+c.goal]
		if !ok {
			t.Errorf("unexpected check %q on %q", c.goal, c.row)
			continue
		}
		if c.known != w.known || c.met() != w.met || (w.known && (c.value < w.value-1e-9 || c.value > w.value+1e-9)) {
			t.Errorf("%s %q: value %v known %v met %v; want %v %v %v", c.row, c.goal, c.value, c.known, c.met(), w.value, w.known, w.met)
		}
	}

	if got := evaluateTargets(rows[1:], 64); got != nil {
		t.Errorf("without a ceiling row: %+v; want no checks", got)
	}
	var out strings.Builder
	printTargets(&out, evaluateTargets(rows, 32), 32)
	for _, s := range []string{"not met", "not measured", "ingest p99 at 32 clients", "stated at 64 clients; this run used 32"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("printed targets lack %q:\n%s", s, out.String())
		}
	}
}
