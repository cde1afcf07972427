package aquifer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"go.uber.org/zap"

	httpapi "github.com/aquiferhq/aquifer/internal/adapters/inbound/http"
)

// Adapter is a front door: something that takes jobs in from the outside
// world and hands them to Aquifer (Enqueue, Get, Subscribe, Wait, Cancel).
// The REST API is one (NewHTTPAdapter); examples/custom_adapter is a line
// protocol over TCP. List adapters in Options.Adapters.
//
// Aquifer starts its adapters after its core, in order, and stops them in
// reverse order before the core, so an adapter can use Aquifer for its
// whole life.
type Adapter interface {
	// Name identifies the adapter in errors and logs ("http", "mcp", …).
	Name() string
	// Start begins serving and returns without blocking: run the serving
	// loop in a goroutine the adapter owns. Acquire what can fail (bind a
	// listener, open a file) before returning, so the error reaches
	// Aquifer.Start; if Start fails, Aquifer stops everything that started.
	// ctx bounds the start only, not the adapter's life. Start must not
	// call aq.Start or aq.Stop.
	Start(ctx context.Context, aq *Aquifer) error
	// Stop stops taking work in, ends or waits for open requests until ctx
	// ends, and waits for the adapter's goroutines. Aquifer calls it once,
	// whether Start ran, failed, or was never called; it must be safe in
	// all three cases.
	Stop(ctx context.Context) error
}

// HTTPOptions configure the REST API (docs/API.md).
type HTTPOptions struct {
	// PoolToken, when set, is required as "Authorization: Bearer <token>"
	// on the pool endpoints. Unused with Options.Tenants, which require
	// every caller's API key instead.
	PoolToken string
}

// HTTPHandler serves Aquifer's REST API: jobs, their event streams (SSE),
// pools, health, the L8 endpoints, and GET /metrics when Options.Metrics
// are PrometheusMetrics. Unknown routes answer with a JSON 404 or 405.
type HTTPHandler struct {
	h *httpapi.Handler
}

// ServeHTTP implements http.Handler.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// CloseStreams ends every open event stream, so that a graceful shutdown
// of your server does not wait for them; register it with
// http.Server.RegisterOnShutdown. Aquifer.Stop calls it too.
func (h *HTTPHandler) CloseStreams() { h.h.CloseStreams() }

// Handler returns the REST API as an http.Handler, to mount in a server of
// your own (with http.StripPrefix for a path prefix). To serve it on a
// listener of its own, use NewHTTPAdapter instead.
func (aq *Aquifer) Handler(o HTTPOptions) *HTTPHandler {
	h := httpapi.New(aq.svc, httpapi.Options{MaxBodyBytes: aq.opts.MaxBodyBytes, MaxBatchBytes: aq.opts.MaxBatchBytes,
		PoolToken: o.PoolToken, Logger: aq.log, Auth: aq.auth})
	if aq.prom != nil {
		h.Router().Get("/metrics", aq.prom.Handler().ServeHTTP)
	}
	aq.hmu.Lock()
	aq.handlers = append(aq.handlers, h)
	aq.hmu.Unlock()
	return &HTTPHandler{h: h}
}

// HTTPAdapter serves the REST API (Aquifer.Handler) on a listener of its
// own, with timeouts against slow or stuck clients.
type HTTPAdapter struct {
	addr string
	opts HTTPOptions

	mu      sync.Mutex
	ln      net.Listener
	srv     *http.Server
	done    chan struct{} // closed when Serve returned
	stopped bool
}

var _ Adapter = (*HTTPAdapter)(nil)

// NewHTTPAdapter returns an adapter serving the REST API on addr
// ("host:port"; port 0 picks a free one, see Addr).
func NewHTTPAdapter(addr string, o HTTPOptions) *HTTPAdapter {
	return &HTTPAdapter{addr: addr, opts: o}
}

// Name returns "http".
func (a *HTTPAdapter) Name() string { return "http" }

// Addr returns the address the adapter listens on, once started (nil
// before).
func (a *HTTPAdapter) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ln == nil {
		return nil
	}
	return a.ln.Addr()
}

// Start binds the listener and serves in the background.
func (a *HTTPAdapter) Start(ctx context.Context, aq *Aquifer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.srv != nil || a.stopped {
		return errors.New("http adapter: started twice")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.addr, err)
	}
	h := aq.Handler(a.opts)
	log := aq.Logger()
	srv := httpapi.NewServer(h, httpapi.ServerOptions{}, log)
	srv.RegisterOnShutdown(h.CloseStreams)
	a.ln, a.srv, a.done = ln, srv, make(chan struct{})
	go func() {
		defer close(a.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http adapter stopped serving", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
	return nil
}

// Stop stops accepting connections, ends event streams, and waits for
// requests in progress until ctx ends (then closes them).
func (a *HTTPAdapter) Stop(ctx context.Context) error {
	a.mu.Lock()
	srv, done, again := a.srv, a.done, a.stopped
	a.stopped = true
	a.mu.Unlock()
	if srv == nil || again {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		srv.Close()
	}
	<-done
	return err
}
