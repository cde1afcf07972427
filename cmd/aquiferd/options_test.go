package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// TestOptionsCarryEverySetting: options places each setting in the facade's
// options as config read it, and leaves unset only what is not a setting
// (build adds the store, logger, metrics, cluster peers and front doors).
func TestOptionsCarryEverySetting(t *testing.T) {
	t.Parallel()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := aquifer.NewWebhookSecret()
	dir := t.TempDir()
	yaml := filepath.Join(dir, "aquifer.yaml")
	if err := os.WriteFile(yaml, []byte(`upstreams:
  api.example.com: {rps: 9, max_concurrent: 3}
destinations:
  deny: [10.0.0.0/8]
tenants:
  - name: alpha
    key_sha256: `+config.HashKey("ka")+`
    max_queued: 5
    webhook_secret: `+secret+`
  - name: ops
    key_sha256: `+config.HashKey("kops")+`
    role: admin
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(k string) (string, bool) {
		v, ok := map[string]string{
			"CONFIG_PATH": yaml, "AQUIFER_DATA_DIR": dir, "L8_PRIVATE_KEY": base64.StdEncoding.EncodeToString(priv),
			"AQUIFER_WEBHOOK_SECRET": secret, "AQUIFER_REQUEST_TIMEOUT": "7s", "AQUIFER_MAX_BODY_BYTES": "1000",
			"AQUIFER_MAX_RESPONSE_BYTES": "2000", "AQUIFER_LANE_WINDOW": "17", "AQUIFER_MEMORY_LIMIT_MB": "300",
			"AQUIFER_DB_MAX_BYTES": "4000", "AQUIFER_RETRY_AFTER_SECONDS": "9", "AQUIFER_OUTAGE_FAILURE_THRESHOLD": "4",
			"AQUIFER_OUTAGE_PROBE_INTERVAL": "2s", "AQUIFER_OUTAGE_MAX_PROBE_INTERVAL": "1m", "AQUIFER_MAX_OUTAGE_HOLD": "1h",
			"AQUIFER_FAILED_RETENTION": "36h",
			"AQUIFER_JOB_MAX_DELAY":    "48h", "AQUIFER_JOB_MAX_ATTEMPTS": "8", "AQUIFER_JOB_MAX_BACKOFF": "1h",
			"AQUIFER_JOB_MAX_TIMEOUT": "2m", "AQUIFER_PRIORITY_AGING": "15s", "AQUIFER_MAX_BATCH_BYTES": "5000",
			"AQUIFER_PROXY_DIRECT_TIMEOUT": "4s", "AQUIFER_PROXY_BREAKER_MULTIPLIER": "2", "AQUIFER_PROXY_BREAKER_COOLDOWN": "6s",
			"AQUIFER_PROXY_ORCA_THRESHOLD": "0.5", "AQUIFER_DRAIN_ENABLED": "true", "AQUIFER_DRAIN_WEBHOOK_URL": "http://127.0.0.1:1/d",
			"AQUIFER_DRAIN_TIMER_SECONDS": "11", "AQUIFER_DRAIN_PAGE_SIZE": "12", "AQUIFER_L8_MISS_TTL": "3m",
			"AQUIFER_HTTP1_CLIENT": "false",
		}[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	o := options(cfg)
	want := aquifer.Options{
		Rates:               cfg.Rates,
		RequestTimeout:      7 * time.Second,
		MaxBodyBytes:        1000,
		MaxResponseBytes:    2000,
		LaneWindow:          17,
		FailedRetention:     36 * time.Hour,
		JobBounds:           aquifer.OptionBounds{MaxDelay: 48 * time.Hour, MaxAttempts: 8, MaxBackoff: time.Hour, MaxTimeout: 2 * time.Minute},
		PriorityAging:       15 * time.Second,
		MaxBatchBytes:       5000,
		Admission:           aquifer.AdmissionLimits{MemoryLimitMB: 300, DBMaxBytes: 4000, RetryAfter: 9 * time.Second},
		Destinations:        cfg.Destinations,
		NetHTTPForPlainHTTP: true,
		L8:                  aquifer.L8Options{PrivateKey: priv, KeyPath: filepath.Join(dir, "l8.key"), TrustDir: filepath.Join(dir, "l8-trust"), MissTTL: 3 * time.Minute},
		WebhookSecrets:      cfg.WebhookSecrets,
		Tenants:             cfg.Tenants,
		Outage:              aquifer.OutageOptions{FailureThreshold: 4, ProbeInterval: 2 * time.Second, MaxProbeInterval: time.Minute, MaxHold: time.Hour},
		Proxy:               aquifer.ProxyOptions{DirectTimeout: 4 * time.Second, BreakerMultiplier: 2, DefaultCooldown: 6 * time.Second, ORCAThreshold: 0.5},
		Drain:               aquifer.DrainOptions{Enabled: true, WebhookURL: "http://127.0.0.1:1/d", Idle: 11 * time.Second, PageSize: 12},
	}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("options:\n got %+v\nwant %+v", o, want)
	}
	if len(o.Tenants) != 2 || o.Tenants[0].MaxQueued != 5 || len(o.Tenants[0].WebhookSecrets) != 1 || o.Tenants[1].Role != aquifer.RoleAdmin ||
		o.Rates.Hosts["api.example.com"] != (aquifer.Rate{RPS: 9, MaxConcurrent: 3}) || len(o.Destinations.Deny) != 1 {
		t.Fatalf("the YAML sections did not arrive: %+v", o)
	}
	// Every field of Options is either placed here or added by build.
	notSettings := map[string]bool{"Store": true, "CloseStore": true, "Logger": true, "Metrics": true, "Retry": true,
		"Doer": true, "Cluster": true, "Adapters": true, "Tracer": true}
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		if f := v.Type().Field(i).Name; !notSettings[f] && v.Field(i).IsZero() {
			t.Errorf("Options.%s is not set from the configuration", f)
		}
	}
}

// TestOptionsMaxBatchBytesZeroIsNoLimit checks AQUIFER_MAX_BATCH_BYTES=0
// (no limit) becomes the facade's "none" (negative), not its default.
func TestOptionsMaxBatchBytesZeroIsNoLimit(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(func(k string) (string, bool) {
		return map[string]string{"AQUIFER_MAX_BATCH_BYTES": "0"}[k], k == "AQUIFER_MAX_BATCH_BYTES"
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := options(cfg); o.MaxBatchBytes >= 0 {
		t.Fatalf("AQUIFER_MAX_BATCH_BYTES=0: Options.MaxBatchBytes = %d, want negative (no limit)", o.MaxBatchBytes)
	}
}

func TestOptionsTurnOutagesOffWithAZeroThreshold(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(func(k string) (string, bool) {
		return map[string]string{"AQUIFER_OUTAGE_FAILURE_THRESHOLD": "0"}[k], k == "AQUIFER_OUTAGE_FAILURE_THRESHOLD"
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := options(cfg).Outage.FailureThreshold; got != -1 {
		t.Fatalf("FailureThreshold %d, want -1 (off)", got)
	}
}

func TestCheckConfigChecksTheL8KeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "l8.key"), make([]byte, 12), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCLI(t, map[string]string{"AQUIFER_DATA_DIR": dir}, "check-config")
	if err == nil || !strings.Contains(err.Error(), "L8 key file "+filepath.Join(dir, "l8.key")+": holds 12 bytes, want 64") {
		t.Fatalf("check-config with a 12-byte key file: %v", err)
	}
}
