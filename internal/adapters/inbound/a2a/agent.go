// Package a2aagent is Aquifer's Agent2Agent (A2A protocol 0.3.0) adapter, on
// a2a-go: an agent card, and JSON-RPC methods that submit jobs as tasks.
//
// A message with one data part shaped like POST /jobs becomes a job whose id
// is the task's id (the UUID's hex digits), so the job store is the task
// store: a task is rebuilt from its job whenever it is read, and survives
// restarts with nothing else stored. The task moves submitted → working →
// completed | failed | canceled as the job does; the upstream's response is
// the task's artifact. Push-notification configs are kept in one file per
// task and also survive restarts.
package a2aagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/push"
	a2alog "github.com/a2aproject/a2a-go/log"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// Core is what the A2A adapter needs from the application.
type Core interface {
	Enqueue(ctx context.Context, req *domain.JobRequest) (*app.EnqueueResult, error)
	Get(ctx context.Context, id domain.JobID) (*domain.Job, error)
	Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *app.Subscription, error)
	Cancel(ctx context.Context, id domain.JobID) (*domain.Job, error)
}

var _ Core = (*app.Service)(nil)

// Routes the agent serves.
const (
	JSONRPCPath = "/a2a"
	CardPath    = a2asrv.WellKnownAgentCardPath // /.well-known/agent-card.json
)

// Options configure the agent.
type Options struct {
	// PublicURL is the base URL clients reach Aquifer at, e.g.
	// http://localhost:8080; the card advertises PublicURL + JSONRPCPath.
	// Required.
	PublicURL string
	// PushDir holds the push-notification configs, one file per task.
	// Required.
	PushDir string
	// Version is the agent version in the card. Default "dev".
	Version string
	// MaxBodyBytes limits JSON-RPC request bodies (and a job's body within
	// them); 0 disables the limit.
	MaxBodyBytes int64
	// PushTimeout bounds one push notification. Default 10s.
	PushTimeout time.Duration
	// SweepInterval is how often push configs of expired jobs are removed.
	// Default 10m.
	SweepInterval time.Duration
	// MaxTaskMeta bounds the in-memory context ids kept for recent tasks.
	// Default 10000.
	MaxTaskMeta int
	Logger      *zap.Logger
}

// Agent is the A2A adapter.
type Agent struct {
	core    Core
	opts    Options
	log     *zap.Logger
	slog    *slog.Logger
	card    *a2a.AgentCard
	meta    *metaCache
	push    *pushStore
	sender  *pushSender
	handler a2asrv.RequestHandler
	jsonrpc http.Handler

	closeOnce sync.Once
	closing   chan struct{} // closed by Close
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	wg        sync.WaitGroup // push watchers and the sweeper

	mu       sync.Mutex
	watching map[a2a.TaskID]bool // tasks a live execution or push watcher follows
	started  bool
}

// New builds the agent and loads the stored push configs. Call Start to
// resume push notifications for them.
func New(core Core, opts Options) (*Agent, error) {
	base, err := normalizePublicURL(opts.PublicURL)
	if err != nil {
		return nil, err
	}
	opts.PublicURL = base
	if opts.PushDir == "" {
		return nil, errors.New("a2a: a push config directory is required")
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.PushTimeout <= 0 {
		opts.PushTimeout = 10 * time.Second
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 10 * time.Minute
	}
	if opts.MaxTaskMeta <= 0 {
		opts.MaxTaskMeta = 10_000
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	ps, err := openPushStore(opts.PushDir)
	if err != nil {
		return nil, err
	}
	a := &Agent{core: core, opts: opts, log: opts.Logger.Named("a2a"), meta: newMetaCache(opts.MaxTaskMeta), push: ps,
		closing: make(chan struct{}), watching: map[a2a.TaskID]bool{}}
	a.slog = slog.New(zapslog.NewHandler(a.log.Named("sdk").Core()))
	a.bgCtx, a.bgCancel = context.WithCancel(a2alog.WithLogger(context.Background(), a.slog))
	a.card = newCard(base, opts.Version)
	a.sender = &pushSender{http: push.NewHTTPPushSender(&push.HTTPSenderConfig{Timeout: opts.PushTimeout}), store: ps, log: a.log}
	sdkHandler := a2asrv.NewHandler(executor{a},
		a2asrv.WithTaskStore(taskStore{a}),
		a2asrv.WithPushNotifications(ps, a.sender),
		a2asrv.WithLogger(a.slog),
	)
	a.handler = &requestHandler{a: a, next: sdkHandler}
	a.jsonrpc = a2asrv.NewJSONRPCHandler(a.handler)
	return a, nil
}

func normalizePublicURL(raw string) (string, error) {
	base := strings.TrimRight(strings.TrimSpace(raw), "/")
	u, err := url.Parse(base)
	if base == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("a2a: public URL %q must be an absolute http or https URL", raw)
	}
	return base, nil
}

// Card is the agent card.
func (a *Agent) Card() *a2a.AgentCard { return a.card }

// RequestHandler is the transport-independent handler (for tests and other
// transports).
func (a *Agent) RequestHandler() a2asrv.RequestHandler { return a.handler }

// CardHandler serves the agent card; mount it at CardPath. Methods other
// than GET and OPTIONS (CORS preflight) get a JSON 405 with an Allow header.
func (a *Agent) CardHandler() http.Handler {
	card := a2asrv.NewStaticAgentCardHandler(a.card)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodOptions {
			w.Header().Set("Allow", "GET, OPTIONS")
			httpkit.WriteError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		card.ServeHTTP(w, r)
	})
}

