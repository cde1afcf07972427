// Package mcp is Aquifer's Model Context Protocol adapter, on the official
// go-sdk. It serves twelve tools (enqueue a job or a batch of jobs, read or wait for a job,
// cancel a job, health, L8 metadata, L8 challenge; and for operators: list
// jobs, retry a job, the lanes, pause and resume a lane) and one resource
// template (aquifer://jobs/{job_id}), over stdio or streamable HTTP.
//
// Core errors, and arguments that do not fit a tool's input schema, are
// answered as MCP tool errors (a result with isError set and a message an
// agent can act on), never as protocol errors or crashes.
package mcp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Core is what the MCP adapter needs from the application.
type Core interface {
	Enqueue(ctx context.Context, req *domain.JobRequest) (*app.EnqueueResult, error)
	EnqueueBatch(ctx context.Context, reqs []*domain.JobRequest) ([]app.BatchItem, error)
	Get(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Cancel(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *app.Subscription, error)
	Health(ctx context.Context) *app.Health
	L8Metadata() *l8.Metadata
	L8Challenge(ctx context.Context, c *l8.ChallengeRequest) (*l8.ChallengeResponse, error)

	ListJobs(ctx context.Context, q *app.JobQuery) (*app.JobPage, error)
	Retry(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Lanes(ctx context.Context) ([]*app.LaneView, error)
	Lane(ctx context.Context, dest string) (*app.LaneView, error)
	PauseLane(ctx context.Context, dest, reason string) (*app.LaneView, error)
	ResumeLane(ctx context.Context, dest string) (*app.LaneView, error)
}

var _ Core = (*app.Service)(nil)

// MaxWait caps aquifer_get_job's wait_seconds.
const MaxWait = 60 * time.Second

// Options configure the adapter.
type Options struct {
	// Version is reported as the server version. Default "dev".
	Version string
	// MaxBodyBytes limits a job's request body (as the HTTP adapter does);
	// 0 disables the limit.
	MaxBodyBytes int64
	// MaxBatchBytes is the largest aquifer_enqueue_batch call the
	// streamable HTTP transport takes (it needs room for many jobs); 0:
	// httpapi's default batch limit (16 MiB); negative: no more than one
	// job needs.
	MaxBatchBytes int64
	// SessionTimeout closes streamable HTTP sessions idle this long.
	// Default 30m.
	SessionTimeout time.Duration
	Logger         *zap.Logger
}

// Server is the MCP server. One Server serves any number of stdio and HTTP
// sessions.
type Server struct {
	core Core
	opts Options
	log  *zap.Logger
	sdk  *sdk.Server

	// inputs are the tools' input schemas, by tool name (checkArgs).
	inputs map[string]*jsonschema.Schema

	closeOnce sync.Once
	closing   chan struct{} // closed by Close: long-polls return at once
}

// New builds the MCP server with its tools and resource template.
func New(core Core, opts Options) *Server {
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	s := &Server{core: core, opts: opts, log: opts.Logger.Named("mcp"), closing: make(chan struct{}),
		inputs: map[string]*jsonschema.Schema{}}
	s.sdk = sdk.NewServer(&sdk.Implementation{Name: "aquifer", Title: "Aquifer", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       s.slogger(),
		// Tools and resources only: no logging capability.
		Capabilities: &sdk.ServerCapabilities{},
	})
	s.addTools()
	s.addOperatorTools()
	s.addResources()
	s.sdk.AddReceivingMiddleware(s.checkArgs)
	return s
}

const instructions = `Aquifer is a durable, rate-paced HTTP job queue. Submit an HTTP request with ` +
	`aquifer_enqueue_job; Aquifer stores it durably and sends it at the pace the destination can take, ` +
	`retrying transient failures. Then call aquifer_get_job with the returned job_id and wait_seconds ` +
	`(up to 60) to wait for the upstream's response, or read the resource aquifer://jobs/{job_id}. ` +
	`Resubmitting the same (user_id, idempotent_key) never creates a second job. Operators find jobs with ` +
	`aquifer_list_jobs (status failed: the dead letters), replay one with aquifer_retry_job, and see, pause ` +
	`and resume destinations with aquifer_lanes, aquifer_pause_lane and aquifer_resume_lane.`

// slogger bridges the SDK's slog output into zap.
func (s *Server) slogger() *slog.Logger {
	return slog.New(zapslog.NewHandler(s.log.Named("sdk").Core()))
}

// SDK returns the underlying go-sdk server, for in-memory transports in tests
// and embedding.
func (s *Server) SDK() *sdk.Server { return s.sdk }

// RunStdio serves one MCP session over r and w (newline-delimited JSON-RPC)
// until the client closes r or ctx ends. Nothing but protocol is written to w.
func (s *Server) RunStdio(ctx context.Context, r io.ReadCloser, w io.WriteCloser) error {
	ss, err := s.sdk.Connect(ctx, &sdk.IOTransport{Reader: r, Writer: w}, nil)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case <-ctx.Done(): // shutdown, not a failure
		_ = ss.Close()
		<-done
		return nil
	case err := <-done:
		return err
	}
}

// HTTPHandler returns the streamable HTTP transport, to be mounted at /mcp.
// It lifts the listener's write timeout for its requests: server-sent event
// streams and long-polls outlive it. Its calls are marked as coming over
// HTTP, where open mode is worth a warning (openWarning).
func (s *Server) HTTPHandler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk }, &sdk.StreamableHTTPOptions{
		Logger:         s.slogger(),
		SessionTimeout: s.opts.SessionTimeout,
		// Requests carry a job; allow the configured body plus JSON-RPC framing.
		MaxRequestBodyBytes: bodyLimit(s.opts.MaxBodyBytes, s.opts.MaxBatchBytes),
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		ctx, cancel := context.WithCancel(context.WithValue(r.Context(), httpCallKey{}, true))
		defer cancel()
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-done:
			}
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// bodyLimit is the largest MCP request accepted: the job body limit with room
// for JSON escaping and framing, or the SDK's default when there is no limit
// — and at least the batch limit with room for framing, so a batch that
// POST /jobs/batch would take fits too.
func bodyLimit(maxBody, maxBatch int64) int64 {
	limit := int64(sdk.DefaultMaxRequestBodyBytes)
	if maxBody > 0 {
		limit = 2*maxBody + 64<<10
	}
	if maxBatch == 0 {
		maxBatch = defaultMaxBatchBytes
	}
	if maxBatch > 0 {
		limit = max(limit, maxBatch+64<<10)
	}
	return limit
}

// defaultMaxBatchBytes is the REST API's default batch limit
// (httpapi.DefaultMaxBatchBytes; this package does not import httpapi).
const defaultMaxBatchBytes = 16 << 20

// Close ends every long-poll and streamable HTTP request in progress, so a
// graceful shutdown does not wait on them. Register it with
// http.Server.RegisterOnShutdown. Safe to call more than once.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closing) }) }
