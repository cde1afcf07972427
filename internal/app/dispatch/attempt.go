package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// DrainLimit is how much of an over-long or unwanted response body is read
// and discarded so the connection can be reused; beyond it the connection
// is closed.
const DrainLimit = 256 << 10

type outcomeKind int

const (
	outcomeDone      outcomeKind = iota // this piece of work is over (recorded, or the job vanished)
	outcomeRetry                        // recorded as failed-but-retryable; run again at retryAt
	outcomeDeferred                     // the destination said "later" (429): its queue waits until retryAt
	outcomeAbandoned                    // shutdown aborted the attempt; the store still says "ready"
	outcomeHeld                         // the destination is down (its circuit is open): wait for it, attempt not counted
)

// outcome is what an attempt goroutine reports back to its lane.
type outcome struct {
	job      *domain.Job
	queue    domain.QueueKey
	kind     outcomeKind
	retryAt  time.Time
	status   int            // HTTP status of the response (0: none)
	signals  pacing.Signals // pacing signals the response carried
	observed bool           // a response was obtained and its signals are meaningful
	failed   bool           // a transport error or 5xx: a reliability signal for a pool member
	member   string         // the pool member the attempt went to ("" for a URL)
	deferTo  time.Time      // a 429 asked to wait until then
	probe    bool           // the attempt was the lane's outage probe
	reason   string         // why a failed attempt failed (the lane's last error)
	// rtt is how long the exchange with the destination took (0: there
	// was none — the request could not be built, or was refused by the
	// destination rules); an adaptive lane learns from it.
	rtt time.Duration
}

// metricOutcome names an attempt's outcome for Metrics.Dispatched.
func (o *outcome) metricOutcome() string {
	switch {
	case o.kind == outcomeRetry:
		return "retry"
	case o.kind == outcomeDeferred:
		return "deferred"
	case o.kind == outcomeHeld:
		return "held"
	case o.failed:
		return "failed"
	}
	return "completed"
}

// attemptResult is what one HTTP exchange produced.
type attemptResult struct {
	result    *domain.Result
	retryable bool
	denied    bool // the destination rules refused the connection: fail, do not retry
	signals   pacing.Signals
	observed  bool
	// outage: the failure is the destination's (no answer, or a 5xx), not
	// the request's own (it could not be built); see laneOutage.
	outage bool
	// rtt is how long the exchange took, request sent to response read
	// (or the transport error), when the destination was reached or
	// failed to answer (observed or outage).
	rtt time.Duration
}

func (ar attemptResult) status() int { return ar.result.ResponseStatus }

// report copies what the lane needs to know about the response into o.
func (o *outcome) report(ar attemptResult) *outcome {
	o.status, o.signals, o.observed, o.rtt = ar.status(), ar.signals, ar.observed, ar.rtt
	o.failed = !ar.observed || ar.status() >= 500
	if o.failed {
		o.reason = ar.result.Reason
	}
	return o
}

// deferral decides whether a 429 defers the work (backpressure, not
// failure) and until when: the answer's Retry-After, else its rate-limit
// reset, else the retry backoff for the n-th deferral.
func (d *Dispatcher) deferral(ar attemptResult, deferrals int) (time.Time, bool) {
	if ar.status() != http.StatusTooManyRequests || deferrals >= d.cfg.MaxDeferrals {
		return time.Time{}, false
	}
	wait := max(ar.signals.RetryAfter, ar.signals.ResetIn)
	if wait <= 0 {
		wait = d.cfg.Retry.Delay(deferrals + 1)
	}
	return d.cfg.Clock.Now().Add(wait), true
}

// retryDelay is the wait before the next attempt after attempt n: the retry
// backoff — the job's own for a dispatch that set one — or longer if the
// answer said so (Retry-After on a 503).
func (d *Dispatcher) retryDelay(j *domain.Job, phase domain.Phase, n int, ar attemptResult) time.Duration {
	backoff := d.cfg.Retry.Delay(n)
	if phase == domain.PhaseDispatch && j.Retry.Backoff > 0 {
		backoff = j.Retry.Delay(n)
	}
	return max(backoff, ar.signals.RetryAfter)
}

