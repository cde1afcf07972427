// Package config is the only code in Aquifer that reads environment variables
// and configuration files. It turns them into a typed, validated Config whose
// values already have the types the core uses (tenant.Tenant, l8.Secret,
// domain.RateTable, a checked ed25519 key), checked by those types' own
// checks; aquiferd places them in aquifer.Options in one function.
//
// Every setting has an environment variable and a YAML key; the environment
// wins over the file, and the file over the built-in default. The YAML file
// (named by CONFIG_PATH) also holds the per-upstream pacing table:
//
//	defaults:
//	  rps: 2
//	  max_concurrent: 1
//	upstreams:
//	  api.vendor-a.com:      # matches any port of this host
//	    rps: 10
//	    max_concurrent: 3
//	  internal-api:8443:     # matches this host and port only
//	    rps: 40
//
// A bad value — an unknown key, a number that does not parse, a value out of
// range — is an error naming the variable or key; nothing falls back to a
// default silently.
package config

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/aquiferhq/aquifer/internal/app/tenant"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Config is Aquifer's complete runtime configuration.
type Config struct {
	// Host and Port the HTTP listener binds (Host "0.0.0.0" or "::" = all
	// interfaces; the default is loopback only).
	Host string
	Port int
	// DataDir holds Aquifer's own files: the database by default, the L8
	// key and the L8 trust directory.
	DataDir string
	// DBPath is the SQLite file, or the Pebble directory.
	DBPath string
	// ConfigPath is the YAML file the settings were read from ("" if none).
	ConfigPath string
	// StoreBackend selects the JobStore: "sqlite", "pebble" or "postgres".
	StoreBackend string
	// PebbleWALSyncInterval is Pebble's WAL group-commit interval.
	PebbleWALSyncInterval time.Duration
	// PostgresDSN is the Postgres connection string (postgres backend).
	PostgresDSN string
	// PostgresSchema, if set, is the schema Aquifer's tables live in.
	PostgresSchema string
	// InstanceID names this process among several sharing a Postgres store.
	InstanceID string
	// PoolToken, when set, guards the pool endpoints (Bearer token).
	PoolToken string
	// SQLiteSync is the SQLite durability level: "full" or "normal".
	SQLiteSync string
	// MaxBodyBytes limits request bodies (413 above it); 0 disables.
	MaxBodyBytes int64
	// MemoryLimitMB sheds new jobs while the process's memory exceeds it; 0
	// disables.
	MemoryLimitMB int64
	// DBMaxBytes sheds new jobs while the store is larger; 0 disables.
	DBMaxBytes int64
	// RetryAfter is the Retry-After of the first admission rejection in a row.
	RetryAfter time.Duration
	// RequestTimeout bounds one outbound attempt.
	RequestTimeout time.Duration
	// MaxResponseBytes is how much of a response body is kept as the result.
	MaxResponseBytes int64
	// ShutdownTimeout is how long a shutdown waits for running attempts.
	ShutdownTimeout time.Duration
	// LaneWindow is how many ready jobs each lane keeps in memory.
	LaneWindow int
	// Outage circuits: consecutive failures that open one (0: off), the
	// first and longest wait between probes, and the longest a job waits
	// for a destination that is down.
	OutageFailureThreshold int
	OutageProbeInterval    time.Duration
	OutageMaxProbeInterval time.Duration
	MaxOutageHold          time.Duration
	// FailedRetention is how long failed jobs (the dead-letter set) are
	// kept for operators to find and retry.
	FailedRetention time.Duration

	// Job options: how far ahead a job may be scheduled, the most attempts,
	// the longest backoff and the longest timeout a job may ask for; how
	// much earlier a job of a higher priority counts as having arrived; the
	// body limit of POST /jobs/batch.
	JobMaxDelay    time.Duration
	JobMaxAttempts int
	JobMaxBackoff  time.Duration
	JobMaxTimeout  time.Duration
	PriorityAging  time.Duration
	MaxBatchBytes  int64
	// LogLevel is debug, info, warn or error; LogFormat is json or console.
	LogLevel  string
	LogFormat string
	// Adapters are the inbound adapters to run, each once, in the order
	// given: http, a2a, mcp-http (share the HTTP listener) and mcp-stdio.
	Adapters []string
	// Proxy mode (POST /proxy).
	ProxyDirectTimeout     time.Duration
	ProxyBreakerMultiplier float64
	ProxyBreakerCooldown   time.Duration
	ProxyORCAThreshold     float64
	// Metrics turns GET /metrics (Prometheus) on.
	Metrics bool
	// UI turns the web dashboard at /ui/ on (served with the REST API).
	UI bool
	// OpenTelemetry tracing. OTelExporter is "off" (ports.NopTracer: the
	// trace context is passed on, no spans) or "otlp"; OTelEndpoint is the
	// full OTLP/HTTP traces URL, resolved as the OpenTelemetry SDKs do when
	// AQUIFER_OTEL_ENDPOINT is unset (see otlpEndpoint); OTelServiceName is
	// the resource's service.name.
	OTelExporter    string
	OTelEndpoint    string
	OTelServiceName string
	// Drain mode.
	DrainEnabled    bool
	HTTP1Client     bool // http:// through egress's own HTTP/1.1 transport
	DrainIdle       time.Duration
	DrainWebhookURL string
	DrainPageSize   int
	// A2APublicURL is the base URL the A2A agent card advertises ("" until
	// set; see A2ABaseURL for the effective value).
	A2APublicURL string
	// DebugAddr, when set, serves Go's pprof handlers on that address.
	DebugAddr string
	// L8PrivateKey is the Ed25519 private key L8_PRIVATE_KEY gives, decoded
	// and checked (nil = use the key file).
	L8PrivateKey ed25519.PrivateKey
	// L8KeyPath is the key file, read or created; L8TrustDir holds the
	// trusted receivers.
	L8KeyPath  string
	L8TrustDir string
	// L8MissTTL is how long a webhook receiver without L8 is left alone
	// before it is probed again.
	L8MissTTL time.Duration
	// WebhookSecrets are the Standard Webhooks shared secrets ("whsec_…")
	// deliveries are v1-signed with; several while rotating. Each is
	// checked (l8.Secret.Check).
	WebhookSecrets []l8.Secret
	// Rates is the pacing table (YAML defaults: and upstreams:); Hosts keys
	// are lower-case "host" or "host:port".
	Rates domain.RateTable
	// Destinations are the global destination rules (YAML destinations:).
	Destinations domain.DestinationRules
	// Tenants are the API-key tenants (YAML tenants:), checked
	// (tenant.Check); none means open.
	Tenants []tenant.Tenant
}

