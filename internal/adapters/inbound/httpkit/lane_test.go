package httpkit_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
)

// TestLaneJSONShowsModeAndQueueBudget: the lane view carries the lane's
// mode and reason, and each queue's rate-limit window.
func TestLaneJSONShowsModeAndQueueBudget(t *testing.T) {
	t.Parallel()
	reset := time.UnixMilli(1_796_175_410_000)
	v := &app.LaneView{Destination: "https://api.github.com:443", Mode: "budget",
		ModeReason: "budget: 37 of 100 left, resets in 6.2s (github), pacing 5.65 rps",
		Queues: []app.QueueDetail{{Queue: "https://api.github.com:443",
			Budget: &app.QueueBudget{Left: 37, Limit: 100, ResetAt: reset, Source: "github", RPS: 5.6451612}}}}
	raw, err := json.Marshal(httpkit.NewLaneJSON(v, "", reset))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Mode       string `json:"mode"`
		ModeReason string `json:"mode_reason"`
		Queues     []struct {
			Budget map[string]any `json:"budget"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode != "budget" || got.ModeReason != v.ModeReason {
		t.Fatalf("mode %q (%q) in %s", got.Mode, got.ModeReason, raw)
	}
	want := map[string]any{"left": 37.0, "limit": 100.0, "reset_at": float64(reset.UnixMilli()), "source": "github", "rps": 5.645}
	if len(got.Queues) != 1 || len(got.Queues[0].Budget) != len(want) {
		t.Fatalf("queues in %s", raw)
	}
	for k, w := range want {
		if got.Queues[0].Budget[k] != w {
			t.Errorf("budget.%s = %v, want %v (%s)", k, got.Queues[0].Budget[k], w, raw)
		}
	}
}
