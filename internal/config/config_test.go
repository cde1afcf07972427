package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// envOf returns a LookupEnv backed by m; the real environment is never read.
func envOf(m map[string]string) config.LookupEnv {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// writeYAML writes content to a file in a fresh temp dir and returns its path.
func writeYAML(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "aquifer.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadYAML loads with CONFIG_PATH pointing at content plus the given env.
func loadYAML(t *testing.T, content string, env map[string]string) (*config.Config, error) {
	t.Helper()
	m := map[string]string{"CONFIG_PATH": writeYAML(t, content)}
	for k, v := range env {
		m[k] = v
	}
	return config.Load(envOf(m))
}

func mustLoad(t *testing.T, lookup config.LookupEnv) *config.Config {
	t.Helper()
	cfg, err := config.Load(lookup)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// wantErr asserts that err is non-nil, cfg is nil, and the message contains
// every fragment.
func wantErr(t *testing.T, cfg *config.Config, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Load succeeded (%+v), want an error containing %q", cfg, fragments)
	}
	if cfg != nil {
		t.Errorf("Load returned a config alongside the error")
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not contain %q", err, f)
		}
	}
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"no env":            nil,
		"empty CONFIG_PATH": {"CONFIG_PATH": ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := mustLoad(t, envOf(env))
			want := &config.Config{
				Host:                   "127.0.0.1",
				Port:                   8080,
				DataDir:                "data",
				DBPath:                 filepath.Join("data", "aquifer.db"),
				L8KeyPath:              filepath.Join("data", "l8.key"),
				L8TrustDir:             filepath.Join("data", "l8-trust"),
				L8MissTTL:              10 * time.Minute,
				ProxyDirectTimeout:     3 * time.Second,
				ProxyBreakerMultiplier: 3,
				ProxyBreakerCooldown:   5 * time.Second,
				ProxyORCAThreshold:     0.7,
				DrainIdle:              45 * time.Second,
				Metrics:                true,
				UI:                     true,
				OTelExporter:           "off",
				OTelServiceName:        "aquiferd",
				HTTP1Client:            true,
				DrainPageSize:          1000,
				ConfigPath:             "",
				StoreBackend:           "sqlite",
				SQLiteSync:             "full",
				MaxBodyBytes:           1048576,
				PebbleWALSyncInterval:  0,
				InstanceID:             hostname(t) + ":8080",
				DBMaxBytes:             838860800,
				RetryAfter:             5 * time.Second,
				RequestTimeout:         30 * time.Second,
				MaxResponseBytes:       1048576,
				ShutdownTimeout:        30 * time.Second,
				LaneWindow:             256,
				OutageFailureThreshold: 3,
				OutageProbeInterval:    time.Second,
				OutageMaxProbeInterval: 5 * time.Minute,
				MaxOutageHold:          24 * time.Hour,
				FailedRetention:        2 * time.Hour,
				JobMaxDelay:            720 * time.Hour,
				JobMaxAttempts:         25,
				JobMaxBackoff:          6 * time.Hour,
				JobMaxTimeout:          10 * time.Minute,
				PriorityAging:          time.Minute,
				MaxBatchBytes:          16 << 20,
				LogLevel:               "info",
				LogFormat:              "json",
				Adapters:               []string{"http"},
				DebugAddr:              "",
				Rates:                  domain.RateTable{Defaults: domain.Rate{RPS: 2, MaxConcurrent: 1}},
			}
			if !reflect.DeepEqual(cfg, want) {
				t.Fatalf("defaults:\n got %+v\nwant %+v", cfg, want)
			}
		})
	}
}

func TestLoadEnvValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		check func(c *config.Config) bool
	}{
		{"port", map[string]string{"PORT": "9090"}, func(c *config.Config) bool { return c.Port == 9090 }},
		{"port trimmed", map[string]string{"PORT": " 9091\n"}, func(c *config.Config) bool { return c.Port == 9091 }},
		{"port min", map[string]string{"PORT": "1"}, func(c *config.Config) bool { return c.Port == 1 }},
		{"port max", map[string]string{"PORT": "65535"}, func(c *config.Config) bool { return c.Port == 65535 }},
		{"host", map[string]string{"AQUIFER_HOST": "127.0.0.1"}, func(c *config.Config) bool { return c.Host == "127.0.0.1" }},
		{"host all ipv4", map[string]string{"AQUIFER_HOST": "0.0.0.0"}, func(c *config.Config) bool { return c.Host == "0.0.0.0" }},
		{"host all ipv6", map[string]string{"AQUIFER_HOST": "::"}, func(c *config.Config) bool { return c.Host == "::" }},
		{"host ipv6 brackets dropped", map[string]string{"AQUIFER_HOST": "[::1]"}, func(c *config.Config) bool { return c.Host == "::1" }},
		{"host name", map[string]string{"AQUIFER_HOST": "localhost"}, func(c *config.Config) bool { return c.Host == "localhost" }},
		{"db path", map[string]string{"DB_PATH": "/var/lib/aquifer/q.db"}, func(c *config.Config) bool { return c.DBPath == "/var/lib/aquifer/q.db" }},
		{"backend case-insensitive", map[string]string{"AQUIFER_STORE_BACKEND": "SQLite"}, func(c *config.Config) bool { return c.StoreBackend == "sqlite" }},
		{"sqlite sync normal", map[string]string{"AQUIFER_SQLITE_SYNC": "NORMAL"}, func(c *config.Config) bool { return c.SQLiteSync == "normal" }},
		{"max body 0 disables", map[string]string{"AQUIFER_MAX_BODY_BYTES": "0"}, func(c *config.Config) bool { return c.MaxBodyBytes == 0 }},
		{"max body large", map[string]string{"AQUIFER_MAX_BODY_BYTES": "10737418240"}, func(c *config.Config) bool { return c.MaxBodyBytes == 10737418240 }},
		{"timeout go duration", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "1m30s"}, func(c *config.Config) bool { return c.RequestTimeout == 90*time.Second }},
		{"timeout bare seconds", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "45"}, func(c *config.Config) bool { return c.RequestTimeout == 45*time.Second }},
		{"timeout fractional seconds", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "2.5"}, func(c *config.Config) bool { return c.RequestTimeout == 2500*time.Millisecond }},
		{"timeout ms", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "250ms"}, func(c *config.Config) bool { return c.RequestTimeout == 250*time.Millisecond }},
		{"max response", map[string]string{"AQUIFER_MAX_RESPONSE_BYTES": "1"}, func(c *config.Config) bool { return c.MaxResponseBytes == 1 }},
		{"lane window", map[string]string{"AQUIFER_LANE_WINDOW": "1000000"}, func(c *config.Config) bool { return c.LaneWindow == 1_000_000 }},
		{"shutdown", map[string]string{"AQUIFER_SHUTDOWN_TIMEOUT": "5s"}, func(c *config.Config) bool { return c.ShutdownTimeout == 5*time.Second }},
		{"failed retention", map[string]string{"AQUIFER_FAILED_RETENTION": "168h"}, func(c *config.Config) bool { return c.FailedRetention == 7*24*time.Hour }},
		{"job max delay", map[string]string{"AQUIFER_JOB_MAX_DELAY": "48h"}, func(c *config.Config) bool { return c.JobMaxDelay == 48*time.Hour }},
		{"job max attempts", map[string]string{"AQUIFER_JOB_MAX_ATTEMPTS": "100"}, func(c *config.Config) bool { return c.JobMaxAttempts == 100 }},
		{"job max backoff", map[string]string{"AQUIFER_JOB_MAX_BACKOFF": "600"}, func(c *config.Config) bool { return c.JobMaxBackoff == 10*time.Minute }},
		{"job max timeout", map[string]string{"AQUIFER_JOB_MAX_TIMEOUT": "1h"}, func(c *config.Config) bool { return c.JobMaxTimeout == time.Hour }},
		{"priority aging", map[string]string{"AQUIFER_PRIORITY_AGING": "5s"}, func(c *config.Config) bool { return c.PriorityAging == 5*time.Second }},
		{"max batch bytes", map[string]string{"AQUIFER_MAX_BATCH_BYTES": "1024"}, func(c *config.Config) bool { return c.MaxBatchBytes == 1024 }},
		{"max batch bytes 0 disables", map[string]string{"AQUIFER_MAX_BATCH_BYTES": "0"}, func(c *config.Config) bool { return c.MaxBatchBytes == 0 }},
		{"failed retention seconds", map[string]string{"AQUIFER_FAILED_RETENTION": "600"}, func(c *config.Config) bool { return c.FailedRetention == 10*time.Minute }},
		{"log level upper", map[string]string{"AQUIFER_LOG_LEVEL": "DEBUG"}, func(c *config.Config) bool { return c.LogLevel == "debug" }},
		{"log level warn", map[string]string{"AQUIFER_LOG_LEVEL": "warn"}, func(c *config.Config) bool { return c.LogLevel == "warn" }},
		{"log format", map[string]string{"AQUIFER_LOG_FORMAT": "Console"}, func(c *config.Config) bool { return c.LogFormat == "console" }},
		{"debug addr", map[string]string{"AQUIFER_DEBUG_ADDR": "127.0.0.1:6060"}, func(c *config.Config) bool { return c.DebugAddr == "127.0.0.1:6060" }},
		{"adapter spaced and cased", map[string]string{"AQUIFER_ADAPTER": " HTTP , "}, func(c *config.Config) bool { return reflect.DeepEqual(c.Adapters, []string{"http"}) }},
		{"adapter list deduplicated", map[string]string{"AQUIFER_ADAPTER": "http, a2a,MCP-HTTP,mcp-stdio,http"}, func(c *config.Config) bool {
			return reflect.DeepEqual(c.Adapters, []string{"http", "a2a", "mcp-http", "mcp-stdio"}) && c.HasAdapter("a2a") && !c.HasAdapter("grpc")
		}},
		{"a2a public url", map[string]string{"AQUIFER_A2A_PUBLIC_URL": "https://aq.example.com/base/"}, func(c *config.Config) bool {
			return c.A2APublicURL == "https://aq.example.com/base" && c.A2ABaseURL() == "https://aq.example.com/base"
		}},
		{"a2a public url default", map[string]string{"PORT": "9099"}, func(c *config.Config) bool { return c.A2APublicURL == "" && c.A2ABaseURL() == "http://localhost:9099" }},
		{"ui off", map[string]string{"AQUIFER_UI": "off"}, func(c *config.Config) bool { return !c.UI && c.Metrics }},
		{"ui OFF as false", map[string]string{"AQUIFER_UI": "False"}, func(c *config.Config) bool { return !c.UI }},
		{"metrics off, ui on", map[string]string{"AQUIFER_METRICS": "off", "AQUIFER_UI": "on"}, func(c *config.Config) bool { return c.UI && !c.Metrics }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := mustLoad(t, envOf(tc.env))
			if !tc.check(cfg) {
				t.Fatalf("env %v not applied: %+v", tc.env, cfg)
			}
		})
	}
}

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()
	const yaml = `
port: 9000
host: 10.0.0.1
db_path: /data/from-yaml.db
store:
  sqlite_sync: normal
dispatch:
  request_timeout: 45s
  lane_window: 64
  failed_retention: 12h
log:
  level: warn
  format: console
`
	t.Run("yaml over default", func(t *testing.T) {
		t.Parallel()
		cfg, err := loadYAML(t, yaml, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Port != 9000 || cfg.Host != "10.0.0.1" || cfg.DBPath != "/data/from-yaml.db" ||
			cfg.SQLiteSync != "normal" || cfg.RequestTimeout != 45*time.Second || cfg.LaneWindow != 64 ||
			cfg.FailedRetention != 12*time.Hour || cfg.LogLevel != "warn" || cfg.LogFormat != "console" {
			t.Fatalf("YAML values not applied: %+v", cfg)
		}
		// Untouched settings keep their defaults.
		if cfg.MaxBodyBytes != 1048576 || cfg.ShutdownTimeout != 30*time.Second || cfg.StoreBackend != "sqlite" {
			t.Fatalf("defaults lost: %+v", cfg)
		}
		if !strings.HasSuffix(cfg.ConfigPath, "aquifer.yaml") {
			t.Fatalf("ConfigPath = %q", cfg.ConfigPath)
		}
	})
	t.Run("env over yaml", func(t *testing.T) {
		t.Parallel()
		cfg, err := loadYAML(t, yaml, map[string]string{
			"PORT":                    "9100",
			"AQUIFER_SQLITE_SYNC":     "full",
			"AQUIFER_REQUEST_TIMEOUT": "10s",
			"AQUIFER_LOG_LEVEL":       "error",
			"AQUIFER_MAX_BODY_BYTES":  "2048",
		})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Port != 9100 || cfg.SQLiteSync != "full" || cfg.RequestTimeout != 10*time.Second || cfg.LogLevel != "error" {
			t.Fatalf("env did not override YAML: %+v", cfg)
		}
		if cfg.MaxBodyBytes != 2048 {
			t.Fatalf("env did not override default: MaxBodyBytes = %d", cfg.MaxBodyBytes)
		}
		// YAML values without env overrides still apply.
		if cfg.Host != "10.0.0.1" || cfg.LaneWindow != 64 || cfg.LogFormat != "console" {
			t.Fatalf("YAML values lost: %+v", cfg)
		}
	})
	t.Run("env replaces a bad yaml value", func(t *testing.T) {
		t.Parallel()
		cfg, err := loadYAML(t, "port: not-a-port\n", map[string]string{"PORT": "7000"})
		if err != nil {
			t.Fatalf("Load = %v; the env value should win over the bad YAML value", err)
		}
		if cfg.Port != 7000 {
			t.Fatalf("Port = %d, want 7000", cfg.Port)
		}
	})
	t.Run("yaml keys are case-insensitive", func(t *testing.T) {
		t.Parallel()
		cfg, err := loadYAML(t, "PORT: 9200\nLog:\n  Level: debug\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Port != 9200 || cfg.LogLevel != "debug" {
			t.Fatalf("Port=%d LogLevel=%q", cfg.Port, cfg.LogLevel)
		}
	})
}

func TestLoadEnvErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"port not integer", map[string]string{"PORT": "eighty"}, `PORT: "eighty" is not an integer`},
		{"port float", map[string]string{"PORT": "80.5"}, `PORT: "80.5" is not an integer`},
		{"port empty", map[string]string{"PORT": ""}, `PORT: "" is not an integer`},
		{"port zero", map[string]string{"PORT": "0"}, "PORT: 0 is out of range [1, 65535]"},
		{"port negative", map[string]string{"PORT": "-1"}, "PORT: -1 is out of range [1, 65535]"},
		{"port too large", map[string]string{"PORT": "65536"}, "PORT: 65536 is out of range [1, 65535]"},
		{"host empty", map[string]string{"AQUIFER_HOST": ""}, "AQUIFER_HOST: must not be empty: 127.0.0.1 for this host only, 0.0.0.0 or :: for all interfaces"},
		{"host with port", map[string]string{"AQUIFER_HOST": "0.0.0.0:8080"}, `AQUIFER_HOST: "0.0.0.0:8080" is not an IP address or host name (the port is PORT)`},
		{"host url", map[string]string{"AQUIFER_HOST": "http://localhost"}, `AQUIFER_HOST: "http://localhost" is not an IP address or host name`},
		{"drain without webhook", map[string]string{"AQUIFER_DRAIN_ENABLED": "yes"}, "needs AQUIFER_DRAIN_WEBHOOK_URL"},
		{"drain on postgres", map[string]string{"AQUIFER_DRAIN_ENABLED": "1", "AQUIFER_DRAIN_WEBHOOK_URL": "http://h.test/d",
			"AQUIFER_STORE_BACKEND": "postgres", "AQUIFER_POSTGRES_DSN": "postgres://x"}, "needs a store this process owns alone"},
		{"drain bool", map[string]string{"AQUIFER_DRAIN_ENABLED": "maybe"}, "AQUIFER_DRAIN_ENABLED: \"maybe\" is not a boolean"},
		{"drain webhook", map[string]string{"AQUIFER_DRAIN_WEBHOOK_URL": "ftp://x"}, "AQUIFER_DRAIN_WEBHOOK_URL"},
		{"orca threshold", map[string]string{"AQUIFER_PROXY_ORCA_THRESHOLD": "1.5"}, "AQUIFER_PROXY_ORCA_THRESHOLD"},
		{"breaker multiplier", map[string]string{"AQUIFER_PROXY_BREAKER_MULTIPLIER": "-1"}, "AQUIFER_PROXY_BREAKER_MULTIPLIER"},
		{"data dir empty", map[string]string{"AQUIFER_DATA_DIR": "  "}, "AQUIFER_DATA_DIR: must not be empty"},
		{"l8 key not base64", map[string]string{"L8_PRIVATE_KEY": "not base64!"}, "L8_PRIVATE_KEY: must be the standard base64 of a 64-byte Ed25519 private key"},
		{"l8 key too short", map[string]string{"L8_PRIVATE_KEY": "AAAA"}, "L8_PRIVATE_KEY: must be the standard base64"},
		{"l8 miss ttl", map[string]string{"AQUIFER_L8_MISS_TTL": "soon"}, "AQUIFER_L8_MISS_TTL"},
		{"backend unknown", map[string]string{"AQUIFER_STORE_BACKEND": "mysql"}, `AQUIFER_STORE_BACKEND: "mysql" is not one of sqlite, pebble, postgres`},
		{"postgres without a DSN", map[string]string{"AQUIFER_STORE_BACKEND": "postgres"}, `AQUIFER_STORE_BACKEND=postgres needs AQUIFER_POSTGRES_DSN (or DATABASE_URL)`},
		{"pebble interval negative", map[string]string{"AQUIFER_PEBBLE_WAL_SYNC_INTERVAL_MS": "-1"}, `AQUIFER_PEBBLE_WAL_SYNC_INTERVAL_MS: -1 is out of range`},
		{"postgres schema with a quote", map[string]string{"AQUIFER_POSTGRES_SCHEMA": `x"; drop`}, `AQUIFER_POSTGRES_SCHEMA: "x\"; drop": use lower-case letters, digits and _`},
		{"sqlite sync unknown", map[string]string{"AQUIFER_SQLITE_SYNC": "off"}, `AQUIFER_SQLITE_SYNC: "off" is not one of full, normal`},
		{"ui unknown", map[string]string{"AQUIFER_UI": "maybe"}, `AQUIFER_UI: "maybe" is not on or off`},
		{"metrics unknown", map[string]string{"AQUIFER_METRICS": "sometimes"}, `AQUIFER_METRICS: "sometimes" is not on or off`},
		{"max body negative", map[string]string{"AQUIFER_MAX_BODY_BYTES": "-1"}, "AQUIFER_MAX_BODY_BYTES: -1 is below the minimum 0"},
		{"max body not integer", map[string]string{"AQUIFER_MAX_BODY_BYTES": "1MB"}, `AQUIFER_MAX_BODY_BYTES: "1MB" is not an integer`},
		{"max response zero", map[string]string{"AQUIFER_MAX_RESPONSE_BYTES": "0"}, "AQUIFER_MAX_RESPONSE_BYTES: 0 is below the minimum 1"},
		{"timeout garbage", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "soon"}, `AQUIFER_REQUEST_TIMEOUT: "soon" is not a duration (like 30s or 2m)`},
		{"timeout missing unit suffix typo", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "30 s"}, `AQUIFER_REQUEST_TIMEOUT: "30 s" is not a duration`},
		{"timeout zero", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "0"}, `AQUIFER_REQUEST_TIMEOUT: "0" must be a positive duration`},
		{"timeout zero with unit", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "0s"}, `AQUIFER_REQUEST_TIMEOUT: "0s" must be a positive duration`},
		{"timeout negative", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "-5"}, `AQUIFER_REQUEST_TIMEOUT: "-5" must be a positive duration`},
		{"timeout infinite", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "Inf"}, `AQUIFER_REQUEST_TIMEOUT: "Inf" must be a positive duration`},
		{"timeout NaN", map[string]string{"AQUIFER_REQUEST_TIMEOUT": "NaN"}, `AQUIFER_REQUEST_TIMEOUT: "NaN" must be a positive duration`},
		{"shutdown negative", map[string]string{"AQUIFER_SHUTDOWN_TIMEOUT": "-5s"}, `AQUIFER_SHUTDOWN_TIMEOUT: "-5s" must be a positive duration`},
		{"failed retention zero", map[string]string{"AQUIFER_FAILED_RETENTION": "0"}, `AQUIFER_FAILED_RETENTION: "0" must be a positive duration`},
		{"job max delay too long", map[string]string{"AQUIFER_JOB_MAX_DELAY": "9000h"}, `AQUIFER_JOB_MAX_DELAY: 9000h0m0s is longer than the limit of 8760h0m0s`},
		{"job max delay zero", map[string]string{"AQUIFER_JOB_MAX_DELAY": "0"}, `AQUIFER_JOB_MAX_DELAY: "0" must be a positive duration`},
		{"job max attempts zero", map[string]string{"AQUIFER_JOB_MAX_ATTEMPTS": "0"}, "AQUIFER_JOB_MAX_ATTEMPTS: 0 is out of range [1, 1000]"},
		{"job max attempts not integer", map[string]string{"AQUIFER_JOB_MAX_ATTEMPTS": "many"}, `AQUIFER_JOB_MAX_ATTEMPTS: "many" is not an integer`},
		{"job max backoff too long", map[string]string{"AQUIFER_JOB_MAX_BACKOFF": "25h"}, "AQUIFER_JOB_MAX_BACKOFF: 25h0m0s is longer than the limit of 24h0m0s"},
		{"job max timeout too long", map[string]string{"AQUIFER_JOB_MAX_TIMEOUT": "2h"}, "AQUIFER_JOB_MAX_TIMEOUT: 2h0m0s is longer than the limit of 1h0m0s"},
		{"priority aging garbage", map[string]string{"AQUIFER_PRIORITY_AGING": "a minute"}, `AQUIFER_PRIORITY_AGING: "a minute" is not a duration`},
		{"max batch bytes negative", map[string]string{"AQUIFER_MAX_BATCH_BYTES": "-1"}, "AQUIFER_MAX_BATCH_BYTES: -1 is below the minimum 0"},
		{"failed retention in days", map[string]string{"AQUIFER_FAILED_RETENTION": "7d"}, `AQUIFER_FAILED_RETENTION: "7d" is not a duration`},
		{"lane window zero", map[string]string{"AQUIFER_LANE_WINDOW": "0"}, "AQUIFER_LANE_WINDOW: 0 is out of range [1, 1000000]"},
		{"lane window too large", map[string]string{"AQUIFER_LANE_WINDOW": "1000001"}, "AQUIFER_LANE_WINDOW: 1000001 is out of range [1, 1000000]"},
		{"log level unknown", map[string]string{"AQUIFER_LOG_LEVEL": "verbose"}, `AQUIFER_LOG_LEVEL: "verbose" is not one of debug, info, warn, error`},
		{"log level warning spelled out", map[string]string{"AQUIFER_LOG_LEVEL": "warning"}, `AQUIFER_LOG_LEVEL: "warning" is not one of debug, info, warn, error`},
		{"log format unknown", map[string]string{"AQUIFER_LOG_FORMAT": "xml"}, `AQUIFER_LOG_FORMAT: "xml" is not one of json, console`},
		{"adapter unknown", map[string]string{"AQUIFER_ADAPTER": "grpc"}, `AQUIFER_ADAPTER: unknown adapter "grpc" (expected http, a2a, mcp-http or mcp-stdio)`},
		{"adapter unknown in list", map[string]string{"AQUIFER_ADAPTER": "http,mcp"}, `AQUIFER_ADAPTER: unknown adapter "mcp" (expected http, a2a, mcp-http or mcp-stdio)`},
		{"a2a public url not http", map[string]string{"AQUIFER_A2A_PUBLIC_URL": "ftp://aq.example.com"}, `AQUIFER_A2A_PUBLIC_URL: "ftp://aq.example.com" must be an absolute http or https URL`},
		{"a2a public url relative", map[string]string{"AQUIFER_A2A_PUBLIC_URL": "/a2a"}, `AQUIFER_A2A_PUBLIC_URL: "/a2a" must be an absolute http or https URL`},
		{"adapter empty list", map[string]string{"AQUIFER_ADAPTER": " , ,"}, "AQUIFER_ADAPTER: at least one adapter is required"},
		{"adapter empty", map[string]string{"AQUIFER_ADAPTER": ""}, "AQUIFER_ADAPTER: at least one adapter is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(envOf(tc.env))
			wantErr(t, cfg, err, tc.want)
		})
	}
}

func TestLoadYAMLErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"port not integer", "port: eighty\n", []string{`YAML key port: "eighty" is not an integer`}},
		{"port out of range", "port: 70000\n", []string{"YAML key port: 70000 is out of range [1, 65535]"}},
		{"sqlite sync", "store:\n  sqlite_sync: sometimes\n", []string{`YAML key store.sqlite_sync: "sometimes" is not one of full, normal`}},
		{"backend", "store:\n  backend: mysql\n", []string{`YAML key store.backend: "mysql" is not one of sqlite`}},
		{"duration", "dispatch:\n  request_timeout: forever\n", []string{`YAML key dispatch.request_timeout: "forever" is not a duration`}},
		{"log level", "log:\n  level: loud\n", []string{`YAML key log.level: "loud" is not one of debug, info, warn, error`}},
		{"adapter", "adapter: grpc\n", []string{`YAML key adapter: unknown adapter "grpc"`}},
		{"unknown top-level key", "prot: 9000\n", []string{"YAML key prot: unknown setting"}},
		{"unknown nested key", "store:\n  backnd: sqlite\n", []string{"YAML key store.backnd: unknown setting"}},
		{"unknown section", "metrics:\n  enabled: true\n", []string{"YAML key metrics.enabled: unknown setting"}},
		{"setting given as a map", "log:\n  level:\n    value: info\n", []string{"YAML key log.level.value: unknown setting"}},
		{"malformed yaml", "port: [1, 2\n", []string{"CONFIG_PATH="}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadYAML(t, tc.yaml, nil)
			wantErr(t, cfg, err, tc.want...)
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, `
prot: 9000
log:
  format: yaml
upstreams:
  api.vendor-a.com:
    rps: 0.1
`, map[string]string{
		"PORT":                    "abc",
		"AQUIFER_SQLITE_SYNC":     "off",
		"AQUIFER_REQUEST_TIMEOUT": "later",
		"AQUIFER_ADAPTER":         "grpc",
	})
	wantErr(t, cfg, err,
		"YAML key prot: unknown setting",
		`PORT: "abc" is not an integer`,
		`AQUIFER_SQLITE_SYNC: "off" is not one of full, normal`,
		`AQUIFER_REQUEST_TIMEOUT: "later" is not a duration`,
		`YAML key log.format: "yaml" is not one of json, console`,
		`AQUIFER_ADAPTER: unknown adapter "grpc"`,
		"YAML key upstreams.api.vendor-a.com: rps must be a number >= 0.5, got 0.1",
	)
	if err != nil {
		if n := strings.Count(err.Error(), "\n") + 1; n != 7 {
			t.Errorf("error has %d lines, want 7 (one per problem):\n%v", n, err)
		}
	}
}