// Setting describes one configuration value: its YAML key, its environment
// variable, its default and what it is for. Settings is the single list the
// loader, `aquiferd --help` and the docs are built from.
type Setting struct {
	Key     string // YAML key, dotted
	Env     string // environment variable
	Default string
	Doc     string
	apply   func(c *Config, v string) error
}

// Settings lists every scalar setting.
var Settings = []Setting{
	{Key: "port", Env: "PORT", Default: "8080", Doc: "TCP port of the HTTP listener.",
		apply: func(c *Config, v string) (err error) { c.Port, err = parseInt(v, 1, 65535); return }},
	{Key: "host", Env: "AQUIFER_HOST", Default: "127.0.0.1",
		Doc:   "Address the HTTP listener binds: 127.0.0.1 (default) keeps Aquifer on this host; 0.0.0.0 or :: listens on all interfaces (containers, servers).",
		apply: func(c *Config, v string) (err error) { c.Host, err = parseHost(v); return }},
	{Key: "data_dir", Env: "AQUIFER_DATA_DIR", Default: "data",
		Doc: "Directory for Aquifer's own files: the database (unless DB_PATH points elsewhere), the L8 key and the l8-trust directory. Created with mode 0700 if missing.",
		apply: func(c *Config, v string) error {
			if v == "" {
				return errors.New("must not be empty")
			}
			c.DataDir = v
			return nil
		}},
	{Key: "db_path", Env: "DB_PATH", Default: "", Doc: "SQLite database file, or the Pebble directory; empty means aquifer.db in the data directory. Its parent directory is created if missing.",
		apply: func(c *Config, v string) error { c.DBPath = v; return nil }},
	{Key: "store.backend", Env: "AQUIFER_STORE_BACKEND", Default: "sqlite", Doc: "Job store backend: sqlite, pebble or postgres.",
		apply: func(c *Config, v string) (err error) {
			c.StoreBackend, err = oneOf(v, "sqlite", "pebble", "postgres")
			return
		}},
	{Key: "store.pebble_wal_sync_interval_ms", Env: "AQUIFER_PEBBLE_WAL_SYNC_INTERVAL_MS", Default: "0",
		Doc: "Pebble only: the least time between WAL fsyncs in milliseconds. 0 (default): fsync each group commit at once; the store's single writer already groups concurrent writes, and a delay only slows it.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 0, 1000)
			c.PebbleWALSyncInterval = time.Duration(n) * time.Millisecond
			return err
		}},
	{Key: "store.postgres_dsn", Env: "AQUIFER_POSTGRES_DSN", Default: "",
		Doc:   "Postgres only: the connection string (postgres://user:pass@host:5432/db?sslmode=...). DATABASE_URL is read when this is unset.",
		apply: func(c *Config, v string) error { c.PostgresDSN = v; return nil }},
	{Key: "store.postgres_schema", Env: "AQUIFER_POSTGRES_SCHEMA", Default: "",
		Doc: "Postgres only: the schema for Aquifer's tables (created if missing); empty uses the connection's search_path.",
		apply: func(c *Config, v string) error {
			for _, r := range v {
				if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
					return fmt.Errorf("%q: use lower-case letters, digits and _", v)
				}
			}
			c.PostgresSchema = v
			return nil
		}},
	{Key: "instance_id", Env: "AQUIFER_INSTANCE_ID", Default: "",
		Doc:   "This process's name among several sharing a Postgres store; must be unique and stable across restarts. Empty: <hostname>:<port>.",
		apply: func(c *Config, v string) error { c.InstanceID = v; return nil }},
	{Key: "store.sqlite_sync", Env: "AQUIFER_SQLITE_SYNC", Default: "full",
		Doc:   "SQLite durability: full (every accepted job survives power loss) or normal (survives a process crash; the last commits can be lost on power loss; faster).",
		apply: func(c *Config, v string) (err error) { c.SQLiteSync, err = oneOf(v, "full", "normal"); return }},
	{Key: "limits.max_body_bytes", Env: "AQUIFER_MAX_BODY_BYTES", Default: "1048576",
		Doc:   "Largest accepted request body in bytes; larger requests get 413. 0 disables the limit.",
		apply: func(c *Config, v string) (err error) { c.MaxBodyBytes, err = parseInt64(v, 0); return }},
	{Key: "limits.memory_limit_mb", Env: "AQUIFER_MEMORY_LIMIT_MB", Default: "0",
		Doc:   "Shed new jobs with 429 while the process holds more than this many MiB (the memory the Go runtime has from the OS less what it has released back, measured from the first request). 0 disables the check.",
		apply: func(c *Config, v string) (err error) { c.MemoryLimitMB, err = parseInt64(v, 0); return }},
	{Key: "limits.db_max_bytes", Env: "AQUIFER_DB_MAX_BYTES", Default: "838860800",
		Doc:   "Shed new jobs with 429 while the job store uses more than this many bytes. 0 disables the check.",
		apply: func(c *Config, v string) (err error) { c.DBMaxBytes, err = parseInt64(v, 0); return }},
	{Key: "limits.retry_after_seconds", Env: "AQUIFER_RETRY_AFTER_SECONDS", Default: "5",
		Doc: "Retry-After (seconds) of the first admission 429 in a row; it doubles with each further one, up to 60.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1, 3600)
			c.RetryAfter = time.Duration(n) * time.Second
			return err
		}},
	{Key: "dispatch.request_timeout", Env: "AQUIFER_REQUEST_TIMEOUT", Default: "30s",
		Doc:   "Time limit for one outbound attempt, response body included.",
		apply: func(c *Config, v string) (err error) { c.RequestTimeout, err = parseDuration(v); return }},
	{Key: "dispatch.max_response_bytes", Env: "AQUIFER_MAX_RESPONSE_BYTES", Default: "1048576",
		Doc:   "How much of an upstream response body is kept as the job result; the rest is dropped and body_truncated set.",
		apply: func(c *Config, v string) (err error) { c.MaxResponseBytes, err = parseInt64(v, 1); return }},
	{Key: "dispatch.lane_window", Env: "AQUIFER_LANE_WINDOW", Default: "256",
		Doc:   "Ready jobs each lane keeps in memory; the backlog beyond stays in the store.",
		apply: func(c *Config, v string) (err error) { c.LaneWindow, err = parseInt(v, 1, 1_000_000); return }},
	{Key: "outage.failure_threshold", Env: "AQUIFER_OUTAGE_FAILURE_THRESHOLD", Default: "3",
		Doc: "How many different jobs must fail in a row (transport errors or 5xx, no success in between) for a destination to count as down: its lane then holds its jobs instead of spending their retries, and probes it. 0 turns outage detection off.",
		apply: func(c *Config, v string) (err error) {
			c.OutageFailureThreshold, err = parseInt(v, 0, 1_000_000)
			return
		}},
	{Key: "outage.probe_interval", Env: "AQUIFER_OUTAGE_PROBE_INTERVAL", Default: "1s",
		Doc:   "Wait before the first probe of a destination that is down; it doubles after each failed probe.",
		apply: func(c *Config, v string) (err error) { c.OutageProbeInterval, err = parseDuration(v); return }},
	{Key: "outage.max_probe_interval", Env: "AQUIFER_OUTAGE_MAX_PROBE_INTERVAL", Default: "5m",
		Doc:   "Longest wait between two probes of a destination that is down.",
		apply: func(c *Config, v string) (err error) { c.OutageMaxProbeInterval, err = parseDuration(v); return }},
	{Key: "outage.max_outage_hold", Env: "AQUIFER_MAX_OUTAGE_HOLD", Default: "24h",
		Doc: "Longest a job waits for a destination that is down, from its submission (a webhook delivery: from its result); then it fails with reason \"destination unavailable for longer than max_outage_hold\". At most 24h, the queued TTL.",
		apply: func(c *Config, v string) (err error) {
			c.MaxOutageHold, err = parseDuration(v)
			if err == nil && c.MaxOutageHold > domain.QueuedTTL {
				err = fmt.Errorf("%v is longer than the queued TTL (24h), after which waiting jobs expire", c.MaxOutageHold)
			}
			return
		}},
	{Key: "dispatch.failed_retention", Env: "AQUIFER_FAILED_RETENTION", Default: "2h",
		Doc:   "How long a failed job (retries spent, cancelled, or held past max_outage_hold) is kept once nothing is left to do for it: the dead-letter set operators list (GET /jobs?status=failed) and retry. Completed jobs are kept 30m.",
		apply: func(c *Config, v string) (err error) { c.FailedRetention, err = parseDuration(v); return }},
	// Job options (docs/API.md, "Job options").
	{Key: "jobs.max_delay", Env: "AQUIFER_JOB_MAX_DELAY", Default: "720h",
		Doc: "How far ahead a job may be scheduled (not_before, delay_seconds; max_wait_seconds too). A deadline may be up to twice this ahead. At most 8760h (a year).",
		apply: func(c *Config, v string) (err error) {
			c.JobMaxDelay, err = parseDurationMax(v, 365*24*time.Hour)
			return
		}},
	{Key: "jobs.max_attempts", Env: "AQUIFER_JOB_MAX_ATTEMPTS", Default: "25",
		Doc:   "The most attempts a job's own retry policy (retry.max_attempts) may ask for, 1 to 1000.",
		apply: func(c *Config, v string) (err error) { c.JobMaxAttempts, err = parseInt(v, 1, 1000); return }},
	{Key: "jobs.max_backoff", Env: "AQUIFER_JOB_MAX_BACKOFF", Default: "6h",
		Doc: "The longest wait between attempts a job's retry policy (retry.backoff_seconds, retry.max_backoff_seconds) may ask for. At most 24h.",
		apply: func(c *Config, v string) (err error) {
			c.JobMaxBackoff, err = parseDurationMax(v, 24*time.Hour)
			return
		}},
	{Key: "jobs.max_timeout", Env: "AQUIFER_JOB_MAX_TIMEOUT", Default: "10m",
		Doc:   "The longest per-attempt timeout a job (timeout_seconds) may ask for. At most 1h.",
		apply: func(c *Config, v string) (err error) { c.JobMaxTimeout, err = parseDurationMax(v, time.Hour); return }},
	{Key: "dispatch.priority_aging", Env: "AQUIFER_PRIORITY_AGING", Default: "60s",
		Doc:   "Anti-starvation of priorities: a job counts as having arrived this much earlier per priority class above low, so a high job passes normal jobs due less than this before it (low ones: twice this), and no job waits behind higher-priority work longer than that.",
		apply: func(c *Config, v string) (err error) { c.PriorityAging, err = parseDuration(v); return }},
	{Key: "limits.max_batch_bytes", Env: "AQUIFER_MAX_BATCH_BYTES", Default: "16777216",
		Doc:   "Largest accepted body of POST /jobs/batch in bytes (413 above it); each job in it is also limited by AQUIFER_MAX_BODY_BYTES. 0 disables the limit.",
		apply: func(c *Config, v string) (err error) { c.MaxBatchBytes, err = parseInt64(v, 0); return }},
	{Key: "shutdown_timeout", Env: "AQUIFER_SHUTDOWN_TIMEOUT", Default: "30s",
		Doc:   "On SIGINT/SIGTERM, how long to wait for running attempts before aborting them (they run again after restart).",
		apply: func(c *Config, v string) (err error) { c.ShutdownTimeout, err = parseDuration(v); return }},
	{Key: "log.level", Env: "AQUIFER_LOG_LEVEL", Default: "info", Doc: "Log level: debug, info, warn or error.",
		apply: func(c *Config, v string) (err error) {
			c.LogLevel, err = oneOf(v, "debug", "info", "warn", "error")
			return
		}},
	{Key: "log.format", Env: "AQUIFER_LOG_FORMAT", Default: "json", Doc: "Log format: json or console.",
		apply: func(c *Config, v string) (err error) { c.LogFormat, err = oneOf(v, "json", "console"); return }},
	{Key: "pools.token", Env: "AQUIFER_POOL_TOKEN", Default: "",
		Doc:   "If set, pool registration, heartbeat, leave and listing require Authorization: Bearer <token>. Set it whenever untrusted clients can reach Aquifer.",
		apply: func(c *Config, v string) error { c.PoolToken = v; return nil }},
	{Key: "debug_addr", Env: "AQUIFER_DEBUG_ADDR", Default: "",
		Doc:   "If set (e.g. 127.0.0.1:6060), serve Go's pprof profiling handlers there. Never expose it publicly.",
		apply: func(c *Config, v string) error { c.DebugAddr = v; return nil }},
	{Key: "l8.private_key", Env: "L8_PRIVATE_KEY", Default: "",
		Doc: "Aquifer's L8 identity: standard base64 of a 64-byte Ed25519 private key. Empty means the key file. Invalid is an error at start.",
		apply: func(c *Config, v string) (err error) {
			c.L8PrivateKey = nil
			if v != "" {
				c.L8PrivateKey, err = l8.ParsePrivateKey(v)
			}
			return
		}},
	{Key: "l8.key_path", Env: "L8_KEY_PATH", Default: "",
		Doc:   "L8 key file (raw 64 bytes, mode 0600), read at start or generated and written there. Empty means l8.key in the data directory.",
		apply: func(c *Config, v string) error { c.L8KeyPath = v; return nil }},
	{Key: "l8.trust_dir", Env: "AQUIFER_L8_TRUST_DIR", Default: "",
		Doc:   "Directory of trusted webhook receivers, one file per receiver named {scheme}_{host}_{port}.json (the port only when the webhook URL has one), e.g. https_hooks.example.com_8443.json; delete a file to revoke trust. Empty means l8-trust in the data directory.",
		apply: func(c *Config, v string) error { c.L8TrustDir = v; return nil }},
	{Key: "l8.miss_ttl", Env: "AQUIFER_L8_MISS_TTL", Default: "10m",
		Doc:   "How long a webhook receiver that does not speak L8 (or failed the handshake) gets deliveries without the L8 headers (Standard Webhooks signatures only) before it is probed again.",
		apply: func(c *Config, v string) (err error) { c.L8MissTTL, err = parseDuration(v); return }},
	{Key: "webhooks.secret", Env: "AQUIFER_WEBHOOK_SECRET", Default: "",
		Doc:   "Standard Webhooks shared secret: whsec_ + standard base64 of 24 to 64 bytes (aquiferd gen-webhook-secret makes one). Every webhook delivery then carries a v1 (HMAC-SHA256) signature, which the official Standard Webhooks libraries verify. Several secrets, separated by spaces or commas, rotate: one v1 signature per secret. A tenant's webhook_secret replaces it for that tenant's jobs. Invalid is an error at start. Treat it as a secret.",
		apply: func(c *Config, v string) (err error) { c.WebhookSecrets, err = parseWebhookSecrets(v); return }},
	{Key: "adapter", Env: "AQUIFER_ADAPTER", Default: "http",
		Doc: "Inbound adapters to run, comma-separated: http (REST), a2a (A2A agent), mcp-http (MCP streamable HTTP at /mcp), mcp-stdio (MCP on stdin/stdout). http, a2a and mcp-http share one listener.",
		apply: func(c *Config, v string) error {
			c.Adapters = nil
			seen := map[string]bool{}
			for _, a := range strings.Split(v, ",") {
				a = strings.ToLower(strings.TrimSpace(a))
				if a == "" || seen[a] {
					continue
				}
				if !AdapterNames[a] {
					return fmt.Errorf("unknown adapter %q (expected http, a2a, mcp-http or mcp-stdio)", a)
				}
				seen[a] = true
				c.Adapters = append(c.Adapters, a)
			}
			if len(c.Adapters) == 0 {
				return errors.New("at least one adapter is required")
			}
			return nil
		}},
	{Key: "proxy.direct_timeout", Env: "AQUIFER_PROXY_DIRECT_TIMEOUT", Default: "3s",
		Doc:   "POST /proxy: how long the direct attempt may take to get response headers before the request falls back to the queue.",
		apply: func(c *Config, v string) (err error) { c.ProxyDirectTimeout, err = parseDuration(v); return }},
	{Key: "proxy.breaker_multiplier", Env: "AQUIFER_PROXY_BREAKER_MULTIPLIER", Default: "3",
		Doc: "POST /proxy: after an overloaded answer with Retry-After, the destination stays in queue mode for at least Retry-After × this.",
		apply: func(c *Config, v string) error {
			f, err := parseFloat(v)
			if err == nil && (f <= 0 || f > 1000) {
				err = fmt.Errorf("%v must be in (0, 1000]", f)
			}
			c.ProxyBreakerMultiplier = f
			return err
		}},
	{Key: "proxy.breaker_cooldown", Env: "AQUIFER_PROXY_BREAKER_COOLDOWN", Default: "5s",
		Doc:   "POST /proxy: queue-mode time after an overloaded answer without Retry-After, or after X-Aqueduct-Queue-Active: true.",
		apply: func(c *Config, v string) (err error) { c.ProxyBreakerCooldown, err = parseDuration(v); return }},
	{Key: "proxy.orca_threshold", Env: "AQUIFER_PROXY_ORCA_THRESHOLD", Default: "0.7",
		Doc: "POST /proxy: an ORCA utilization at or above this on a direct answer counts as overload.",
		apply: func(c *Config, v string) error {
			f, err := parseFloat(v)
			if err == nil && (f <= 0 || f > 1) {
				err = fmt.Errorf("%v must be in (0, 1]", f)
			}
			c.ProxyORCAThreshold = f
			return err
		}},
	{Key: "metrics", Env: "AQUIFER_METRICS", Default: "on",
		Doc:   "Serve Prometheus metrics at GET /metrics: on or off.",
		apply: func(c *Config, v string) (err error) { c.Metrics, err = parseOnOff(v); return }},
	{Key: "ui", Env: "AQUIFER_UI", Default: "on",
		Doc:   "Serve the web dashboard at /ui/ (with the http adapter): on or off.",
		apply: func(c *Config, v string) (err error) { c.UI, err = parseOnOff(v); return }},
	// OpenTelemetry tracing.
	{Key: "otel.exporter", Env: "AQUIFER_OTEL_EXPORTER", Default: "off",
		Doc:   "Tracing: off (default; the W3C trace context a submitter sends is still passed on to the target and the webhook) or otlp (emit spans for each job's enqueue, wait, attempts and webhook deliveries over OTLP/HTTP to AQUIFER_OTEL_ENDPOINT).",
		apply: func(c *Config, v string) (err error) { c.OTelExporter, err = oneOf(v, "off", "otlp"); return }},
	{Key: "otel.endpoint", Env: "AQUIFER_OTEL_ENDPOINT", Default: "",
		Doc: "Tracing: the collector's OTLP/HTTP URL. A URL without a path gets /v1/traces; one with a path is used as it is. Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT plus /v1/traces, else http://localhost:4318/v1/traces.",
		apply: func(c *Config, v string) (err error) {
			c.OTelEndpoint = ""
			if v != "" {
				c.OTelEndpoint, err = otlpEndpoint(v, false)
			}
			return
		}},
	{Key: "otel.service_name", Env: "AQUIFER_OTEL_SERVICE_NAME", Default: "aquiferd",
		Doc: "Tracing: the service.name spans are reported under (it wins over OTEL_SERVICE_NAME; OTEL_RESOURCE_ATTRIBUTES adds the rest).",
		apply: func(c *Config, v string) error {
			if v == "" {
				return errors.New("must not be empty")
			}
			c.OTelServiceName = v
			return nil
		}},
	{Key: "outbound.http1_client", Env: "AQUIFER_HTTP1_CLIENT", Default: "true",
		Doc:   "Send http:// requests with Aquifer's own HTTP/1.1 client (less CPU per request); false: Go's net/http Transport, as for https://. true/false.",
		apply: func(c *Config, v string) (err error) { c.HTTP1Client, err = parseBool(v); return }},
	{Key: "drain.enabled", Env: "AQUIFER_DRAIN_ENABLED", Default: "false",
		Doc:   "Drain mode: once the whole process is idle, flush the ledger to AQUIFER_DRAIN_WEBHOOK_URL and clear it. true/false (1/0, yes/no).",
		apply: func(c *Config, v string) (err error) { c.DrainEnabled, err = parseBool(v); return }},
	{Key: "drain.timer_seconds", Env: "AQUIFER_DRAIN_TIMER_SECONDS", Default: "45",
		Doc: "Drain mode: seconds the process must be idle before the flush.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1, 86400)
			c.DrainIdle = time.Duration(n) * time.Second
			return err
		}},
	{Key: "drain.webhook_url", Env: "AQUIFER_DRAIN_WEBHOOK_URL", Default: "",
		Doc: "Drain mode: where the ledger goes (required when drain mode is on).",
		apply: func(c *Config, v string) error {
			if v != "" {
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("%q must be an absolute http or https URL", v)
				}
			}
			c.DrainWebhookURL = v
			return nil
		}},
	{Key: "drain.page_size", Env: "AQUIFER_DRAIN_PAGE_SIZE", Default: "1000",
		Doc:   "Drain mode: ledger entries per webhook request.",
		apply: func(c *Config, v string) (err error) { c.DrainPageSize, err = parseInt(v, 1, 100000); return }},
	{Key: "a2a.public_url", Env: "AQUIFER_A2A_PUBLIC_URL", Default: "",
		Doc: "Base URL A2A clients reach Aquifer at, advertised in the agent card (the JSON-RPC endpoint is this plus /a2a). Empty means http://localhost:$PORT.",
		apply: func(c *Config, v string) error {
			v = strings.TrimRight(v, "/")
			if v != "" {
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
					return fmt.Errorf("%q must be an absolute http or https URL without credentials, query or fragment", v)
				}
			}
			c.A2APublicURL = v
			return nil
		}},
	denyPrivateSetting,
}

