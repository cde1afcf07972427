package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	a2aagent "github.com/aquiferhq/aquifer/internal/adapters/inbound/a2a"
	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	mcpadapter "github.com/aquiferhq/aquifer/internal/adapters/inbound/mcp"
	"github.com/aquiferhq/aquifer/internal/adapters/inbound/proxy"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
	prommetrics "github.com/aquiferhq/aquifer/internal/adapters/outbound/prometheus"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
	"github.com/aquiferhq/aquifer/internal/ports"
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
	case "check-config":
		return checkConfig(lookup, stdout)
	case "version":
		fmt.Fprintf(stdout, "aquiferd %s\n", Version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (commands: check-config, hash-key, version; see aquiferd -help)", cmd)
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

// daemon is everything Run wires together.
type daemon struct {
	cfg   *config.Config
	log   *zap.Logger
	store ports.JobStore
	svc   *app.Service
	api   *httpapi.Handler
	proxy *proxy.Handler // nil unless http runs
	srv   *http.Server   // nil when no HTTP-based adapter runs
	ln    net.Listener
	mcp   *mcpadapter.Server // nil unless mcp-http or mcp-stdio runs
	agent *a2aagent.Agent    // nil unless a2a runs
	// metrics serves GET /metrics (nil when AQUIFER_METRICS=off).
	metrics *prommetrics.Metrics
	// stdio is the MCP stdio transport (nil unless mcp-stdio runs): the
	// process's stdin, and stdout, which carries nothing but protocol.
	stdin  io.ReadCloser
	stdout io.Writer
}

func build(ctx context.Context, cfg *config.Config, log *zap.Logger, stdout io.Writer) (*daemon, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	l8cfg, err := loadL8(cfg, log)
	if err != nil {
		return nil, err
	}
	store, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	policy, err := domain.NewDestinationPolicy(cfg.Destinations)
	if err != nil {
		return nil, err
	}
	var metrics *prommetrics.Metrics
	var appMetrics ports.Metrics // nil: the app counts nothing
	if cfg.Metrics {
		metrics = prommetrics.New(prommetrics.Options{})
		appMetrics = metrics
	}
	svc, err := app.New(app.Config{
		Store:            store,
		Doer:             egress.NewClient(egress.Options{Policy: policy}),
		Destinations:     cfg.Destinations,
		Logger:           log,
		Rates:            app.RateTable{Defaults: cfg.Rates.Defaults, Hosts: cfg.Rates.Upstreams},
		RequestTimeout:   cfg.RequestTimeout,
		MaxBodyBytes:     cfg.MaxBodyBytes,
		MaxResponseBytes: cfg.MaxResponseBytes,
		Admission: app.AdmissionConfig{
			MemoryLimitMB: cfg.MemoryLimitMB,
			DBMaxBytes:    cfg.DBMaxBytes,
			RetryAfter:    cfg.RetryAfter,
		},
		WindowJobs: cfg.LaneWindow,
		L8:         l8cfg,
		Proxy: app.ProxyConfig{DirectTimeout: cfg.ProxyDirectTimeout, BreakerMultiplier: cfg.ProxyBreakerMultiplier,
			DefaultCooldown: cfg.ProxyBreakerCooldown, ORCAThreshold: cfg.ProxyORCAThreshold},
		Drain: app.DrainConfig{Enabled: cfg.DrainEnabled, WebhookURL: cfg.DrainWebhookURL, Idle: cfg.DrainIdle,
			PageSize: cfg.DrainPageSize},
		Metrics: appMetrics,
		Tenants: appTenants(cfg.Tenants),
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	if metrics != nil {
		if err := metrics.CollectHealth(svc.Health); err != nil {
			store.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	d := &daemon{cfg: cfg, log: log, store: store, svc: svc, metrics: metrics}
	if cfg.HasAdapter("mcp-stdio") {
		d.stdin, d.stdout = os.Stdin, stdout
	}
	if err := d.buildAdapters(); err != nil {
		store.Close()
		return nil, err
	}
	return d, nil
}

// buildAdapters wires the inbound adapters cfg.Adapters names. The
// HTTP-based ones (http, a2a, mcp-http) share one listener, which also
// serves /health; mcp-stdio speaks MCP on stdin/stdout.
func (d *daemon) buildAdapters() error {
	cfg, log := d.cfg, d.log
	auth := tenantAuth(cfg.Tenants)
	d.api = httpapi.New(d.svc, httpapi.Options{MaxBodyBytes: cfg.MaxBodyBytes, PoolToken: cfg.PoolToken, Logger: log,
		HealthOnly: !cfg.HasAdapter("http"), Auth: auth})
	if cfg.HasAdapter("mcp-http") || cfg.HasAdapter("mcp-stdio") {
		d.mcp = mcpadapter.New(d.svc, mcpadapter.Options{Version: Version, MaxBodyBytes: cfg.MaxBodyBytes, Logger: log})
	}
	if !cfg.HasAdapter("http") && !cfg.HasAdapter("a2a") && !cfg.HasAdapter("mcp-http") {
		return nil
	}
	// One chi router for every HTTP adapter: exact routing (no redirects for
	// "//jobs" or "/a/../b") and a JSON error for anything unrouted.
	mux := d.api.Router()
	if d.metrics != nil {
		mux.Get("/metrics", d.metrics.Handler().ServeHTTP)
	}
	if cfg.HasAdapter("http") {
		d.proxy = proxy.New(d.svc, proxy.Options{MaxBodyBytes: cfg.MaxBodyBytes, Logger: log})
		mux.Handle("/proxy", auth.Middleware(d.proxy)) // POST only; the handler answers 405 otherwise
	}
	if cfg.HasAdapter("mcp-http") {
		mux.Handle("/mcp", auth.Middleware(d.mcp.HTTPHandler()))
	}
	if cfg.HasAdapter("a2a") {
		agent, err := a2aagent.New(d.svc, a2aagent.Options{
			PublicURL:    cfg.A2ABaseURL(),
			PushDir:      filepath.Join(cfg.DataDir, "a2a-push"),
			Version:      Version,
			MaxBodyBytes: cfg.MaxBodyBytes,
			Logger:       log,
		})
		if err != nil {
			return err
		}
		d.agent = agent
		mux.Handle(a2aagent.CardPath, agent.CardHandler())
		mux.Handle(a2aagent.JSONRPCPath, auth.Middleware(agent.JSONRPCHandler()))
	}
	d.srv = httpapi.NewServer(mux, httpapi.ServerOptions{}, log)
	// Long-lived responses (SSE, MCP streams and long-polls, A2A streams)
	// end at shutdown instead of holding it up.
	d.srv.RegisterOnShutdown(d.api.CloseStreams)
	if d.proxy != nil {
		d.srv.RegisterOnShutdown(d.proxy.CloseStreams)
	}
	if d.mcp != nil {
		d.srv.RegisterOnShutdown(d.mcp.Close)
	}
	if d.agent != nil {
		d.srv.RegisterOnShutdown(d.agent.Close)
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	d.ln = ln
	return nil
}

func (d *daemon) serve(ctx context.Context) error {
	if err := d.svc.Start(ctx); err != nil {
		d.closeListener()
		d.store.Close()
		return err
	}
	if d.agent != nil {
		if err := d.agent.Start(ctx); err != nil {
			d.closeListener()
			return errors.Join(err, d.shutdown())
		}
	}
	addr := "none"
	if d.ln != nil {
		addr = d.ln.Addr().String()
	}
	d.log.Info("aquiferd started", zap.String("version", Version), zap.String("addr", addr),
		zap.String("db_path", d.cfg.DBPath), zap.String("store", d.cfg.StoreBackend), zap.String("instance_id", d.cfg.InstanceID),
		zap.String("sqlite_sync", d.cfg.SQLiteSync), zap.Strings("adapters", d.cfg.Adapters))
	if d.agent != nil {
		d.log.Info("A2A agent card", zap.String("url", d.agent.Card().URL))
	}
	switch {
	case len(d.cfg.Tenants) > 0:
		d.log.Info("API keys required: every job, pool and stream endpoint is scoped to its key's tenant", zap.Int("tenants", len(d.cfg.Tenants)))
	default:
		d.log.Warn("open mode: no tenants are configured, so anyone who can reach Aquifer can submit jobs and read every job; configure tenants (API keys) in the YAML file")
		if d.cfg.PoolToken == "" && d.cfg.HasAdapter("http") {
			d.log.Warn("pool endpoints are open: anyone who can reach Aquifer can register a pool member and receive pool jobs; set AQUIFER_POOL_TOKEN")
		}
	}
	if d.cfg.MemoryLimitMB == 0 {
		d.log.Warn("no memory limit set: under sustained overload memory grows until the OS intervenes; set AQUIFER_MEMORY_LIMIT_MB to shed load with 429s instead")
	}
	serveErr := make(chan error, 1)
	if d.srv != nil {
		go func() { serveErr <- d.srv.Serve(d.ln) }()
	}
	// The MCP stdio session ends when the client closes stdin: then the
	// process, whose life the client owns, shuts down.
	stdioCtx, stopStdio := context.WithCancel(ctx)
	defer stopStdio()
	stdioDone := make(chan error, 1)
	if d.stdin != nil {
		go func() { stdioDone <- d.mcp.RunStdio(stdioCtx, d.stdin, nopWriteCloser{d.stdout}) }()
	}
	if d.cfg.DebugAddr != "" {
		dbg := &http.Server{Addr: d.cfg.DebugAddr, Handler: debugMux(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = dbg.ListenAndServe() }()
		defer dbg.Close()
		d.log.Warn("pprof debug server listening", zap.String("addr", d.cfg.DebugAddr))
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("http server: %w", err)
	case err = <-stdioDone:
		if err != nil {
			err = fmt.Errorf("mcp stdio: %w", err)
		} else {
			d.log.Info("MCP stdio client closed stdin")
		}
	}
	d.log.Info("shutting down", zap.Duration("timeout", d.cfg.ShutdownTimeout))
	return errors.Join(err, d.shutdown())
}

func (d *daemon) closeListener() {
	if d.ln != nil {
		d.ln.Close()
	}
}

// nopWriteCloser keeps the MCP transport from closing the process's stdout.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// shutdown stops intake first, then dispatch, then the store, so every
// accepted job is either finished or durably queued for the next start.
func (d *daemon) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	if d.srv != nil {
		if err := d.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			d.srv.Close()
		}
	}
	if d.mcp != nil {
		d.mcp.Close() // ends stdio long-polls too
	}
	if d.agent != nil {
		d.agent.Close() // waits for its push watchers
	}
	if err := d.svc.Stop(ctx); err != nil {
		d.log.Warn("attempts aborted at shutdown; they will run again after restart", zap.Error(err))
	}
	d.log.Info("store writer", storeStats(d.store)...)
	if err := d.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	d.log.Info("stopped")
	return errors.Join(errs...)
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

// checkConfig loads and validates the configuration (environment and
// CONFIG_PATH) without starting anything, and says what it would run.
func checkConfig(lookup config.LookupEnv, stdout io.Writer) error {
	cfg, err := config.Load(lookup)
	if err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	rates := app.RateTable{Defaults: cfg.Rates.Defaults, Hosts: cfg.Rates.Upstreams}
	if err := rates.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	if cfg.L8PrivateKey == "" {
		if raw, err := os.ReadFile(cfg.L8KeyPath); err == nil && len(raw) != 64 {
			return fmt.Errorf("invalid configuration:\nL8 key file %s holds %d bytes, want 64", cfg.L8KeyPath, len(raw))
		}
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
		cfg.Rates.Defaults.RPS, cfg.Rates.Defaults.MaxConcurrent, len(cfg.Rates.Upstreams))
	if len(cfg.Tenants) > 0 {
		fmt.Fprintf(stdout, "  tenants:   %d (API keys required)\n", len(cfg.Tenants))
	} else {
		fmt.Fprintln(stdout, "  tenants:   none (open mode: anyone who can reach Aquifer can use it)")
	}
	return nil
}

// appTenants converts the configured tenants for the core.
func appTenants(ts []config.Tenant) []app.Tenant {
	out := make([]app.Tenant, 0, len(ts))
	for _, t := range ts {
		out = append(out, app.Tenant{Name: t.Name, MaxQueued: t.MaxQueued, Rates: t.Upstreams, Destinations: t.Destinations})
	}
	return out
}

// tenantAuth is the API-key check shared by every HTTP adapter.
func tenantAuth(ts []config.Tenant) *httpkit.Auth {
	hashes := make(map[string]string, len(ts))
	for _, t := range ts {
		hashes[t.Name] = t.KeySHA256
	}
	return httpkit.NewAuth(hashes)
}

// loadL8 loads (or creates) Aquifer's signing identity and opens the trust
// directory.
func loadL8(cfg *config.Config, log *zap.Logger) (app.L8Config, error) {
	id, source, err := l8.LoadIdentity(cfg.L8PrivateKey, cfg.L8KeyPath)
	if err != nil {
		return app.L8Config{}, err
	}
	trust, err := l8.NewFileTrust(cfg.L8TrustDir)
	if err != nil {
		return app.L8Config{}, err
	}
	fields := []zap.Field{zap.String("source", string(source)), zap.String("public_key", id.PublicKeyBase64()), zap.String("trust_dir", cfg.L8TrustDir)}
	if source != l8.FromEnv {
		fields = append(fields, zap.String("key_path", cfg.L8KeyPath))
	}
	log.Info("L8 identity loaded", fields...)
	return app.L8Config{Identity: id, Trust: trust, MissTTL: cfg.L8MissTTL}, nil
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
	fmt.Fprintln(w, "  (none)         run the daemon")
	fmt.Fprintln(w, "  check-config   validate the configuration (environment and CONFIG_PATH) and exit")
	fmt.Fprintln(w, "  hash-key [KEY] print the key_sha256 of an API key for the tenants: list (no KEY: make a new one)")
	fmt.Fprintln(w, "  version        print the version")
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