func TestLoadUpstreams(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, `
defaults:
  rps: 5
  max_concurrent: 2
upstreams:
  api.vendor-a.com:
    rps: 10
    max_concurrent: 3
  internal-api:8443:
    rps: 40
  API.Vendor-B.com:
    max_concurrent: 4
  slow.example.org:
    rps: 0.5
  "10.0.0.7:9000":
    rps: 2.5
    max_concurrent: 1
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDefaults := domain.Rate{RPS: 5, MaxConcurrent: 2}
	if cfg.Rates.Defaults != wantDefaults {
		t.Errorf("Defaults = %+v, want %+v", cfg.Rates.Defaults, wantDefaults)
	}
	want := map[string]domain.Rate{
		"api.vendor-a.com":  {RPS: 10, MaxConcurrent: 3},
		"internal-api:8443": {RPS: 40, MaxConcurrent: 2},  // max_concurrent from defaults
		"api.vendor-b.com":  {RPS: 5, MaxConcurrent: 4},   // rps from defaults, key lower-cased
		"slow.example.org":  {RPS: 0.5, MaxConcurrent: 2}, // the minimum rps is accepted
		"10.0.0.7:9000":     {RPS: 2.5, MaxConcurrent: 1},
	}
	if !reflect.DeepEqual(cfg.Rates.Hosts, want) {
		t.Fatalf("Upstreams =\n%v\nwant\n%v", cfg.Rates.Hosts, want)
	}
}

func TestLoadUpstreamsInheritBuiltInDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, `
upstreams:
  api.example.com:
    rps: 7
  other.example.com:
    max_concurrent: 9
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rates.Defaults != domain.DefaultRate {
		t.Errorf("Defaults = %+v, want built-in %+v", cfg.Rates.Defaults, domain.DefaultRate)
	}
	want := map[string]domain.Rate{
		"api.example.com":   {RPS: 7, MaxConcurrent: 1},
		"other.example.com": {RPS: 2, MaxConcurrent: 9},
	}
	if !reflect.DeepEqual(cfg.Rates.Hosts, want) {
		t.Fatalf("Upstreams = %v, want %v", cfg.Rates.Hosts, want)
	}
}