// AdapterNames are the accepted values of AQUIFER_ADAPTER.
var AdapterNames = map[string]bool{"http": true, "a2a": true, "mcp-http": true, "mcp-stdio": true}

// HasAdapter reports whether adapter name is to run.
func (c *Config) HasAdapter(name string) bool {
	for _, a := range c.Adapters {
		if a == name {
			return true
		}
	}
	return false
}

// A2ABaseURL is the A2A agent's public base URL: A2APublicURL, or
// http://localhost:$PORT when it is empty.
func (c *Config) A2ABaseURL() string {
	if c.A2APublicURL != "" {
		return c.A2APublicURL
	}
	return fmt.Sprintf("http://localhost:%d", c.Port)
}

// CheckL8KeyFile checks the L8 key file when it is where the key comes from
// (no L8_PRIVATE_KEY): a file that exists must hold a valid key (l8's one
// check); a missing one is generated at start. Load does not read it.
func (c *Config) CheckL8KeyFile() error {
	if c.L8PrivateKey != nil {
		return nil
	}
	if _, err := l8.ReadKeyFile(c.L8KeyPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("L8 key file %s: %w", c.L8KeyPath, err)
	}
	return nil
}

// LookupEnv reads one environment variable; os.LookupEnv in production.
type LookupEnv func(string) (string, bool)

