package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"go.uber.org/zap"

	a2aagent "github.com/aquiferhq/aquifer/internal/adapters/inbound/a2a"
	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
	mcpadapter "github.com/aquiferhq/aquifer/internal/adapters/inbound/mcp"
	"github.com/aquiferhq/aquifer/internal/adapters/inbound/proxy"
	"github.com/aquiferhq/aquifer/internal/adapters/inbound/ui"
	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// aquiferd's front doors are aquifer.Adapters: the daemon is an embedding
// of pkg/aquifer like any other. webDoor serves every HTTP-based adapter on
// one listener; stdioDoor speaks MCP on the process's stdin and stdout.

// exits carries the reason a front door stopped serving on its own (its
// listener failed, or the MCP stdio client closed stdin): the daemon then
// shuts down.
type exits chan error

func (e exits) send(err error) {
	select {
	case e <- err:
	default: // one reason is enough
	}
}

// errStdinClosed is the stdio client ending its session.
var errStdinClosed = errors.New("MCP stdio client closed stdin")

// mcpOnce builds the one MCP server the HTTP and stdio transports share.
type mcpOnce struct {
	cfg  *config.Config
	once sync.Once
	srv  *mcpadapter.Server
}

func (m *mcpOnce) get(aq *aquifer.Aquifer) *mcpadapter.Server {
	m.once.Do(func() {
		m.srv = mcpadapter.New(aq.Service(), mcpadapter.Options{Version: Version, MaxBodyBytes: m.cfg.MaxBodyBytes,
			MaxBatchBytes: maxBatchBytes(m.cfg.MaxBatchBytes), Logger: aq.Logger()})
	})
	return m.srv
}

// close ends the MCP server's streams and long-polls, if it was built.
func (m *mcpOnce) close() {
	m.once.Do(func() {}) // nothing can build it any more
	if m.srv != nil {
		m.srv.Close()
	}
}

// webDoor serves the REST API, the edge proxy and the dashboard ("http"),
// A2A ("a2a") and MCP over HTTP ("mcp-http") on one chi router and one
// listener, with /health and /metrics. The router routes exactly (no redirects for "//jobs" or
// "/a/../b") and answers anything unrouted with a JSON error.
type webDoor struct {
	cfg     *config.Config
	metrics *aquifer.PrometheusMetrics // nil: no /metrics
	mcp     *mcpOnce
	exits   exits

	mu      sync.Mutex
	ln      net.Listener
	srv     *http.Server
	agent   *a2aagent.Agent
	done    chan struct{} // closed when Serve returned
	stopped bool
}

var _ aquifer.Adapter = (*webDoor)(nil)

func (w *webDoor) Name() string { return "web" }

// Addr is the listening address once started, nil before.
func (w *webDoor) Addr() net.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ln == nil {
		return nil
	}
	return w.ln.Addr()
}