// maxAttempts is how many attempts j's dispatch may make: its own retry
// policy's, else the server's.
func (d *Dispatcher) maxAttempts(j *domain.Job) int {
	if j.Retry.MaxAttempts > 0 {
		return j.Retry.MaxAttempts
	}
	return d.cfg.Retry.Attempts
}

// timeout bounds one attempt of j's dispatch: its own timeout, else the
// server's request timeout.
func (d *Dispatcher) timeout(j *domain.Job) time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	return d.cfg.RequestTimeout
}

// beyondDeadline reports whether a next attempt of j's dispatch at at would
// start at or after its deadline: then the job fails now instead.
func beyondDeadline(j *domain.Job, at time.Time) bool {
	return !j.Deadline.IsZero() && !at.Before(j.Deadline)
}

// startAttempt runs one attempt of j's next action on a worker and reports
// the outcome to l. flowRate is l's pace at the start as header text, sent
// to the destination in the load headers.
//
// For pool work, member is the chosen member and target its address. For a
// dispatch the caller has already marked j executing (beginDispatch).
func (d *Dispatcher) startAttempt(l *lane, queue domain.QueueKey, j *domain.Job, flowRate []string, member, target string, probe bool) {
	dispatching := j.Phase() == domain.PhaseDispatch
	d.attemptsWG.Add(1)
	d.workers.run(func() {
		defer d.attemptsWG.Done()
		var o *outcome
		if dispatching {
			if target == "" {
				target = j.URL
			}
			o = d.dispatchAttempt(l.outage, j, flowRate, target, member, probe)
			d.EndDispatch(j.ID)
		} else {
			o = d.deliverAttempt(l.outage, j, flowRate, probe)
		}
		o.queue, o.member, o.probe = queue, member, probe
		select {
		case l.done <- o:
		case <-l.quit: // the lane stopped; its state is gone anyway
		}
	})
}

// startExpiry fails j without sending anything, for reason — it has waited
// longer than the outage hold allows for a destination that is down, or
// past its deadline — and reports to l. For a dispatch the caller has
// already marked j executing.
func (d *Dispatcher) startExpiry(l *lane, queue domain.QueueKey, j *domain.Job, reason string) {
	d.attemptsWG.Add(1)
	d.workers.run(func() {
		defer d.attemptsWG.Done()
		res := &domain.Result{Reason: reason}
		if reason == domain.ReasonDeadlineExceeded {
			d.log.Info("job not dispatched by its deadline; failed", zap.String("job_id", string(j.ID)),
				zap.String("upstream", string(l.upstream)), zap.Time("deadline", j.Deadline))
		} else {
			d.log.Warn("job waited too long for a destination that is down; failed", zap.String("job_id", string(j.ID)),
				zap.String("upstream", string(l.upstream)), zap.Duration("max_outage_hold", d.cfg.Outage.MaxHold))
		}
		if j.Phase() == domain.PhaseDispatch {
			d.finish(j, domain.StatusFailed, j.Attempts, res)
			d.EndDispatch(j.ID)
		} else {
			d.finishDelivery(j, false, j.Delivery.Attempts, res)
		}
		select {
		case l.done <- &outcome{job: j, queue: queue, kind: outcomeDone}:
		case <-l.quit:
		}
	})
}