// Load builds the configuration from the environment (through lookup) and
// the YAML file named by CONFIG_PATH, if any. The error lists every problem.
func Load(lookup LookupEnv) (*Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	cfg := &Config{Rates: domain.RateTable{Defaults: domain.DefaultRate}}
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	if path, ok := lookup("CONFIG_PATH"); ok && path != "" {
		cfg.ConfigPath = path
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("CONFIG_PATH=%s: %w", path, err)
		}
		if err := checkHostCase(path); err != nil {
			return nil, err
		}
	}
	var errs []error
	errs = append(errs, checkUnknownKeys(v)...)
	for _, s := range Settings {
		val, src := s.Default, "default"
		if fv := v.Get(yamlKey(s.Key)); fv != nil {
			val, src = yamlScalar(fv), "YAML key "+s.Key
		}
		if ev, ok := lookup(s.Env); ok {
			val, src = strings.TrimSpace(ev), s.Env
		}
		if err := s.apply(cfg, val); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
		}
	}
	if err := loadRates(v, &cfg.Rates); err != nil {
		errs = append(errs, err)
	}
	if err := loadDestinations(v, &cfg.Destinations); err != nil {
		errs = append(errs, err)
	}
	if cfg.ConfigPath != "" {
		tenants, err := loadTenants(cfg.ConfigPath)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.Tenants = tenants
	}
	errs = append(errs, cfg.finish(lookup)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// finish derives defaults that depend on other settings and checks
// settings that only make sense together.
func (c *Config) finish(lookup LookupEnv) []error {
	var errs []error
	if c.DrainEnabled && c.DrainWebhookURL == "" {
		errs = append(errs, errors.New("AQUIFER_DRAIN_ENABLED=true needs AQUIFER_DRAIN_WEBHOOK_URL: the ledger must go somewhere before anything is cleared"))
	}
	if c.DrainEnabled && c.StoreBackend == "postgres" {
		errs = append(errs, errors.New("AQUIFER_DRAIN_ENABLED=true needs a store this process owns alone (sqlite or pebble); a shared Postgres store cannot be cleared by one instance"))
	}
	if c.StoreBackend == "postgres" && c.PostgresDSN == "" {
		if url, ok := lookup("DATABASE_URL"); ok && url != "" {
			c.PostgresDSN = url
		} else {
			errs = append(errs, errors.New("AQUIFER_STORE_BACKEND=postgres needs AQUIFER_POSTGRES_DSN (or DATABASE_URL)"))
		}
	}
	if c.OTelExporter == "otlp" && c.OTelEndpoint == "" {
		endpoint, err := defaultOTLPEndpoint(lookup)
		if err != nil {
			errs = append(errs, err)
		}
		c.OTelEndpoint = endpoint
	}
	if c.DBPath == "" {
		c.DBPath = filepath.Join(c.DataDir, "aquifer.db")
	}
	if c.L8KeyPath == "" {
		c.L8KeyPath = filepath.Join(c.DataDir, "l8.key")
	}
	if c.L8TrustDir == "" {
		c.L8TrustDir = filepath.Join(c.DataDir, "l8-trust")
	}
	if c.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "aquiferd"
		}
		c.InstanceID = fmt.Sprintf("%s:%d", host, c.Port)
	}
	return errs
}

