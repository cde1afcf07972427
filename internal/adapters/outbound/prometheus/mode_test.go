package prommetrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	prommetrics "github.com/aquiferhq/aquifer/internal/adapters/outbound/prometheus"
	"github.com/aquiferhq/aquifer/internal/app"
)

// TestLaneModeGauge: every lane has one series per mode, 1 for the mode
// that holds it.
func TestLaneModeGauge(t *testing.T) {
	t.Parallel()
	m := prommetrics.New(prommetrics.Options{NoRuntimeCollectors: true})
	h := &app.Health{Status: "ok", Lanes: []app.LaneHealth{
		{Lane: "https://api.github.com:443", Mode: "budget", Circuit: app.CircuitHealth{State: "closed"}},
		{Lane: "https://quiet.example:443", Mode: "static", Circuit: app.CircuitHealth{State: "closed"}},
	}}
	if err := m.CollectHealth(func(context.Context) *app.Health { return h }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP aquifer_lane_mode Lanes by what holds their pace: 1 for a lane's mode (static: its configured ceiling; signalled: a load signal; budget: a rate-limit window spread to its reset; adaptive: adaptive concurrency), 0 for the others. For upstream="other", how many lanes are in each mode.
# TYPE aquifer_lane_mode gauge
aquifer_lane_mode{mode="adaptive",upstream="https://api.github.com:443"} 0
aquifer_lane_mode{mode="adaptive",upstream="https://quiet.example:443"} 0
aquifer_lane_mode{mode="budget",upstream="https://api.github.com:443"} 1
aquifer_lane_mode{mode="budget",upstream="https://quiet.example:443"} 0
aquifer_lane_mode{mode="signalled",upstream="https://api.github.com:443"} 0
aquifer_lane_mode{mode="signalled",upstream="https://quiet.example:443"} 0
aquifer_lane_mode{mode="static",upstream="https://api.github.com:443"} 0
aquifer_lane_mode{mode="static",upstream="https://quiet.example:443"} 1
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "aquifer_lane_mode"); err != nil {
		t.Fatal(err)
	}
}
