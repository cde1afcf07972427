package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	oteltrace "github.com/aquiferhq/aquifer/internal/adapters/outbound/otel"
	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// Version is set at build time with -ldflags "-X main.Version=…".
var Version = "dev"

// Run runs the daemon until ctx is cancelled, then shuts down cleanly: stop
// accepting requests, let running attempts finish (up to the shutdown
// timeout), flush pending writes, close the store.
func Run(ctx context.Context, args []string, lookup config.LookupEnv, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("aquiferd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { usage(fs, stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *showVersion {
		fmt.Fprintf(stdout, "aquiferd %s\n", Version)
		return nil
	}
	switch cmd := fs.Arg(0); cmd {
	case "":
	case "hash-key":
		return hashKey(fs.Args()[1:], stdout)
	case "gen-webhook-secret":
		return genWebhookSecret(fs.Args()[1:], stdout, stderr)
	case "check-config":
		return checkConfig(lookup, stdout)
	case "probe":
		return probe(ctx, fs.Args()[1:], lookup, stdout, stderr)
	case "jobs", "lanes", "operations":
		return runClient(ctx, cmd, fs.Args()[1:], lookup, stdinTerminal(), stdout, stderr)
	case "help":
		usage(fs, stdout)
		return nil
	case "version":
		fmt.Fprintf(stdout, "aquiferd %s\n", Version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (commands: check-config, gen-webhook-secret, hash-key, help, jobs, lanes, operations, probe, version; see aquiferd help)", cmd)
	}

	cfg, err := config.Load(lookup)
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	d, err := build(ctx, cfg, log, stdout)
	if err != nil {
		return err
	}
	return d.serve(ctx)
}

// daemon is aquiferd: an embedding of pkg/aquifer with the front doors
// cfg.Adapters names, the store cfg selects, and process concerns (signals,
// the debug server, logs).
type daemon struct {
	cfg   *config.Config
	log   *zap.Logger
	store aquifer.Store // owned here, closed after the core stopped
	aq    *aquifer.Aquifer
	web   *webDoor // nil when no HTTP-based adapter runs
	exits exits    // a front door that stopped serving on its own
	// tracer exports spans (AQUIFER_OTEL_EXPORTER=otlp); nil when tracing
	// is off, and then nothing of OpenTelemetry runs. Flushed after the
	// core stopped, so the last attempts' spans go out too.
	tracer *oteltrace.Tracer
}

func build(ctx context.Context, cfg *config.Config, log *zap.Logger, stdout io.Writer) (*daemon, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	store, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	opts := options(cfg)
	opts.Store, opts.Logger = store, log
	if cfg.StoreBackend == "postgres" {
		// Every instance on the database is one cluster: each destination
		// is dispatched by one of them at a time.
		if opts.Cluster.Peers, err = aquifer.PostgresPeers(store); err != nil {
			return nil, errors.Join(err, store.Close())
		}
	}
	var prom *aquifer.PrometheusMetrics
	if cfg.Metrics {
		prom = aquifer.NewPrometheusMetrics(aquifer.PrometheusOptions{})
		opts.Metrics = prom
	}
	d := &daemon{cfg: cfg, log: log, store: store, exits: make(exits, 1)}
	if cfg.OTelExporter == "otlp" {
		if d.tracer, err = newTracer(ctx, cfg, log); err != nil {
			return nil, errors.Join(err, store.Close())
		}
		opts.Tracer = d.tracer
	}
	d.web, opts.Adapters = frontDoors(cfg, prom, stdout, d.exits)
	if d.aq, err = aquifer.New(opts); err != nil {
		d.flushTracer()
		return nil, errors.Join(err, store.Close())
	}
	return d, nil
}

// newTracer builds the OpenTelemetry tracer AQUIFER_OTEL_EXPORTER=otlp
// asks for, exporting to the endpoint config resolved.
func newTracer(ctx context.Context, cfg *config.Config, log *zap.Logger) (*oteltrace.Tracer, error) {
	return oteltrace.New(ctx, oteltrace.Options{Endpoint: cfg.OTelEndpoint, ServiceName: cfg.OTelServiceName,
		ServiceVersion: Version, InstanceID: cfg.InstanceID, Logger: log.Named("otel")})
}

// tracerFlushTimeout bounds the last export at shutdown: a collector that
// is down must not hold the process up for the exporter's whole retry.
const tracerFlushTimeout = 5 * time.Second

// debugMutexFraction is the mutex profile's sampling with AQUIFER_DEBUG_ADDR.
const debugMutexFraction = 100

// flushTracer exports the spans still queued and stops the tracer. A
// failure is logged, never the process's: the jobs are safe either way.
func (d *daemon) flushTracer() {
	if d.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracerFlushTimeout)
	defer cancel()
	if err := d.tracer.Shutdown(ctx); err != nil {
		d.log.Warn("could not export the last trace spans", zap.Error(err))
	}
	d.tracer = nil
}