// DefaultOTLPEndpoint is where spans go when neither AQUIFER_OTEL_ENDPOINT
// nor the OpenTelemetry SDK variables name a collector: a collector on
// this host, on OTLP/HTTP's standard port.
const DefaultOTLPEndpoint = "http://localhost:4318/v1/traces"

// defaultOTLPEndpoint resolves the traces URL from the variables every
// OpenTelemetry SDK reads: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is,
// else OTEL_EXPORTER_OTLP_ENDPOINT (a base URL) plus v1/traces, else
// DefaultOTLPEndpoint.
func defaultOTLPEndpoint(lookup LookupEnv) (string, error) {
	for _, c := range []struct {
		env  string
		base bool
	}{{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", false}, {"OTEL_EXPORTER_OTLP_ENDPOINT", true}} {
		if v, ok := lookup(c.env); ok && strings.TrimSpace(v) != "" {
			endpoint, err := otlpEndpoint(strings.TrimSpace(v), c.base)
			if err != nil {
				return "", fmt.Errorf("%s (read because AQUIFER_OTEL_EXPORTER=otlp and AQUIFER_OTEL_ENDPOINT is unset): %w", c.env, err)
			}
			return endpoint, nil
		}
	}
	return DefaultOTLPEndpoint, nil
}

// otlpEndpoint checks an OTLP/HTTP URL and returns the traces URL it
// names: base (OTEL_EXPORTER_OTLP_ENDPOINT's rule) always appends
// v1/traces to the path; otherwise only a URL without a path gets
// /v1/traces, and one with a path is used as it is.
func otlpEndpoint(v string, base bool) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" {
		return "", fmt.Errorf("%q must be an absolute http or https URL without query or fragment (like http://collector:4318)", v)
	}
	if base || u.Path == "" || u.Path == "/" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		u.RawPath = ""
	}
	return u.String(), nil
}