func (w *webDoor) Start(ctx context.Context, aq *aquifer.Aquifer) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return aquifer.ErrClosed
	}
	cfg, log, svc := w.cfg, aq.Logger(), aq.Service()
	auth := aq.Auth()
	api := httpapi.New(svc, httpapi.Options{MaxBodyBytes: cfg.MaxBodyBytes, MaxBatchBytes: maxBatchBytes(cfg.MaxBatchBytes),
		PoolToken: cfg.PoolToken, Logger: log, HealthOnly: !cfg.HasAdapter("http"), Auth: auth})
	mux := api.Router()
	if w.metrics != nil {
		mux.Get("/metrics", w.metrics.Handler().ServeHTTP)
	}
	srv := httpapi.NewServer(mux, httpapi.ServerOptions{}, log)
	// Long-lived responses (SSE, MCP streams and long-polls, A2A streams)
	// end at shutdown instead of holding it up.
	srv.RegisterOnShutdown(api.CloseStreams)
	if cfg.HasAdapter("http") {
		p := proxy.New(svc, proxy.Options{MaxBodyBytes: cfg.MaxBodyBytes, Logger: log})
		mux.Handle("/proxy", auth.Middleware(p)) // POST only; the handler answers 405 otherwise
		srv.RegisterOnShutdown(p.CloseStreams)
	}
	if cfg.UI && cfg.HasAdapter("http") {
		// The dashboard is a client of the REST API, so it comes with it.
		// Its pages are static and public; the data needs the API's keys.
		dash := ui.Handler(ui.Options{Version: Version})
		mux.Handle("/ui", dash)
		mux.Handle("/ui/*", dash)
		mux.Get("/", ui.RootNotFound)
	}
	if cfg.HasAdapter("mcp-http") {
		mux.Handle("/mcp", auth.Middleware(w.mcp.get(aq).HTTPHandler()))
		srv.RegisterOnShutdown(w.mcp.close)
	}
	if cfg.HasAdapter("a2a") {
		agent, err := a2aagent.New(svc, a2aagent.Options{
			PublicURL:    cfg.A2ABaseURL(),
			PushDir:      filepath.Join(cfg.DataDir, "a2a-push"),
			Version:      Version,
			MaxBodyBytes: cfg.MaxBodyBytes,
			Logger:       log,
		})
		if err != nil {
			return err
		}
		w.agent = agent
		if err := agent.Start(ctx); err != nil {
			return err
		}
		mux.Handle(a2aagent.CardPath, agent.CardHandler())
		mux.Handle(a2aagent.JSONRPCPath, auth.Middleware(agent.JSONRPCHandler()))
		srv.RegisterOnShutdown(agent.Close)
		log.Info("A2A agent card", zap.String("url", agent.Card().URL))
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	w.ln, w.srv, w.done = ln, srv, make(chan struct{})
	if cfg.UI && cfg.HasAdapter("http") {
		log.Info("dashboard", zap.String("url", "http://"+ln.Addr().String()+ui.Prefix))
	}
	go func() {
		defer close(w.done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			w.exits.send(fmt.Errorf("http server: %w", err))
		}
	}()
	return nil
}

// Stop stops accepting connections, ends long-lived responses and waits for
// requests in progress until ctx ends, then closes what is left.
func (w *webDoor) Stop(ctx context.Context) error {
	w.mu.Lock()
	srv, done, agent, again := w.srv, w.done, w.agent, w.stopped
	w.stopped = true
	w.mu.Unlock()
	if again {
		return nil
	}
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			err = fmt.Errorf("http shutdown: %w", err)
			srv.Close()
		}
		<-done
	}
	if agent != nil {
		agent.Close() // idempotent; waits for its push watchers
	}
	w.mcp.close() // also when Start failed before the server could run
	return err
}

// stdioDoor speaks MCP on the process's stdin and stdout, which then carries
// nothing but protocol. The session ends when the client closes stdin: the
// process, whose life the client owns, then shuts down.
type stdioDoor struct {
	mcp   *mcpOnce
	in    io.ReadCloser
	out   io.Writer
	exits exits

	cancel context.CancelFunc // nil until Start
	done   chan struct{}
}

var _ aquifer.Adapter = (*stdioDoor)(nil)

func (s *stdioDoor) Name() string { return "mcp-stdio" }

func (s *stdioDoor) Start(_ context.Context, aq *aquifer.Aquifer) error {
	srv := s.mcp.get(aq)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		err := srv.RunStdio(ctx, s.in, nopWriteCloser{s.out})
		switch {
		case ctx.Err() != nil: // stopped
		case err != nil:
			s.exits.send(fmt.Errorf("mcp stdio: %w", err))
		default:
			s.exits.send(errStdinClosed)
		}
	}()
	return nil
}

// Stop ends the session (and the MCP server's long-polls) and waits for it.
func (s *stdioDoor) Stop(ctx context.Context) error {
	s.mcp.close()
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nopWriteCloser keeps the MCP transport from closing the process's stdout.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// frontDoors returns the adapters cfg.Adapters names, in start order.
func frontDoors(cfg *config.Config, metrics *aquifer.PrometheusMetrics, stdout io.Writer, ex exits) (*webDoor, []aquifer.Adapter) {
	m := &mcpOnce{cfg: cfg}
	var web *webDoor
	var doors []aquifer.Adapter
	if cfg.HasAdapter("http") || cfg.HasAdapter("a2a") || cfg.HasAdapter("mcp-http") {
		web = &webDoor{cfg: cfg, metrics: metrics, mcp: m, exits: ex}
		doors = append(doors, web)
	}
	if cfg.HasAdapter("mcp-stdio") {
		doors = append(doors, &stdioDoor{mcp: m, in: os.Stdin, out: stdout, exits: ex})
	}
	return web, doors
}