// dispatchAttempt sends j's request once and records what came of it. A
// panic anywhere in here fails this job only; the lane keeps going.
func (d *Dispatcher) dispatchAttempt(lo *laneOutage, j *domain.Job, flowRate []string, target, member string, probe bool) (o *outcome) {
	n := j.Attempts + 1
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("panic while running job", zap.String("job_id", string(j.ID)), zap.Any("panic", p), zap.Stack("stack"))
			d.finish(j, domain.StatusFailed, n, &domain.Result{Reason: "internal panic"})
			o = &outcome{job: j, kind: outcomeDone}
		}
	}()
	started := d.cfg.Clock.Now()
	stopMark := d.markInFlightLater(j, started)
	if n == 1 && j.Deferrals == 0 {
		d.events.Publish(domain.Event{Type: domain.EventDispatching, JobID: j.ID, Attempt: n})
		d.cfg.Tracer.Waited(j, j.DueAt(), started, n)
	}
	traceparent, endSpan := d.cfg.Tracer.Attempt(j, false, n, started)
	ar := d.send(d.timeout(j), func(ctx context.Context) (*http.Response, error) {
		return d.Exchange(ctx, j, target, flowRate, traceparent)
	})
	stopMark()
	endSpan(ar.status(), ar.result.Reason, d.cfg.Clock.Now())
	if d.runCtx.Err() != nil {
		return &outcome{job: j, kind: outcomeAbandoned}
	}
	j.History = domain.AppendHistory(j.History, attemptRecord(started, d.cfg.Clock.Now(), ar, member))
	upstream := string(j.Upstream())
	defer func() {
		if o != nil && o.kind != outcomeAbandoned { // abandoned: shutdown cut it short; it runs again
			d.cfg.Metrics.Dispatched(upstream, o.metricOutcome(), ar.status(), d.cfg.Clock.Now().Sub(started))
		}
	}()
	if ar.retryable {
		switch d.judge(lo, j, ar, probe) {
		case holdForOutage:
			return d.requeue(j, domain.PhaseDispatch, j.Attempts, j.Deferrals, ar, outcomeHeld, d.cfg.Clock.Now())
		case holdRanOut:
			ar.result.Reason = d.outageReason(ar.result.Reason)
			d.finish(j, domain.StatusFailed, n, ar.result)
			return (&outcome{job: j, kind: outcomeDone}).report(ar)
		}
	} else if ar.observed {
		lo.succeeded(d.cfg.Clock.Now())
	}
	if until, ok := d.deferral(ar, j.Deferrals); ok {
		at := until
		if j.PoolID != "" {
			at = d.cfg.Clock.Now() // another member can take it now; the one that said 429 waits
		}
		if beyondDeadline(j, at) {
			return d.failDeadline(j, n, ar)
		}
		o := d.requeue(j, domain.PhaseDispatch, j.Attempts, j.Deferrals+1, ar, outcomeDeferred, at)
		o.deferTo = until
		return o
	}
	if ar.retryable && n < d.maxAttempts(j) {
		at := d.cfg.Clock.Now().Add(d.retryDelay(j, domain.PhaseDispatch, n, ar))
		if beyondDeadline(j, at) {
			return d.failDeadline(j, n, ar)
		}
		return d.requeue(j, domain.PhaseDispatch, n, j.Deferrals, ar, outcomeRetry, at)
	}
	status := domain.StatusCompleted
	if ar.retryable || ar.denied {
		status = domain.StatusFailed
	}
	d.finish(j, status, n, ar.result)
	return (&outcome{job: j, kind: outcomeDone}).report(ar)
}

// failDeadline fails j after attempt n because its next attempt could not
// start before its deadline: the result keeps what the last attempt got,
// with reason "deadline exceeded".
func (d *Dispatcher) failDeadline(j *domain.Job, n int, ar attemptResult) *outcome {
	res := *ar.result
	res.Reason = domain.ReasonDeadlineExceeded
	d.finish(j, domain.StatusFailed, n, &res)
	return (&outcome{job: j, kind: outcomeDone}).report(ar)
}

