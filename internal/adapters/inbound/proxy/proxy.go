// Package proxy is Aquifer's edge-gateway front door, POST /proxy
// (BEHAVIOR.md §20): callers send the job shape of POST /jobs; a healthy
// destination is called directly and its answer relayed verbatim, and an
// overloaded one turns the request into a durable job whose events stream
// back on the same connection.
package proxy

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Core is what the proxy needs from the application.
type Core interface {
	Proxy(ctx context.Context, req *domain.JobRequest) (*app.ProxyResult, error)
	Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *app.Subscription, error)
	Position(ctx context.Context, j *domain.Job) (int, error)
}

var _ Core = (*app.Service)(nil)

// Options configure the handler.
type Options struct {
	// MaxBodyBytes limits request bodies; 0 disables the limit.
	MaxBodyBytes int64
	// KeepAlive is the SSE keep-alive interval of fallback streams. Default 30s.
	KeepAlive time.Duration
	Logger    *zap.Logger
}

// Handler serves POST /proxy.
type Handler struct {
	core Core
	opts Options
	log  *zap.Logger

	closeOnce sync.Once
	closing   chan struct{}
}

// New returns the handler.
func New(core Core, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Handler{core: core, opts: opts, log: opts.Logger.Named("proxy"), closing: make(chan struct{})}
}

// CloseStreams ends open fallback streams (register it with
// http.Server.RegisterOnShutdown).
func (h *Handler) CloseStreams() { h.closeOnce.Do(func() { close(h.closing) }) }

// fallbackJSON is the first frame of a fallback stream.
type fallbackJSON struct {
	JobID          string `json:"job_id"`
	Reason         string `json:"reason"`
	UpstreamStatus int    `json:"upstream_status,omitempty"`
}

// HeaderJobID names the job behind a directly relayed answer.
const HeaderJobID = "X-Aquifer-Job-Id"

// hopByHop response headers belong to one connection and are not relayed.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Transfer-Encoding": true,
	"Upgrade": true, "Te": true, "Trailer": true,
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpkit.WriteError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	var in httpkit.JobRequestJSON
	if !httpkit.DecodeBody(w, r, &in, h.opts.MaxBodyBytes) {
		return
	}
	// A proxied job is tried at once: it cannot be scheduled. Its other
	// options (deadline, priority, retry policy, timeout) apply to its queued
	// attempts, and it continues the caller's W3C trace like any other job.
	if in.NotBefore != "" || in.DelaySeconds != nil {
		field := "not_before"
		if in.DelaySeconds != nil {
			field = "delay_seconds"
		}
		httpkit.WriteJSON(w, http.StatusBadRequest, httpkit.ErrorBody{
			Error: field + " is not supported by POST /proxy, which tries the job at once; schedule it with POST /jobs", Field: field})
		return
	}
	req, err := in.Request(r.Header)
	if err != nil {
		httpkit.WriteDomainError(w, r, h.log, err)
		return
	}
	res, err := h.core.Proxy(r.Context(), req)
	if err != nil {
		httpkit.WriteDomainError(w, r, h.log, err)
		return
	}
	stream := httpkit.StreamOptions{KeepAlive: h.opts.KeepAlive, Closing: h.closing}
	switch {
	case res.Direct != nil:
		hdr := w.Header()
		for k, v := range res.Direct.Header {
			if !hopByHop[k] {
				hdr[k] = v
			}
		}
		hdr.Set(HeaderJobID, string(res.Job.ID))
		w.WriteHeader(res.Direct.Status)
		if err := res.Direct.Relay(w); err != nil {
			h.log.Debug("relaying a direct answer ended early", zap.String("job_id", string(res.Job.ID)), zap.Error(err))
		}
	case res.Duplicate && res.Sub == nil:
		httpkit.WriteJSON(w, http.StatusOK, httpkit.EnqueueJSON{JobID: string(res.Job.ID), Status: string(res.Job.Status), Duplicate: true})
	case res.Duplicate:
		httpkit.Stream(w, r, h.core, res.Job, res.Sub, stream)
	default:
		httpkit.SetLoadHeaders(w.Header(), res.Load)
		stream.First = &httpkit.Frame{Event: "proxy_fallback",
			Data: fallbackJSON{JobID: string(res.Job.ID), Reason: res.Reason, UpstreamStatus: res.UpstreamStatus}}
		httpkit.Stream(w, r, h.core, res.Job, res.Sub, stream)
	}
}
