package config_test

import (
	"strings"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestLoadBudgetPacing reads budget_pacing per upstream and in defaults:
// on unless set to false, inherited from defaults like rps.
func TestLoadBudgetPacing(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, `
defaults:
  rps: 5
  max_concurrent: 2
  budget_pacing: false
upstreams:
  api.github.com:
    rps: 10
    budget_pacing: true
  other.example:
    rps: 3
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (domain.Rate{RPS: 5, MaxConcurrent: 2, NoBudget: true}); cfg.Rates.Defaults != want {
		t.Errorf("Defaults = %+v, want %+v", cfg.Rates.Defaults, want)
	}
	if got := cfg.Rates.Hosts["api.github.com"]; got.NoBudget {
		t.Errorf("api.github.com: %+v, want budget pacing on", got)
	}
	if got := cfg.Rates.Hosts["other.example"]; !got.NoBudget {
		t.Errorf("other.example: %+v, want budget pacing off from defaults", got)
	}
	_, err = loadYAML(t, "upstreams:\n  a.example:\n    budget_pacing: maybe\n", nil)
	if err == nil || !strings.Contains(err.Error(), "upstreams.a.example.budget_pacing") {
		t.Fatalf("a bad budget_pacing: %v", err)
	}
}