// requeue records that j's current phase will be tried again at at, and
// builds the outcome that tells its lane so. A failed write is retried
// (persist); if the dispatcher stops first the attempt is abandoned and the
// store's copy runs again after restart.
func (d *Dispatcher) requeue(j *domain.Job, phase domain.Phase, attempts, deferrals int, ar attemptResult,
	kind outcomeKind, at time.Time) *outcome {
	p := &ports.RequeueParams{ID: j.ID, Seq: j.Seq, Phase: phase, Attempts: attempts, Deferrals: deferrals,
		Response: ar.status(), Reason: ar.result.Reason, Now: d.cfg.Clock.Now()}
	if phase == domain.PhaseDispatch {
		p.History = j.History
	}
	err := persist(d.loopCtx, d.cfg.Clock, d.log, "retry", j.ID, func(ctx context.Context) error {
		return d.cfg.Store.Requeue(ctx, p)
	})
	if errors.Is(err, domain.ErrNotFound) {
		return (&outcome{job: j, kind: outcomeDone}).report(ar) // expired and purged meanwhile
	}
	if err != nil {
		return &outcome{job: j, kind: outcomeAbandoned}
	}
	j.Deferrals = deferrals
	if phase == domain.PhaseDeliver {
		j.Delivery.Attempts, j.Delivery.ResponseStatus, j.Delivery.Reason = attempts, ar.status(), ar.result.Reason
	} else {
		j.Attempts = attempts
	}
	return (&outcome{job: j, kind: kind, retryAt: at}).report(ar)
}

// deliverAttempt POSTs j's result to its webhook_url once. Retries and
// deferrals follow the same rules as dispatch: 5xx and transport errors are
// retried; a 429 defers.
func (d *Dispatcher) deliverAttempt(lo *laneOutage, j *domain.Job, flowRate []string, probe bool) (o *outcome) {
	n := j.Delivery.Attempts + 1
	jobID := zap.String("job_id", string(j.ID)) // a field, not a logger per delivery: most log nothing
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("panic while delivering a webhook", jobID, zap.Any("panic", p), zap.Stack("stack"))
			d.finishDelivery(j, false, n, &domain.Result{Reason: "internal panic"})
			o = &outcome{job: j, kind: outcomeDone}
		}
	}()
	var size int
	if j.Result != nil {
		size = len(j.Result.Body)*4/3 + len(j.Result.Reason) // room for base64 or a few escapes
	}
	body := AppendWebhookPayload(make([]byte, 0, size+webhookOverhead), j.ID, j.Status, j.Result)
	traceparent, endSpan := d.cfg.Tracer.Attempt(j, true, n, d.cfg.Clock.Now())
	ar := d.send(d.cfg.RequestTimeout, func(ctx context.Context) (*http.Response, error) {
		ctx = d.policyCtx(ctx, j)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.WebhookURL, bytes.NewReader(body))
		if err != nil {
			return nil, &requestError{err}
		}
		req.Header = make(http.Header, deliveryHeaders) // no growing on the way
		req.Header["Content-Type"] = jsonContentType
		setTrace(req, traceparent, j.TraceState)
		d.signer.SignDelivery(ctx, req, j, body)
		return d.do(req, flowRate)
	})
	endSpan(ar.status(), ar.result.Reason, d.cfg.Clock.Now())
	if d.runCtx.Err() != nil {
		return &outcome{job: j, kind: outcomeAbandoned}
	}
	if ar.retryable {
		switch d.judge(lo, j, ar, probe) {
		case holdForOutage:
			return d.requeue(j, domain.PhaseDeliver, j.Delivery.Attempts, j.Deferrals, ar, outcomeHeld, d.cfg.Clock.Now())
		case holdRanOut:
			ar.result.Reason = d.outageReason(ar.result.Reason)
			d.log.Warn("webhook delivery failed; receiver down for longer than max_outage_hold", jobID, zap.String("reason", ar.result.Reason))
			d.finishDelivery(j, false, n, ar.result)
			return (&outcome{job: j, kind: outcomeDone}).report(ar)
		}
	} else if ar.observed {
		lo.succeeded(d.cfg.Clock.Now())
	}
	if until, ok := d.deferral(ar, j.Deferrals); ok {
		return d.requeue(j, domain.PhaseDeliver, j.Delivery.Attempts, j.Deferrals+1, ar, outcomeDeferred, until)
	}
	if ar.status() == http.StatusTooManyRequests { // deferrals spent
		ar.result.Reason = fmt.Sprintf("receiver answered 429 %d times", j.Deferrals+1)
		d.log.Warn("webhook delivery failed", jobID, zap.String("reason", ar.result.Reason))
		d.finishDelivery(j, false, n, ar.result)
		return (&outcome{job: j, kind: outcomeDone}).report(ar)
	}
	if ar.retryable && n < d.cfg.Retry.Attempts {
		return d.requeue(j, domain.PhaseDeliver, n, j.Deferrals, ar, outcomeRetry, d.cfg.Clock.Now().Add(d.retryDelay(j, domain.PhaseDeliver, n, ar)))
	}
	if ar.retryable {
		d.log.Warn("webhook delivery failed; retries spent", jobID, zap.Int("attempts", n), zap.String("reason", ar.result.Reason))
	}
	d.finishDelivery(j, !ar.retryable && !ar.denied, n, ar.result)
	return (&outcome{job: j, kind: outcomeDone}).report(ar)
}