func TestLoadDefaultsSectionPartial(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, "defaults:\n  rps: 3\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (domain.Rate{RPS: 3, MaxConcurrent: 1}); cfg.Rates.Defaults != want {
		t.Fatalf("Defaults = %+v, want %+v", cfg.Rates.Defaults, want)
	}
}

// TestLoadUpstreamsAdaptive: adaptive: true turns adaptive concurrency on
// for one upstream or, in defaults, for every upstream that does not say
// otherwise; it is off unless set.
func TestLoadUpstreamsAdaptive(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, `
defaults:
  rps: 5
  max_concurrent: 64
  adaptive: true
upstreams:
  inherits.example.com:
    rps: 10
  opted-out.example.com:
    adaptive: "no"
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (domain.Rate{RPS: 5, MaxConcurrent: 64, Adaptive: true}); cfg.Rates.Defaults != want {
		t.Errorf("Defaults = %+v, want %+v", cfg.Rates.Defaults, want)
	}
	want := map[string]domain.Rate{
		"inherits.example.com":  {RPS: 10, MaxConcurrent: 64, Adaptive: true},
		"opted-out.example.com": {RPS: 5, MaxConcurrent: 64},
	}
	if !reflect.DeepEqual(cfg.Rates.Hosts, want) {
		t.Fatalf("Upstreams = %v, want %v", cfg.Rates.Hosts, want)
	}

	cfg, err = loadYAML(t, "upstreams:\n  api.example.com:\n    max_concurrent: 256\n    adaptive: TRUE\n  other.example.com:\n    rps: 3\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Rates.Hosts["api.example.com"]; !r.Adaptive || r.MaxConcurrent != 256 {
		t.Errorf("api.example.com = %+v, want adaptive with max_concurrent 256", r)
	}
	if r := cfg.Rates.Hosts["other.example.com"]; r.Adaptive {
		t.Errorf("other.example.com = %+v, want adaptive off by default", r)
	}

	_, err = loadYAML(t, "upstreams:\n  api.example.com:\n    adaptive: sometimes\n", nil)
	if want := `YAML key upstreams.api.example.com.adaptive: "sometimes" is not a boolean`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to mention %q", err, want)
	}
}

func TestLoadRateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"upstream rps below minimum", "upstreams:\n  api.vendor-a.com:\n    rps: 0.4\n",
			"YAML key upstreams.api.vendor-a.com: rps must be a number >= 0.5, got 0.4"},
		{"upstream rps zero", "upstreams:\n  internal-api:8443:\n    rps: 0\n",
			"YAML key upstreams.internal-api:8443: rps must be a number >= 0.5, got 0"},
		{"upstream rps not a number", "upstreams:\n  api.vendor-a.com:\n    rps: fast\n",
			`YAML key upstreams.api.vendor-a.com.rps: "fast" is not a number`},
		{"upstream rps NaN", "upstreams:\n  api.vendor-a.com:\n    rps: .nan\n",
			`YAML key upstreams.api.vendor-a.com.rps: "NaN" is not a number`},
		{"upstream max_concurrent zero", "upstreams:\n  api.vendor-a.com:\n    max_concurrent: 0\n",
			"YAML key upstreams.api.vendor-a.com.max_concurrent: 0 is out of range [1, 1000000]"},
		{"upstream max_concurrent not integer", "upstreams:\n  api.vendor-a.com:\n    max_concurrent: 1.5\n",
			`YAML key upstreams.api.vendor-a.com.max_concurrent: "1.5" is not an integer`},
		{"upstream unknown field", "upstreams:\n  api.vendor-a.com:\n    rps: 3\n    burst: 5\n",
			"YAML key upstreams.api.vendor-a.com.burst: unknown key"},
		{"upstream field typo", "upstreams:\n  api.vendor-a.com:\n    max_concurency: 5\n",
			"YAML key upstreams.api.vendor-a.com.max_concurency: unknown key"},
		{"upstream entry not a map", "upstreams:\n  api.vendor-a.com: 5\n",
			"YAML key upstreams.api.vendor-a.com: must be a map with rps and max_concurrent"},
		{"upstream key is a URL", "upstreams:\n  \"https://api.vendor-a.com\":\n    rps: 3\n",
			"YAML key upstreams.https://api.vendor-a.com: must be a host or host:port"},
		{"upstreams not a map", "upstreams:\n  - api.vendor-a.com\n",
			"YAML key upstreams: must be a map of host to {rps, max_concurrent}"},
		{"defaults rps below minimum", "defaults:\n  rps: 0.1\n",
			"YAML key defaults: rps must be a number >= 0.5, got 0.1"},
		{"defaults max_concurrent zero", "defaults:\n  max_concurrent: 0\n",
			"YAML key defaults.max_concurrent: 0 is out of range [1, 1000000]"},
		{"defaults unknown field", "defaults:\n  rate: 3\n",
			"YAML key defaults.rate: unknown key"},
		{"defaults not a map", "defaults: 3\n",
			"YAML key defaults: must be a map with rps and max_concurrent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadYAML(t, tc.yaml, nil)
			wantErr(t, cfg, err, tc.want)
		})
	}
}

func TestLoadMissingConfigFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "does-not-exist.yaml")
	cfg, err := config.Load(envOf(map[string]string{"CONFIG_PATH": path}))
	wantErr(t, cfg, err, "CONFIG_PATH="+path)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v does not wrap os.ErrNotExist", err)
	}
}

func TestLoadRecordsConfigPath(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, "port: 8181\n")
	cfg := mustLoad(t, envOf(map[string]string{"CONFIG_PATH": path}))
	if cfg.ConfigPath != path {
		t.Fatalf("ConfigPath = %q, want %q", cfg.ConfigPath, path)
	}
	if cfg.Port != 8181 {
		t.Fatalf("Port = %d, want 8181", cfg.Port)
	}
}

func TestLoadEmptyConfigFile(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, "", nil)
	if err != nil {
		t.Fatalf("empty file: %v", err)
	}
	if cfg.Port != 8080 || cfg.Rates.Defaults != domain.DefaultRate || len(cfg.Rates.Hosts) != 0 {
		t.Fatalf("empty file did not give defaults: %+v", cfg)
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	envShape := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	keyShape := regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
	envs := map[string]bool{}
	keys := map[string]bool{}
	for _, s := range config.Settings {
		if envs[s.Env] {
			t.Errorf("duplicate Env %q", s.Env)
		}
		envs[s.Env] = true
		if keys[s.Key] {
			t.Errorf("duplicate Key %q", s.Key)
		}
		keys[s.Key] = true
		if strings.TrimSpace(s.Doc) == "" {
			t.Errorf("setting %s has no Doc", s.Key)
		}
		if !envShape.MatchString(s.Env) {
			t.Errorf("setting %s: Env %q is not an upper-case variable name", s.Key, s.Env)
		}
		if !keyShape.MatchString(s.Key) {
			t.Errorf("setting %s: Key is not lower-case dotted", s.Key)
		}
		if s.Key == "defaults" || s.Key == "upstreams" || strings.HasPrefix(s.Key, "defaults.") || strings.HasPrefix(s.Key, "upstreams.") {
			t.Errorf("setting %s collides with the rates sections", s.Key)
		}
		if s.Env == "CONFIG_PATH" {
			t.Errorf("setting %s reuses CONFIG_PATH", s.Key)
		}
	}
	if len(config.Settings) < 14 {
		t.Errorf("only %d settings; did some get lost?", len(config.Settings))
	}
}

// TestSettingsDefaultsRoundTrip feeds every setting its documented default
// through the environment and through YAML; both must load and give the same
// config as loading nothing.
func TestSettingsDefaultsRoundTrip(t *testing.T) {
	t.Parallel()
	base := mustLoad(t, envOf(nil))

	env := map[string]string{}
	for _, s := range config.Settings {
		env[s.Env] = s.Default
	}
	fromEnv := mustLoad(t, envOf(env))
	if !reflect.DeepEqual(fromEnv, base) {
		t.Errorf("defaults via env:\n got %+v\nwant %+v", fromEnv, base)
	}

	// Empty defaults are skipped: an empty YAML value reads as unset.
	doc := renderNested(config.Settings)
	fromYAML, err := loadYAML(t, doc, nil)
	if err != nil {
		t.Fatalf("defaults via YAML: %v\n%s", err, doc)
	}
	fromYAML.ConfigPath = ""
	if !reflect.DeepEqual(fromYAML, base) {
		t.Errorf("defaults via YAML:\n got %+v\nwant %+v", fromYAML, base)
	}
}

func quoteYAML(s string) string { return `"` + s + `"` }

// renderNested writes every non-empty default as nested YAML.
func renderNested(settings []config.Setting) string {
	type node struct {
		order    []string
		children map[string]*node
		value    string
	}
	root := &node{children: map[string]*node{}}
	for _, s := range settings {
		if s.Default == "" {
			continue
		}
		n := root
		for _, p := range strings.Split(s.Key, ".") {
			c, ok := n.children[p]
			if !ok {
				c = &node{children: map[string]*node{}}
				n.children[p] = c
				n.order = append(n.order, p)
			}
			n = c
		}
		n.value = s.Default
	}
	var b strings.Builder
	var walk func(n *node, depth int)
	walk = func(n *node, depth int) {
		for _, k := range n.order {
			c := n.children[k]
			b.WriteString(strings.Repeat("  ", depth) + k + ":")
			if len(c.children) == 0 {
				b.WriteString(" " + quoteYAML(c.value) + "\n")
				continue
			}
			b.WriteString("\n")
			walk(c, depth+1)
		}
	}
	walk(root, 0)
	return b.String()
}

func TestLoadUpstreamHostListedTwice(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, "upstreams:\n  a.com:\n    rps: 3\n  A.com:\n    rps: 4\n", nil)
	wantErr(t, cfg, err, "listed twice")
}

func TestLoadEmptySections(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, "defaults:\nupstreams:\n", nil)
	if err != nil {
		t.Fatalf("empty sections: %v", err)
	}
	if cfg.Rates.Defaults.RPS != 2 || len(cfg.Rates.Hosts) != 0 {
		t.Fatalf("rates = %+v", cfg.Rates)
	}
}

func TestLoadAdapterAsYAMLList(t *testing.T) {
	t.Parallel()
	cfg, err := loadYAML(t, "adapter: [http]\n", nil)
	if err != nil || len(cfg.Adapters) != 1 || cfg.Adapters[0] != "http" {
		t.Fatalf("adapter list: %+v, %v", cfg, err)
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestLoadPostgresSettings(t *testing.T) {
	t.Parallel()
	cfg := mustLoad(t, envOf(map[string]string{"AQUIFER_STORE_BACKEND": "postgres",
		"DATABASE_URL": "postgres://u@db:5432/x", "AQUIFER_INSTANCE_ID": "node-a", "AQUIFER_POSTGRES_SCHEMA": "aq_1"}))
	if cfg.PostgresDSN != "postgres://u@db:5432/x" || cfg.InstanceID != "node-a" || cfg.PostgresSchema != "aq_1" {
		t.Fatalf("postgres settings = %+v", cfg)
	}
	cfg = mustLoad(t, envOf(map[string]string{"AQUIFER_STORE_BACKEND": "postgres",
		"AQUIFER_POSTGRES_DSN": "postgres://a@h/db", "DATABASE_URL": "postgres://b@h/db", "PORT": "9090"}))
	if cfg.PostgresDSN != "postgres://a@h/db" || cfg.InstanceID != hostname(t)+":9090" {
		t.Fatalf("AQUIFER_POSTGRES_DSN must win over DATABASE_URL: %+v", cfg)
	}
}