// JSONRPCHandler serves the JSON-RPC binding; mount it at JSONRPCPath. It
// lifts the listener's write timeout (streams and blocking sends last as
// long as their job) and ends its requests when the agent closes.
func (a *Agent) JSONRPCHandler() http.Handler {
	limit := a.opts.MaxBodyBytes
	if limit > 0 {
		limit = 2*limit + 64<<10 // the job body, JSON-escaped, plus the envelope
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		if limit > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(a.bgCtx, cancel)
		defer stop()
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeRPCError(w, nil, -32600, fmt.Sprintf("request body is larger than %d bytes", limit))
				return
			}
			return // the client went away
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		var env struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		_ = json.Unmarshal(raw, &env)
		if env.Method == "message/stream" || env.Method == "tasks/resubscribe" {
			// A stream the SDK refuses before it starts is a plain JSON-RPC
			// error, which it writes without a Content-Type.
			a.jsonrpc.ServeHTTP(&jsonByDefault{ResponseWriter: w}, r.WithContext(ctx))
			return
		}
		buf := &bufferedWriter{header: http.Header{}}
		a.jsonrpc.ServeHTTP(buf, r.WithContext(ctx))
		writeRPCResponse(w, buf, env.ID)
	})
}

// jsonByDefault labels a response application/json unless the handler set
// a Content-Type (an SSE stream sets text/event-stream).
type jsonByDefault struct {
	http.ResponseWriter
	wrote bool
}

func (j *jsonByDefault) label() {
	if !j.wrote {
		j.wrote = true
		if j.Header().Get("Content-Type") == "" {
			j.Header().Set("Content-Type", "application/json")
		}
	}
}

func (j *jsonByDefault) WriteHeader(code int) { j.label(); j.ResponseWriter.WriteHeader(code) }
func (j *jsonByDefault) Write(p []byte) (int, error) {
	j.label()
	return j.ResponseWriter.Write(p)
}

// Flush keeps SSE streaming through the wrapper.
func (j *jsonByDefault) Flush() {
	j.label()
	if f, ok := j.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (j *jsonByDefault) Unwrap() http.ResponseWriter { return j.ResponseWriter }

// bufferedWriter holds a non-streaming JSON-RPC response so it can be
// amended before it is sent.
type bufferedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
func (b *bufferedWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

// writeRPCResponse sends the SDK's answer with two amendments: an error's
// detail (which a2a-go puts only in error.data.error) becomes its message,
// so every client shows what was wrong, not just "invalid params"; and a
// request the SDK left unanswered (a2a-go v0.3.3 writes nothing for
// tasks/pushNotificationConfig/delete) gets the null result JSON-RPC
// requires.
func writeRPCResponse(w http.ResponseWriter, b *bufferedWriter, id any) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	body := b.body.Bytes()
	if len(bytes.TrimSpace(body)) == 0 {
		if id == nil {
			w.WriteHeader(orOK(b.status))
			return // a notification: no answer
		}
		body, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": nil})
		body = append(body, '\n')
	} else {
		var resp map[string]json.RawMessage
		if json.Unmarshal(body, &resp) == nil && resp["error"] != nil {
			var e struct {
				Code    int            `json:"code"`
				Message string         `json:"message"`
				Data    map[string]any `json:"data,omitempty"`
			}
			if json.Unmarshal(resp["error"], &e) == nil {
				if detail, ok := e.Data["error"].(string); ok && detail != "" {
					e.Message = detail
					resp["error"], _ = json.Marshal(e)
					if amended, err := json.Marshal(resp); err == nil {
						body = append(amended, '\n')
					}
				}
			}
		}
	}
	w.WriteHeader(orOK(b.status))
	_, _ = w.Write(body)
}

func orOK(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

func writeRPCError(w http.ResponseWriter, id any, code int, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// Start resumes push notifications for tasks with stored push configs (their
// live executions ended with the previous process) and starts the sweep
// that removes configs of expired jobs.
func (a *Agent) Start(context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return nil
	}
	a.started = true
	a.mu.Unlock()
	for _, tid := range a.push.tasks() {
		a.startPushWatch(tid)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(a.opts.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-a.closing:
				return
			case <-t.C:
				a.sweep(a.bgCtx)
			}
		}
	}()
	return nil
}

// Close ends streams, executions and push watchers and waits for the
// agent's goroutines. Jobs are not affected. Safe to call more than once;
// register it with http.Server.RegisterOnShutdown.
func (a *Agent) Close() {
	a.closeOnce.Do(func() {
		close(a.closing)
		a.bgCancel()
	})
	a.wg.Wait()
}

// track marks tid as followed; false if something already follows it.
func (a *Agent) track(tid a2a.TaskID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.watching[tid] {
		return false
	}
	a.watching[tid] = true
	return true
}

func (a *Agent) untrack(tid a2a.TaskID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.watching, tid)
}