// send performs one HTTP exchange and classifies it: 5xx and transport
// errors are retryable, any other response is final (a 429 is the caller's
// to interpret). Every request carries the load headers and asks for ORCA
// load reports; every response's pacing signals are parsed.
func (d *Dispatcher) send(timeout time.Duration, exchange func(ctx context.Context) (*http.Response, error)) attemptResult {
	ctx, cancel := context.WithTimeout(d.runCtx, timeout)
	defer cancel()
	start := d.cfg.Clock.Now()
	resp, err := exchange(ctx)
	if err != nil {
		var re *requestError
		if errors.As(err, &re) {
			return attemptResult{result: &domain.Result{Reason: fmt.Sprintf("building request: %v", re.err)}, retryable: true}
		}
		var denied *domain.DestinationDeniedError
		if errors.As(err, &denied) {
			// The destination resolved to an address the rules forbid: no
			// retry changes that.
			return attemptResult{result: &domain.Result{Reason: domain.PublicMessage(denied)}, denied: true}
		}
		return attemptResult{result: &domain.Result{Reason: transportReason(err, ctx)}, retryable: true, outage: true,
			rtt: d.cfg.Clock.Now().Sub(start)}
	}
	defer resp.Body.Close()
	ar := attemptResult{
		signals:  pacing.ParseSignals(resp.StatusCode, resp.Header, d.cfg.Clock.Now()),
		observed: true,
	}
	body, truncated, readErr := readLimited(resp.Body, resp.ContentLength, d.cfg.MaxResponseBytes)
	ar.rtt = d.cfg.Clock.Now().Sub(start)
	ar.result = &domain.Result{
		ResponseStatus: resp.StatusCode,
		Body:           body,
		BodyTruncated:  truncated,
		ContentType:    resp.Header.Get("Content-Type"),
	}
	switch {
	case readErr != nil:
		ar.result.Reason = "reading response body: " + transportReason(readErr, ctx)
		ar.retryable, ar.outage = true, true
	case resp.StatusCode >= 500:
		ar.result.Reason = fmt.Sprintf("upstream returned %d", resp.StatusCode)
		ar.retryable, ar.outage = true, true
	}
	return ar
}

// Exchange sends j's request to target once and returns the response for
// the caller to read and close: the one way a job's request goes out (lanes
// read it through send; the edge proxy relays it as it arrives). ctx bounds
// the exchange and carries j's tenant's destination policy to the Doer;
// flowRate is the load-header rate; traceparent, when set, continues the
// job's trace (with its tracestate). An error is either the destination
// rules refusing the connection (*domain.DestinationDeniedError), a request
// that could not be built from the job, or a transport error.
func (d *Dispatcher) Exchange(ctx context.Context, j *domain.Job, target string, flowRate []string, traceparent string) (*http.Response, error) {
	req, err := buildRequest(d.policyCtx(ctx, j), j, target)
	if err != nil {
		return nil, &requestError{err}
	}
	setTrace(req, traceparent, j.TraceState)
	return d.do(req, flowRate)
}

// deliveryHeaders is about how many headers a webhook delivery carries:
// Content-Type, trace context, the load headers in both namespaces, the
// ORCA format, the Standard Webhooks three and L8's.
const deliveryHeaders = 3 + len(loadHeaders)*3 + 1 + 3 + 4

