// Package httpapi is Aquifer's REST and SSE front door, on chi.
//
// Every response is JSON (SSE streams aside), including 404 and 405 for
// unknown routes; domain errors map onto HTTP statuses in one table (errors.go).
package httpapi

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Core is what the HTTP adapter needs from the application.
type Core interface {
	Enqueue(ctx context.Context, req *domain.JobRequest) (*app.EnqueueResult, error)
	EnqueueBatch(ctx context.Context, reqs []*domain.JobRequest) ([]app.BatchItem, error)
	Get(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Cancel(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *app.Subscription, error)
	Position(ctx context.Context, j *domain.Job) (int, error)
	Health(ctx context.Context) *app.Health
	RegisterMember(ctx context.Context, r *domain.MemberRegistration) (bool, error)
	LeaveMember(ctx context.Context, poolID, memberID string) error
	Pools(ctx context.Context) map[string]app.PoolHealth
	L8Metadata() *l8.Metadata
	L8Challenge(ctx context.Context, c *l8.ChallengeRequest) (*l8.ChallengeResponse, error)

	// Operators' calls (operator.go, lanes.go).
	ListJobs(ctx context.Context, q *app.JobQuery) (*app.JobPage, error)
	Retry(ctx context.Context, id domain.JobID) (*domain.Job, error)
	StartOperation(ctx context.Context, kind domain.OperationKind, q *app.JobQuery, dryRun bool) (*app.OperationResult, error)
	GetOperation(ctx context.Context, id string) (*domain.Operation, error)
	Operations(ctx context.Context) ([]*domain.Operation, error)
	Lanes(ctx context.Context) ([]*app.LaneView, error)
	Lane(ctx context.Context, dest string) (*app.LaneView, error)
	PauseLane(ctx context.Context, dest, reason string) (*app.LaneView, error)
	ResumeLane(ctx context.Context, dest string) (*app.LaneView, error)
}

var _ Core = (*app.Service)(nil)

// Options configure the handler.
type Options struct {
	// MaxBodyBytes limits request bodies of POST /jobs; 0 disables the limit.
	MaxBodyBytes int64
	// MaxBatchBytes limits request bodies of POST /jobs/batch (each of its
	// items is limited by MaxBodyBytes). 0: DefaultMaxBatchBytes; negative:
	// no limit.
	MaxBatchBytes int64
	// KeepAlive is the SSE keep-alive comment interval. Default 30s.
	KeepAlive time.Duration
	// PoolToken, when set, is required as "Authorization: Bearer <token>"
	// on the pool endpoints (registration, heartbeat, leave, listing).
	PoolToken string
	// Auth, when it has tenants, requires an API key on every job, pool,
	// operation and lane endpoint and scopes them to the key's tenant (the
	// pool token is then not used); an admin key acts on every tenant's
	// jobs. nil or empty: open, and the operator endpoints say so in an
	// Aquifer-Warning header.
	Auth *httpkit.Auth
	// HealthOnly serves /health alone (with JSON 404/405 for the rest): the
	// REST API is off, other adapters are mounted on Router().
	HealthOnly bool
	Logger     *zap.Logger
}

// DefaultMaxBatchBytes is the body limit of POST /jobs/batch unless
// Options set another (16 MiB).
const DefaultMaxBatchBytes = 16 << 20

// Handler serves the REST API.
type Handler struct {
	core Core
	opts Options
	log  *zap.Logger
	mux  chi.Router

	closeOnce sync.Once
	closing   chan struct{} // closed by CloseStreams
}

// New returns the API handler. Extra routes (MCP, A2A, proxy) can be mounted
// on Router().
func New(core Core, opts Options) *Handler {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	h := &Handler{core: core, opts: opts, log: opts.Logger.Named("http"), closing: make(chan struct{})}
	r := chi.NewRouter()
	r.Use(h.recoverer, crossOrigin)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "not found")
	})
	r.MethodNotAllowed(h.methodNotAllowed)
	if opts.HealthOnly {
		r.Get("/health", h.health)
		r.Head("/health", h.health)
		h.mux = r
		return h
	}
	r.Group(func(r chi.Router) {
		r.Use(opts.Auth.Middleware)
		r.Post("/jobs", h.postJob)
		r.Post("/jobs/batch", h.postBatch) // as POST /jobs: no Content-Type needed, the origin check covers it
		r.Get("/jobs/{id}", h.getJob)
		r.Head("/jobs/{id}", h.getJob)
		r.Delete("/jobs/{id}", h.cancelJob)
		r.Get("/jobs/{id}/stream", h.streamJob)
		r.Post("/pools/{pool_id}/members", h.registerMember)
		r.Delete("/pools/{pool_id}/members/{member_id}", h.leaveMember)
		r.Get("/pools", h.listPools)
		r.Get("/pools/{pool_id}", h.getPool)
		r.Group(func(r chi.Router) {
			r.Use(h.warnOpen, jsonBody)
			r.Get("/jobs", h.listJobs)
			r.Post("/jobs/{id}/retry", h.retryJob)
			r.Post("/jobs/retry", h.bulkRetry)
			r.Post("/jobs/cancel", h.bulkCancel)
			r.Get("/operations", h.listOperations)
			r.Get("/operations/{id}", h.getOperation)
			r.Get("/lanes", h.listLanes)
			r.Get("/lanes/{destination}", h.getLane)
			r.Post("/lanes/{destination}/pause", h.pauseLane)
			r.Post("/lanes/{destination}/resume", h.resumeLane)
		})
	})
	r.Get("/.well-known/l8", h.l8Metadata)
	r.Post("/l8/challenge", h.l8Challenge)
	r.Get("/l8-spec", h.l8Spec)
	r.Get("/health", h.health)
	r.Head("/health", h.health)
	h.mux = r
	return h
}

// probedMethods are the methods a 405's Allow header may list.
var probedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions}

// methodNotAllowed answers 405 with the JSON error and, as RFC 9110 §15.5.6
// requires, an Allow header listing the methods the path does take
// (including routes mounted on Router later).
func (h *Handler) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	for _, m := range probedMethods {
		if h.mux.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method not allowed")
}

// Router returns the chi router, for mounting more routes.
func (h *Handler) Router() chi.Router { return h.mux }

// CloseStreams ends every open SSE stream, so a graceful shutdown does not
// wait on them. Register it with http.Server.RegisterOnShutdown.
func (h *Handler) CloseStreams() { h.closeOnce.Do(func() { close(h.closing) }) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				h.log.Error("panic in handler", zap.String("path", r.URL.Path), zap.Any("panic", p), zap.Stack("stack"))
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// ServerOptions are the hardening settings of the listening server.
type ServerOptions struct {
	ReadHeaderTimeout time.Duration // default 10s
	ReadTimeout       time.Duration // whole request, body included; default 60s
	WriteTimeout      time.Duration // non-streaming responses; default 60s (SSE lifts it per stream)
	IdleTimeout       time.Duration // keep-alive idle; default 120s
	MaxHeaderBytes    int           // default 64 KiB
}

// NewServer wraps handler in an http.Server with timeouts against slow or
// stuck clients.
func NewServer(handler http.Handler, o ServerOptions, errLog *zap.Logger) *http.Server {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 60 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
	}
	if errLog != nil {
		srv.ErrorLog, _ = zap.NewStdLogAt(errLog.Named("http.server"), zap.WarnLevel)
	}
	return srv
}