// options is where the configuration meets the facade's typed options: the
// one place each setting is placed. The values are config's, already
// checked there; the facade's own checks run on them again in New (the
// same checks, reporting in its names). What is not a setting — the store,
// the logger, metrics, cluster peers, the front doors — build adds.
func options(cfg *config.Config) aquifer.Options {
	outage := aquifer.OutageOptions{FailureThreshold: cfg.OutageFailureThreshold, ProbeInterval: cfg.OutageProbeInterval,
		MaxProbeInterval: cfg.OutageMaxProbeInterval, MaxHold: cfg.MaxOutageHold}
	if outage.FailureThreshold == 0 {
		outage.FailureThreshold = -1 // AQUIFER_OUTAGE_FAILURE_THRESHOLD=0 turns circuits off
	}
	return aquifer.Options{
		Rates:            cfg.Rates,
		RequestTimeout:   cfg.RequestTimeout,
		MaxBodyBytes:     cfg.MaxBodyBytes,
		MaxResponseBytes: cfg.MaxResponseBytes,
		LaneWindow:       cfg.LaneWindow,
		FailedRetention:  cfg.FailedRetention,
		JobBounds: aquifer.OptionBounds{MaxDelay: cfg.JobMaxDelay, MaxAttempts: cfg.JobMaxAttempts,
			MaxBackoff: cfg.JobMaxBackoff, MaxTimeout: cfg.JobMaxTimeout},
		PriorityAging: cfg.PriorityAging,
		MaxBatchBytes: maxBatchBytes(cfg.MaxBatchBytes),
		Outage:        outage,
		Admission: aquifer.AdmissionLimits{MemoryLimitMB: cfg.MemoryLimitMB, DBMaxBytes: cfg.DBMaxBytes,
			RetryAfter: cfg.RetryAfter},
		Destinations:        cfg.Destinations,
		NetHTTPForPlainHTTP: !cfg.HTTP1Client,
		L8:                  aquifer.L8Options{PrivateKey: cfg.L8PrivateKey, KeyPath: cfg.L8KeyPath, TrustDir: cfg.L8TrustDir, MissTTL: cfg.L8MissTTL},
		WebhookSecrets:      cfg.WebhookSecrets,
		Tenants:             cfg.Tenants,
		Proxy: aquifer.ProxyOptions{DirectTimeout: cfg.ProxyDirectTimeout, BreakerMultiplier: cfg.ProxyBreakerMultiplier,
			DefaultCooldown: cfg.ProxyBreakerCooldown, ORCAThreshold: cfg.ProxyORCAThreshold},
		Drain: aquifer.DrainOptions{Enabled: cfg.DrainEnabled, WebhookURL: cfg.DrainWebhookURL, Idle: cfg.DrainIdle,
			PageSize: cfg.DrainPageSize},
	}
}