// jsonContentType is the Content-Type of every webhook delivery, shared
// read-only.
var jsonContentType = []string{"application/json"}

// setTrace puts the W3C Trace Context headers on req: traceparent replaces
// any the job's own headers carried, since it is the one that continues
// the trace; tracestate goes with it.
func setTrace(req *http.Request, traceparent, tracestate string) {
	if traceparent == "" {
		return
	}
	req.Header["Traceparent"] = []string{traceparent}
	if tracestate != "" {
		req.Header["Tracestate"] = []string{tracestate}
	} else {
		delete(req.Header, "Tracestate")
	}
}

// do adds the load headers to req and sends it.
func (d *Dispatcher) do(req *http.Request, flowRate []string) (*http.Response, error) {
	d.decorate(req, flowRate)
	return d.cfg.Doer.Do(req)
}

// requestError is a job whose request could not be built (a URL or header
// the client refuses).
type requestError struct{ err error }

func (e *requestError) Error() string { return "building request: " + e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// Headers Aquifer adds to every outbound request (BEHAVIOR.md §12.1, §13).
const (
	hdrORCAFormat = "Endpoint-Load-Metrics-Format"
	orcaFormat    = "text" // lower case: Triton accepts only this; vLLM compares case-insensitively
)

var loadHeaders = [...][3]string{
	{"X-Aqueduct-Total-Jobs", "X-Aqueduct-Queue-Depth", "X-Aqueduct-Flow-Rate"},
	{"X-Aquifer-Total-Jobs", "X-Aquifer-Queue-Depth", "X-Aquifer-Flow-Rate"},
}

// orcaFormatValue is shared read-only by every request.
var orcaFormatValue = []string{orcaFormat}

// decorate adds the load headers (in both namespaces) and the ORCA format
// request, unless the job set that one itself. The values are preformatted
// slices shared by every request: net/http only reads them.
func (d *Dispatcher) decorate(req *http.Request, flowRate []string) {
	l := d.load.Snapshot()
	for _, names := range loadHeaders {
		req.Header[names[0]] = l.TotalText
		req.Header[names[1]] = l.DepthText
		req.Header[names[2]] = flowRate
	}
	if _, ok := req.Header[hdrORCAFormat]; !ok {
		req.Header[hdrORCAFormat] = orcaFormatValue
	}
}

// policyCtx returns ctx carrying the destination policy of j's tenant
// (the global policy applies otherwise).
func (d *Dispatcher) policyCtx(ctx context.Context, j *domain.Job) context.Context {
	return domain.WithDestinationPolicy(ctx, d.tenants.Policy(domain.TenantOfJob(j)))
}

// buildRequest makes the outbound request for one attempt of j to target.
func buildRequest(ctx context.Context, j *domain.Job, target string) (*http.Request, error) {
	var body io.Reader
	if len(j.Body) > 0 {
		body = bytes.NewReader(j.Body)
	}
	req, err := http.NewRequestWithContext(ctx, j.Method, target, body)
	if err != nil {
		return nil, err
	}
	// Room for the job's headers and the ones decorate and setTrace add,
	// and one backing array for all the job's values.
	req.Header = make(http.Header, len(j.Headers)+len(loadHeaders)*3+3)
	values := make([]string, len(j.Headers))
	i := 0
	for k, v := range j.Headers {
		k = http.CanonicalHeaderKey(k)
		if k == "Host" {
			req.Host = v
			continue
		}
		values[i] = v
		req.Header[k] = values[i : i+1 : i+1]
		i++
	}
	return req, nil
}

// transportReason says why an exchange failed without a response: the
// operation and the address (never the URL, see domain.WithoutURL), prefixed with
// "request timed out: " when the attempt's deadline passed.
func transportReason(err error, ctx context.Context) string {
	msg := domain.WithoutURL(err).Error()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "request timed out: " + msg
	}
	return msg
}