// yamlScalar renders a YAML value as the text an environment variable would
// hold; a list becomes comma-separated.
func yamlScalar(v any) string {
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, x := range list {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// yamlKey converts a dotted key to viper's "::" delimiter (dots are legal in
// upstream host names, so viper's default delimiter cannot be used).
func yamlKey(dotted string) string { return strings.ReplaceAll(dotted, ".", "::") }

// checkUnknownKeys rejects YAML keys that no setting reads: a typo must not
// silently fall back to a default.
func checkUnknownKeys(v *viper.Viper) []error {
	known := map[string]bool{}
	for _, s := range Settings {
		known[yamlKey(s.Key)] = true
	}
	var errs []error
	keys := v.AllKeys()
	sort.Strings(keys)
	for _, k := range keys {
		if known[k] || k == "defaults" || k == "upstreams" || k == "tenants" || strings.HasPrefix(k, "defaults::") || strings.HasPrefix(k, "upstreams::") || isDestinationsKey(k) {
			continue
		}
		errs = append(errs, fmt.Errorf("YAML key %s: unknown setting", strings.ReplaceAll(k, "::", ".")))
	}
	return errs
}

// checkHostCase rejects upstream hosts listed twice in different case. Viper
// lower-cases keys as it reads them, so it would merge them silently.
func checkHostCase(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("CONFIG_PATH=%s: %w", path, err)
	}
	var doc struct {
		Upstreams map[string]any `yaml:"upstreams"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil // viper already parsed it; its error reporting stands
	}
	seen := map[string]string{}
	for host := range doc.Upstreams {
		k := strings.ToLower(strings.TrimSpace(host))
		if prev, dup := seen[k]; dup {
			return fmt.Errorf("YAML key upstreams.%s: host is listed twice (as %q and %q; keys are case-insensitive)", k, prev, host)
		}
		seen[k] = host
	}
	return nil
}

// loadRates reads the defaults and upstreams sections. Upstream entries
// inherit missing fields from defaults.
func loadRates(v *viper.Viper, r *domain.RateTable) error {
	var errs []error
	if raw := v.Get("defaults"); raw != nil && raw != "" {
		d, err := parseRate("defaults", raw, domain.DefaultRate)
		if err != nil {
			errs = append(errs, err)
		} else {
			r.Defaults = d
		}
	}
	if raw := v.Get("upstreams"); raw != nil && raw != "" {
		m, ok := raw.(map[string]any)
		if !ok {
			return errors.New("YAML key upstreams: must be a map of host to {rps, max_concurrent}")
		}
		hosts, err := parseUpstreams("upstreams", m, r.Defaults)
		r.Hosts = hosts
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parseUpstreams reads a map of "host" or "host:port" to {rps,
// max_concurrent} found at YAML key where (the global upstreams: or a
// tenant's); missing fields inherit from inherit. Keys are lower-cased;
// entries with an error are left out and reported.
func parseUpstreams(where string, m map[string]any, inherit domain.Rate) (map[string]domain.Rate, error) {
	var errs []error
	out := make(map[string]domain.Rate, len(m))
	for host, entry := range m {
		key := strings.ToLower(strings.TrimSpace(host))
		if key == "" || strings.Contains(key, "/") {
			errs = append(errs, fmt.Errorf("YAML key %s.%s: must be a host or host:port", where, host))
			continue
		}
		rate, err := parseRate(where+"."+host, entry, inherit)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := out[key]; dup {
			errs = append(errs, fmt.Errorf("YAML key %s.%s: host is listed twice (keys are case-insensitive)", where, host))
			continue
		}
		out[key] = rate
	}
	return out, errors.Join(errs...)
}

func parseRate(where string, raw any, inherit domain.Rate) (domain.Rate, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return domain.Rate{}, fmt.Errorf("YAML key %s: must be a map with rps and max_concurrent", where)
	}
	rate := inherit
	for k, val := range m {
		var err error
		switch strings.ToLower(k) {
		case "rps":
			rate.RPS, err = parseFloat(fmt.Sprint(val))
		case "max_concurrent":
			rate.MaxConcurrent, err = parseInt(fmt.Sprint(val), 1, 1_000_000)

		case "budget_pacing":
			var on bool
			on, err = parseBool(fmt.Sprint(val))
			rate.NoBudget = !on
		// Adaptive concurrency (issue 20).
		case "adaptive":
			rate.Adaptive, err = parseBool(fmt.Sprint(val))

		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return domain.Rate{}, fmt.Errorf("YAML key %s.%s: %w", where, k, err)
		}
	}
	if err := rate.Validate("YAML key " + where); err != nil {
		return domain.Rate{}, err
	}
	return rate, nil
}
