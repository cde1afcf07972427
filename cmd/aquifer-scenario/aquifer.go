package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// memberHeartbeat is the interval members declare when they first register
// (BEHAVIOR.md §27.2).
const memberHeartbeat = 30 * time.Second

// productionRetry is Aquifer's default retry policy, spelled out: 5 attempts,
// 1/2/4/8 s apart. Regular mode uses the same.
var productionRetry = app.RetryPolicy{Attempts: 5, Backoff: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}}

// aquiferRun is an embedded Aquifer with the fake backend's workers
// registered as one pool, fed jobs that report back to a webhook receiver.
type aquiferRun struct {
	o     options
	be    *backend
	dir   string
	store *sqlite.Store
	svc   *app.Service
	recv  *receiver

	cancel context.CancelFunc
	wg     sync.WaitGroup

	enqueueErrs atomic.Int64
	firstErr    atomic.Pointer[string]
}

// newAquiferRun builds and starts Aquifer (store in a fresh temp dir) and
// the webhook receiver. Nothing is registered or enqueued until launch.
func newAquiferRun(ctx context.Context, o options, be *backend, logs io.Writer) (_ *aquiferRun, err error) {
	a := &aquiferRun{o: o, be: be}
	defer func() {
		if err != nil {
			a.stop()
		}
	}()
	if a.dir, err = os.MkdirTemp("", "aquifer-scenario-*"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	log := zap.NewNop()
	if o.verbose {
		enc := zap.NewDevelopmentEncoderConfig()
		log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(logs), zap.InfoLevel))
	}
	if a.store, err = sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(a.dir, "aquifer.db"), Logger: log}); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	a.svc, err = app.New(app.Config{
		Store:  a.store,
		Doer:   egress.NewClient(egress.Options{}),
		Logger: log,
		// Pools are not capped by these: a pool runs at the live sum of its
		// members' effective rates. They pace everything else — here, the
		// webhook receiver.
		Rates: app.RateTable{Defaults: domain.Rate{RPS: o.rps, MaxConcurrent: o.workers}},
		Retry: productionRetry,
	})
	if err != nil {
		return nil, err
	}
	if err = a.svc.Start(ctx); err != nil {
		return nil, err
	}
	if a.recv, err = newReceiver(); err != nil {
		return nil, err
	}
	return a, nil
}

// launch registers the members, starts their heartbeats and enqueues the
// jobs in the background.
func (a *aquiferRun) launch(ctx context.Context) error {
	ctx, a.cancel = context.WithCancel(ctx)
	for _, w := range a.be.workers {
		if err := a.register(ctx, w.spec, memberHeartbeat); err != nil {
			return fmt.Errorf("register %s: %w", w.spec.memberID(), err)
		}
	}
	if a.o.heartbeat > 0 {
		interval := a.o.heartbeat.Truncate(time.Second)
		if interval < time.Second {
			interval = memberHeartbeat
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			t := time.NewTicker(a.o.heartbeat)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				for _, w := range a.be.workers {
					if err := a.register(ctx, w.spec, interval); err != nil {
						a.noteErr(fmt.Sprintf("heartbeat %s: %v", w.spec.memberID(), err))
					}
				}
			}
		}()
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.enqueueAll(ctx)
	}()
	return nil
}

func (a *aquiferRun) register(ctx context.Context, w workerSpec, interval time.Duration) error {
	_, err := a.svc.RegisterMember(ctx, &domain.MemberRegistration{
		PoolID: a.o.pool, MemberID: w.memberID(), Address: a.be.workerURL(w.index),
		CapacityRPS: w.capacity, HeartbeatInterval: interval,
	})
	return err
}

// enqueueAll submits --jobs jobs: paced at --enqueue-rps, or as fast as a
// few concurrent submitters manage.
func (a *aquiferRun) enqueueAll(ctx context.Context) {
	var next atomic.Int64
	submit := func() bool {
		i := next.Add(1) - 1
		if i >= int64(a.o.jobs) || ctx.Err() != nil {
			return false
		}
		_, err := a.svc.Enqueue(ctx, &domain.JobRequest{
			UserID:        "scenario-user",
			IdempotentKey: fmt.Sprintf("scenario-%s-%d-%06d", a.o.scenario, a.o.seed, i),
			PoolID:        a.o.pool,
			Method:        http.MethodPost,
			Headers:       map[string]string{"Content-Type": "application/json"},
			Body:          fmt.Sprintf(`{"job":%d}`, i),
			WebhookURL:    a.recv.url,
		})
		if err != nil && ctx.Err() == nil {
			a.enqueueErrs.Add(1)
			a.noteErr(fmt.Sprintf("enqueue: %v", err))
		}
		return true
	}
	if a.o.enqueueRPS > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / a.o.enqueueRPS))
		defer t.Stop()
		for submit() {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		return
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for submit() {
			}
		})
	}
	wg.Wait()
}

func (a *aquiferRun) noteErr(msg string) { a.firstErr.CompareAndSwap(nil, &msg) }

func (a *aquiferRun) counts() outcomeCounts { return a.recv.counts() }

// reputations maps member id → reputation; evicted members are missing.
func (a *aquiferRun) reputations() map[string]float64 {
	out := map[string]float64{}
	for _, m := range a.svc.Pools(context.Background())[a.o.pool].Members {
		out[m.ID] = m.Reputation
	}
	return out
}

// problems reports what went wrong on the harness side (not the workers').
func (a *aquiferRun) problems() []string {
	var out []string
	if n := a.enqueueErrs.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d enqueue errors", n))
	}
	if p := a.firstErr.Load(); p != nil {
		out = append(out, "first error: "+*p)
	}
	return out
}

// stop shuts everything down and removes the temp dir.
func (a *aquiferRun) stop() {
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	if a.svc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.svc.Stop(ctx)
		cancel()
	}
	if a.store != nil {
		_ = a.store.Close()
	}
	if a.recv != nil {
		a.recv.close()
	}
	if a.dir != "" {
		_ = os.RemoveAll(a.dir)
	}
}

// receiver is the embedded webhook receiver: it counts each job's terminal
// status once (delivery is at-least-once).
type receiver struct {
	url string
	srv *http.Server

	mu   sync.Mutex
	seen map[string]bool
	c    outcomeCounts
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: listen: %w", err)
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/webhook", seen: map[string]bool{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	var p app.WebhookPayload
	if err := json.NewDecoder(req.Body).Decode(&p); err != nil || p.JobID == "" {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	if !r.seen[p.JobID] {
		r.seen[p.JobID] = true
		switch p.Status {
		case string(domain.StatusCompleted):
			r.c.completed++
			if p.ResponseStatus == http.StatusTooManyRequests {
				r.c.completed429++
			}
		case string(domain.StatusFailed):
			r.c.failed++
		}
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) counts() outcomeCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
}