// readLimited reads up to limit bytes of r. If there is more, it reports
// truncation and drains a bounded amount so the connection can be reused.
// size is the announced Content-Length (-1 if unknown); it sizes the buffer.
func readLimited(r io.Reader, size, limit int64) ([]byte, bool, error) {
	var body []byte
	var err error
	if size >= 0 && size <= limit {
		body = make([]byte, size+1)
		var n int
		n, err = io.ReadFull(r, body)
		body = body[:n]
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			err = nil
		} else if err == nil {
			// The server sent more than it announced; keep reading to the limit.
			var rest []byte
			rest, err = io.ReadAll(io.LimitReader(r, limit+1-int64(len(body))))
			body = append(body, rest...)
		}
	} else {
		body, err = io.ReadAll(io.LimitReader(r, limit+1))
	}
	if err != nil {
		return body, false, err
	}
	if int64(len(body)) <= limit {
		return body, false, nil
	}
	_, _ = io.CopyN(io.Discard, r, DrainLimit)
	return body[:limit], true, nil
}

// markInFlightLater records the attempt in the store only if it is still
// Running after PersistInFlightAfter. This instance knows what it is running
// (Service.Get reports it); the store copy exists for attempts long enough to
// matter to the stale-job sweep and to other readers, and skipping it for
// quick attempts saves two writes per job. The returned func cancels it.
func (d *Dispatcher) markInFlightLater(j *domain.Job, at time.Time) (stop func()) {
	id, seq := j.ID, j.Seq
	mark := func() {
		err := d.cfg.Store.MarkInFlight(d.runCtx, &ports.MarkInFlightParams{ID: id, Seq: seq, At: at})
		switch {
		case err == nil:
			d.recordedInFlight(id)
		case d.runCtx.Err() == nil:
			d.log.Warn("mark in flight failed", zap.String("job_id", string(id)), zap.Error(err))
		}
	}
	if d.cfg.PersistInFlightAfter < 0 {
		mark()
		return func() {}
	}
	t := d.cfg.Clock.AfterFunc(d.cfg.PersistInFlightAfter, mark)
	return func() { t.Stop() }
}

// finish records j's terminal status and result, makes its webhook delivery
// due in the receiver's lane in the same transaction, and tells subscribers.
// A failed write is retried until it commits (persist): the job stays
// executing meanwhile, so it is not sent again.
func (d *Dispatcher) finish(j *domain.Job, status domain.Status, attempts int, res *domain.Result) {
	err := persist(d.loopCtx, d.cfg.Clock, d.log, "job result", j.ID, func(ctx context.Context) error {
		return d.CommitFinish(ctx, j, status, attempts, res)
	})
	if errors.Is(err, domain.ErrNotFound) {
		d.log.Info("job vanished before it finished (expired)", zap.String("job_id", string(j.ID)))
	}
}

// CommitFinish records j's end in the store, tells subscribers, and hands a
// due webhook delivery to the receiver's lane.
func (d *Dispatcher) CommitFinish(ctx context.Context, j *domain.Job, status domain.Status, attempts int, res *domain.Result) error {
	if res == nil {
		res = &domain.Result{}
	}
	now := d.cfg.Clock.Now()
	var deliverIn domain.QueueKey
	if j.WebhookURL != "" {
		if u, ok := domain.UpstreamOf(j.WebhookURL); ok {
			deliverIn = domain.SharedQueue(u)
		}
	}
	readySeq, err := d.cfg.Store.Finish(ctx, &ports.FinishParams{
		ID: j.ID, Seq: j.Seq, Status: status, Attempts: attempts, Result: res, Now: now, DeliverIn: deliverIn,
		History: j.History, Retention: d.Retention(status),
	})
	if err != nil {
		return err
	}
	// The store has the job's end: from here a copy of it that is ready
	// again (an operator's retry, which anyone told of the end below may
	// ask for at once) is a new run, not a second copy of this attempt —
	// the lane refuses a job still marked executing, and would drop it.
	d.EndDispatch(j.ID)
	ev := domain.EventCompleted
	if status == domain.StatusFailed {
		ev = domain.EventFailed
	}
	d.cfg.Metrics.JobFinished(string(j.Upstream()), string(status))
	d.tenants.Finished(domain.TenantOfJob(j))
	d.events.Publish(domain.Event{Type: ev, JobID: j.ID, Attempt: attempts, Result: res})
	if readySeq > 0 {
		// Hand the delivery to the receiver's lane. A copy: the lane that ran
		// the dispatch still identifies j by its old ReadySeq.
		next := *j
		next.Status, next.Attempts, next.Result, next.UpdatedAt = status, attempts, res, now
		next.ReadyQueue, next.ReadySeq = deliverIn, readySeq
		next.Delivery = &domain.Delivery{Status: domain.DeliveryPending}
		d.Offer(&next)
	}
	return nil
}