// startPushWatch follows task tid's job to push its states, unless a live
// execution or another watcher already does.
func (a *Agent) startPushWatch(tid a2a.TaskID) {
	select {
	case <-a.closing:
		return
	default:
	}
	if !a.track(tid) {
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.untrack(tid)
		if err := a.pushWatch(a.bgCtx, tid); err != nil && !errors.Is(err, errClosing) && a.bgCtx.Err() == nil {
			a.log.Warn("push notifications for task stopped", zap.String("task_id", string(tid)), zap.Error(err))
		}
	}()
}

// pushWatch pushes task tid's current state (at least once: it may have
// been pushed before a restart), then every later one, until the job ends.
func (a *Agent) pushWatch(ctx context.Context, tid a2a.TaskID) error {
	id, _ := jobIDOf(tid)
	j, err := a.core.Get(ctx, id)
	if domain.CodeOf(err) == domain.CodeNotFound {
		return a.push.DeleteAll(ctx, tid) // the job expired: nothing left to tell
	}
	if err != nil {
		return err
	}
	state := stateOf(j)
	meta := a.meta.get(tid)
	if state.Terminal() {
		if a.push.finalPushed(tid) == "" {
			a.pushAll(ctx, taskFromJob(j, state, meta))
		}
		return nil
	}
	a.pushAll(ctx, taskFromJob(j, state, meta))
	return a.watch(ctx, id, state, func(state a2a.TaskState, j *domain.Job) error {
		if state.Terminal() && a.push.finalPushed(tid) == state {
			return nil // a cancel request already pushed it
		}
		a.pushAll(ctx, taskFromJob(j, state, meta))
		return nil
	})
}

func (a *Agent) pushAll(ctx context.Context, t *a2a.Task) {
	configs, _ := a.push.List(ctx, t.ID)
	for _, c := range configs {
		_ = a.sender.SendPush(ctx, c, t)
	}
}

// dropPushConfigs removes configs saved with a message that created no task.
func (a *Agent) dropPushConfigs(ctx context.Context, tid a2a.TaskID) {
	if err := a.push.DeleteAll(context.WithoutCancel(ctx), tid); err != nil {
		a.log.Warn("removing push configs of a rejected message failed", zap.String("task_id", string(tid)), zap.Error(err))
	}
}

// sweep removes the push configs of tasks whose jobs no longer exist.
func (a *Agent) sweep(ctx context.Context) {
	for _, tid := range a.push.tasks() {
		id, _ := jobIDOf(tid)
		if _, err := a.core.Get(ctx, id); domain.CodeOf(err) == domain.CodeNotFound {
			if err := a.push.DeleteAll(ctx, tid); err != nil {
				a.log.Warn("removing push configs of an expired task failed", zap.String("task_id", string(tid)), zap.Error(err))
			}
		}
	}
}

// taskStore is the SDK's task store over the job store: Get rebuilds the
// task from its job; Save keeps only what the job cannot say (the context
// id), in memory.
type taskStore struct{ a *Agent }

var _ a2asrv.TaskStore = taskStore{}

func (s taskStore) Save(_ context.Context, t *a2a.Task) error {
	m := taskMeta{contextID: t.ContextID}
	for _, msg := range t.History {
		if msg.Role == a2a.MessageRoleUser {
			m.messageID = msg.ID
			break
		}
	}
	s.a.meta.put(t.ID, m)
	return nil
}

func (s taskStore) Get(ctx context.Context, tid a2a.TaskID) (*a2a.Task, error) {
	id, ok := jobIDOf(tid)
	if !ok {
		return nil, a2a.ErrTaskNotFound
	}
	j, err := s.a.core.Get(ctx, id)
	if err != nil {
		if domain.CodeOf(err) == domain.CodeNotFound {
			return nil, a2a.ErrTaskNotFound
		}
		return nil, fmt.Errorf("read job %s: %s: %w", id, domain.PublicMessage(err), a2a.ErrInternalError)
	}
	return taskFromJob(j, stateOf(j), s.a.meta.get(tid)), nil
}