// maxBatchBytes is AQUIFER_MAX_BATCH_BYTES as the facade takes it: there 0
// is the default and a negative value no limit; the setting's 0 is none.
func maxBatchBytes(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

func (d *daemon) serve(ctx context.Context) error {
	if err := d.aq.Start(ctx); err != nil { // on failure it has stopped what it started
		d.flushTracer()
		return errors.Join(err, d.closeStore())
	}
	addr, scope := "none", "none"
	if d.web != nil {
		addr, scope = d.web.Addr().String(), listenScope(d.web.Addr())
	}
	fields := append([]zap.Field{zap.String("version", Version), zap.String("addr", addr), zap.String("listen", scope),
		zap.String("store", d.cfg.StoreBackend)}, storeFields(d.cfg)...)
	d.log.Info("aquiferd started, listening on "+addr+" ("+scope+")", append(fields, zap.Strings("adapters", d.cfg.Adapters))...)
	switch {
	case len(d.cfg.Tenants) > 0:
		d.log.Info("API keys required: every job, pool and stream endpoint is scoped to its key's tenant", zap.Int("tenants", len(d.cfg.Tenants)))
	default:
		d.log.Warn("open mode: no tenants are configured, so anyone who can reach Aquifer can submit jobs and read every job; configure tenants (API keys) in the YAML file")
		if d.cfg.PoolToken == "" && d.cfg.HasAdapter("http") {
			d.log.Warn("pool endpoints are open: anyone who can reach Aquifer can register a pool member and receive pool jobs; set AQUIFER_POOL_TOKEN")
		}
	}
	d.warnOpenListener(scope, addr)
	if d.tracer != nil {
		d.log.Info("tracing: exporting spans over OTLP/HTTP", zap.String("endpoint", domain.RedactURL(d.cfg.OTelEndpoint)),
			zap.String("service_name", d.cfg.OTelServiceName))
	}
	if d.cfg.MemoryLimitMB == 0 {
		d.log.Warn("no memory limit set: under sustained overload memory grows until the OS intervenes; set AQUIFER_MEMORY_LIMIT_MB to shed load with 429s instead")
	}
	if d.cfg.DebugAddr != "" {
		// Sample one contended lock in debugMutexFraction for
		// /debug/pprof/mutex: cheap, and only when profiling was asked for.
		runtime.SetMutexProfileFraction(debugMutexFraction)
		dbg := &http.Server{Addr: d.cfg.DebugAddr, Handler: debugMux(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = dbg.ListenAndServe() }()
		defer dbg.Close()
		d.log.Warn("pprof debug server listening", zap.String("addr", d.cfg.DebugAddr))
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-d.exits:
		if errors.Is(err, errStdinClosed) {
			d.log.Info(err.Error())
			err = nil
		}
	}
	d.log.Info("shutting down", zap.Duration("timeout", d.cfg.ShutdownTimeout))
	return errors.Join(err, d.shutdown())
}

// shutdown stops intake first (the front doors), then dispatch (the core),
// then the store, so every accepted job is either finished or durably
// queued for the next start.
func (d *daemon) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	err := d.aq.Stop(ctx)
	d.flushTracer()
	err = errors.Join(err, d.closeStore())
	d.log.Info("stopped")
	return err
}

func (d *daemon) closeStore() error {
	d.log.Info("store writer", storeStats(d.store)...)
	if err := d.store.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// hashKey prints the key_sha256 of an API key for the tenants: list; with
// no key given it makes a new random one and prints both.
func hashKey(args []string, stdout io.Writer) error {
	switch len(args) {
	case 0:
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		key := "aq_" + base64.RawURLEncoding.EncodeToString(b)
		fmt.Fprintf(stdout, "key:        %s\nkey_sha256: %s\n", key, config.HashKey(key))
		fmt.Fprintln(stdout, "Give the key to the tenant; put only key_sha256 in the tenants: list.")
	case 1:
		fmt.Fprintln(stdout, config.HashKey(args[0]))
	default:
		return errors.New("usage: aquiferd hash-key [KEY]")
	}
	return nil
}

// genWebhookSecret prints a new random Standard Webhooks shared secret
// (whsec_ + base64 of 32 bytes) alone on stdout, so it can be captured
// ($(aquiferd gen-webhook-secret)); the advice goes to stderr.
func genWebhookSecret(args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		return errors.New("usage: aquiferd gen-webhook-secret")
	}
	s, err := aquifer.NewWebhookSecret()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	fmt.Fprintln(stderr, "Set it as AQUIFER_WEBHOOK_SECRET (or a tenant's webhook_secret) and give the same value to the receiver;")
	fmt.Fprintln(stderr, "to rotate, list the new one beside the old (docs/L8.md).")
	return nil
}

// checkConfig loads and validates the configuration (environment and
// CONFIG_PATH) without starting anything, and says what it would run.
func checkConfig(lookup config.LookupEnv, stdout io.Writer) error {
	cfg, err := config.Load(lookup)
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	if err := cfg.CheckL8KeyFile(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	src := "environment only"
	if cfg.ConfigPath != "" {
		src = cfg.ConfigPath
	}
	fmt.Fprintf(stdout, "configuration OK (%s)\n", src)
	fmt.Fprintf(stdout, "  store:     %s", cfg.StoreBackend)
	if cfg.StoreBackend != "postgres" {
		fmt.Fprintf(stdout, " at %s", cfg.DBPath)
	}
	fmt.Fprintf(stdout, "\n  listen:    %s:%d (adapters %s)\n", cfg.Host, cfg.Port, strings.Join(cfg.Adapters, ","))
	fmt.Fprintf(stdout, "  pacing:    default %g rps / %d concurrent, %d destinations configured\n",
		cfg.Rates.Defaults.RPS, cfg.Rates.Defaults.MaxConcurrent, len(cfg.Rates.Hosts))
	if len(cfg.Tenants) > 0 {
		fmt.Fprintf(stdout, "  tenants:   %d (API keys required)\n", len(cfg.Tenants))
	} else {
		fmt.Fprintln(stdout, "  tenants:   none (open mode: anyone who can reach Aquifer can use it)")
	}
	fmt.Fprintf(stdout, "  webhooks:  %s\n", signingSummary(cfg))
	if cfg.OTelExporter == "otlp" {
		fmt.Fprintf(stdout, "  tracing:   OTLP/HTTP to %s as %s\n", domain.RedactURL(cfg.OTelEndpoint), cfg.OTelServiceName)
	} else {
		fmt.Fprintln(stdout, "  tracing:   off (trace context passed on, no spans)")
	}
	return nil
}

// signingSummary says which signatures webhook deliveries carry, counting
// secrets, never showing them.
func signingSummary(cfg *config.Config) string {
	own := 0
	for _, t := range cfg.Tenants {
		if len(t.WebhookSecrets) > 0 {
			own++
		}
	}
	v1 := "no v1 (set AQUIFER_WEBHOOK_SECRET for the official Standard Webhooks libraries)"
	if len(cfg.WebhookSecrets) > 0 || own > 0 {
		v1 = fmt.Sprintf("v1 with %d shared secret(s)", len(cfg.WebhookSecrets))
		if own > 0 {
			v1 += fmt.Sprintf(", %d tenant(s) with their own", own)
		}
	}
	return "signed with " + v1 + "; v1a and L8 with the L8 key"
}

func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func newLogger(cfg *config.Config, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	if cfg.LogFormat == "console" {
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	core := zapcore.NewCore(enc, zapcore.AddSync(w), level)
	return zap.New(core, zap.ErrorOutput(zapcore.AddSync(w))), nil
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "aquiferd %s — durable, rate-paced HTTP job queue\n\nUsage: aquiferd [flags] [command]\n\n", Version)
	fmt.Fprintln(w, "Commands:")
	fmt.Fprintln(w, "  (none)              run the daemon")
	fmt.Fprintln(w, "  check-config        validate the configuration (environment and CONFIG_PATH) and exit")
	fmt.Fprintln(w, "  gen-webhook-secret  print a new random Standard Webhooks secret (whsec_…) for AQUIFER_WEBHOOK_SECRET")
	fmt.Fprintln(w, "  hash-key [KEY]      print the key_sha256 of an API key for the tenants: list (no KEY: make a new one)")
	fmt.Fprintln(w, "  probe               GET /health of the local instance (AQUIFER_HOST, PORT; or -url URL): exit 0 if it answers 200 with status ok, 1 with the reason otherwise; -timeout 3s")
	fmt.Fprintln(w, "  version             print the version")
	fmt.Fprintln(w, "  help                print this help")
	fmt.Fprintln(w, "\nClient mode (talks to a running instance over its REST API; --url, default $AQUIFER_URL or "+defaultClientURL+",")
	fmt.Fprintln(w, "--api-key, default $AQUIFER_API_KEY, and -o table|json on every command; aquiferd jobs -help for more):")
	fmt.Fprintln(w, "  jobs list           list jobs, newest first: --status S (repeatable), --destination D, --user U, --tenant T, --q TEXT,")
	fmt.Fprintln(w, "                      --since DUR|TIME, --limit N, --all (follow the cursors)")
	fmt.Fprintln(w, "  jobs get ID         show a job with its attempt history")
	fmt.Fprintln(w, "  jobs retry ID       re-queue a finished job; with filters instead of an ID, every finished job they select")
	fmt.Fprintln(w, "                      (a dry run and a confirmation first; --dry-run, --yes, --wait)")
	fmt.Fprintln(w, "  jobs cancel ID      cancel a job not sent yet; with filters, every queued job they select (as for retry)")
	fmt.Fprintln(w, "  lanes list          the destinations: pace and why, backlog, in flight, oldest waiting, pause, circuit")
	fmt.Fprintln(w, "  lanes get DEST      one destination (scheme://host[:port] or pool:ID) with its queues")
	fmt.Fprintln(w, "  lanes pause DEST    stop dispatching to DEST (jobs are still accepted; --reason R); admin keys only")
	fmt.Fprintln(w, "  lanes resume DEST   dispatch to DEST again")
	fmt.Fprintln(w, "  operations list     bulk retries and cancels; operations get ID [--wait] for one's progress")
	fmt.Fprintln(w, "\nFlags:")
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nSettings (environment variable, YAML key in CONFIG_PATH, default):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CONFIG_PATH\t\t\tYAML file with settings and the upstream pacing table")
	for _, s := range config.Settings {
		def := s.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.Env, s.Key, def, s.Doc)
	}
	tw.Flush()
}