// finishDelivery records the end of j's webhook delivery. A failed write is
// retried until it commits (persist), so the webhook is not sent again.
func (d *Dispatcher) finishDelivery(j *domain.Job, delivered bool, attempts int, res *domain.Result) {
	if res == nil {
		res = &domain.Result{}
	}
	p := &ports.FinishDeliveryParams{
		ID: j.ID, Seq: j.Seq, Delivered: delivered, Attempts: attempts, Response: res.ResponseStatus,
		Reason: res.Reason, Retention: d.Retention(j.Status), Now: d.cfg.Clock.Now(),
	}
	err := persist(d.loopCtx, d.cfg.Clock, d.log, "webhook delivery", j.ID, func(ctx context.Context) error {
		return d.cfg.Store.FinishDelivery(ctx, p)
	})
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		return // stopping: the delivery is still pending in the store and goes out after restart
	}
	if u, ok := domain.UpstreamOf(j.WebhookURL); ok {
		if delivered {
			d.cfg.Metrics.WebhookDelivered(string(u))
		} else {
			d.cfg.Metrics.WebhookFailed(string(u))
		}
	}
}

// Backoff between tries of a write of durable state (persist): 50 ms,
// doubling, at most 5 s apart.
const (
	persistBackoff    = 50 * time.Millisecond
	persistMaxBackoff = 5 * time.Second
)

// persist records state this process already holds in memory — an
// attempt's result, a retry, a delivery's outcome — by running write until
// it commits, reports domain.ErrNotFound (the job is gone: expired and
// purged), or stop ends (the dispatcher is stopping). Between tries it waits
// on clock, 50 ms doubling to 5 s. It returns write's last error: nil,
// ErrNotFound, or the failure it gave up on.
//
// A failed write is not dropped: the store would keep the job ready (or
// in_flight) and, since this process still runs it, nothing would bring it
// back before the stale sweep. The caller holds the job as executing while
// persist runs, so it is not dispatched again meanwhile. When stop ends
// first the store still says ready or in_flight, and the next start runs
// the job again. Each try runs with stop's values but not its
// cancellation: a commit under way is not abandoned.
func persist(stop context.Context, clock ports.Clock, log *zap.Logger, what string, id domain.JobID, write func(context.Context) error) error {
	ctx := context.WithoutCancel(stop)
	wait := persistBackoff
	for tries := 1; ; tries++ {
		err := write(ctx)
		switch {
		case err == nil:
			if tries > 1 {
				log.Info(what+" recorded after the store failed", zap.String("job_id", string(id)), zap.Int("tries", tries))
			}
			return nil
		case errors.Is(err, domain.ErrNotFound), errors.Is(err, domain.ErrClosed):
			return err
		case stop.Err() != nil:
			log.Warn(what+" not recorded: stopping; the job runs again after restart", zap.String("job_id", string(id)), zap.Int("tries", tries), zap.Error(err))
			return err
		case tries == 1:
			log.Warn(what+" could not be recorded; retrying", zap.String("job_id", string(id)), zap.Error(err))
		default:
			log.Debug(what+" could not be recorded; retrying", zap.String("job_id", string(id)), zap.Int("tries", tries), zap.Error(err))
		}
		t := clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-stop.Done():
			t.Stop()
			log.Warn(what+" not recorded: stopping; the job runs again after restart", zap.String("job_id", string(id)), zap.Int("tries", tries), zap.Error(err))
			return err
		}
		wait = min(2*wait, persistMaxBackoff)
	}
}
