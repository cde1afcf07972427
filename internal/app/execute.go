package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// drainLimit is how much of an over-long response body is read and discarded
// so the connection can be reused; beyond it the connection is closed.
const drainLimit = 256 << 10

type outcomeKind int

const (
	outcomeDone      outcomeKind = iota // this piece of work is over (recorded, or the job vanished)
	outcomeRetry                        // recorded as failed-but-retryable; run again at retryAt
	outcomeAbandoned                    // shutdown aborted the attempt; the store still says "ready"
)

// outcome is what an attempt goroutine reports back to its lane.
type outcome struct {
	job     *domain.Job
	kind    outcomeKind
	retryAt time.Time
}

// attemptResult is what one HTTP exchange produced.
type attemptResult struct {
	result    *domain.Result
	retryable bool
}

// startAttempt runs one attempt of j's next action in its own goroutine and
// reports the outcome to l.
func (d *dispatcher) startAttempt(l *lane, j *domain.Job) {
	dispatching := j.Phase() == domain.PhaseDispatch
	if dispatching {
		d.markExecuting(j.ID, true)
	}
	d.attemptsWG.Add(1)
	d.workers.run(func() {
		defer d.attemptsWG.Done()
		var o *outcome
		if dispatching {
			o = d.dispatchAttempt(j)
			d.markExecuting(j.ID, false)
		} else {
			o = d.deliverAttempt(j)
		}
		select {
		case l.done <- o:
		case <-l.quit: // the lane stopped; its state is gone anyway
		}
	})
}

// dispatchAttempt sends j's request once and records what came of it. A
// panic anywhere in here fails this job only; the lane keeps going.
func (d *dispatcher) dispatchAttempt(j *domain.Job) (o *outcome) {
	n := j.Attempts + 1
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("panic while running job", zap.String("job_id", string(j.ID)), zap.Any("panic", p), zap.Stack("stack"))
			d.finish(j, domain.StatusFailed, n, &domain.Result{Reason: "internal panic"})
			o = &outcome{job: j, kind: outcomeDone}
		}
	}()
	stopMark := d.markInFlightLater(j, d.cfg.Clock.Now())
	if n == 1 {
		d.broker.Publish(domain.Event{Type: domain.EventDispatching, JobID: j.ID, Attempt: n})
	}
	ar := d.send(func(ctx context.Context) (*http.Request, error) { return buildRequest(ctx, j, j.URL) })
	stopMark()
	if d.runCtx.Err() != nil {
		return &outcome{job: j, kind: outcomeAbandoned}
	}
	if ar.retryable && n < d.cfg.Retry.Attempts {
		err := d.cfg.Store.Requeue(context.WithoutCancel(d.runCtx), &ports.RequeueParams{
			ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDispatch, Attempts: n, Now: d.cfg.Clock.Now()})
		if errors.Is(err, domain.ErrNotFound) {
			return &outcome{job: j, kind: outcomeDone} // expired and purged meanwhile
		}
		if err != nil {
			d.log.Warn("recording a retry failed; retrying from memory", zap.String("job_id", string(j.ID)), zap.Error(err))
		}
		j.Attempts = n
		return &outcome{job: j, kind: outcomeRetry, retryAt: d.cfg.Clock.Now().Add(d.cfg.Retry.Delay(n))}
	}
	status := domain.StatusCompleted
	if ar.retryable {
		status = domain.StatusFailed
	}
	d.finish(j, status, n, ar.result)
	return &outcome{job: j, kind: outcomeDone}
}

// deliverAttempt POSTs j's result to its webhook_url once. Retries follow
// the same policy as dispatch: 5xx and transport errors only.
func (d *dispatcher) deliverAttempt(j *domain.Job) (o *outcome) {
	n := j.Delivery.Attempts + 1
	log := d.log.With(zap.String("job_id", string(j.ID)))
	defer func() {
		if p := recover(); p != nil {
			log.Error("panic while delivering a webhook", zap.Any("panic", p), zap.Stack("stack"))
			d.finishDelivery(j, false, n, &domain.Result{Reason: "internal panic"})
			o = &outcome{job: j, kind: outcomeDone}
		}
	}()
	body, err := json.Marshal(NewWebhookPayload(j.ID, j.Status, j.Result))
	if err != nil {
		d.finishDelivery(j, false, n, &domain.Result{Reason: "encoding payload: " + err.Error()})
		return &outcome{job: j, kind: outcomeDone}
	}
	ar := d.send(func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.WebhookURL, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return req, err
	})
	if d.runCtx.Err() != nil {
		return &outcome{job: j, kind: outcomeAbandoned}
	}
	if ar.retryable && n < d.cfg.Retry.Attempts {
		err := d.cfg.Store.Requeue(context.WithoutCancel(d.runCtx), &ports.RequeueParams{
			ID: j.ID, Seq: j.Seq, Phase: domain.PhaseDeliver, Attempts: n,
			Response: ar.result.ResponseStatus, Reason: ar.result.Reason, Now: d.cfg.Clock.Now()})
		if errors.Is(err, domain.ErrNotFound) {
			return &outcome{job: j, kind: outcomeDone}
		}
		if err != nil {
			log.Warn("recording a webhook retry failed; retrying from memory", zap.Error(err))
		}
		j.Delivery.Attempts = n
		return &outcome{job: j, kind: outcomeRetry, retryAt: d.cfg.Clock.Now().Add(d.cfg.Retry.Delay(n))}
	}
	if ar.retryable {
		log.Warn("webhook delivery failed; retries spent", zap.Int("attempts", n), zap.String("reason", ar.result.Reason))
	}
	d.finishDelivery(j, !ar.retryable, n, ar.result)
	return &outcome{job: j, kind: outcomeDone}
}

// send performs one HTTP exchange and classifies it: 5xx and transport
// errors are retryable, any other response is final.
func (d *dispatcher) send(build func(ctx context.Context) (*http.Request, error)) attemptResult {
	ctx, cancel := context.WithTimeout(d.runCtx, d.cfg.RequestTimeout)
	defer cancel()
	req, err := build(ctx)
	if err != nil {
		return attemptResult{result: &domain.Result{Reason: fmt.Sprintf("building request: %v", err)}, retryable: true}
	}
	resp, err := d.cfg.Doer.Do(req)
	if err != nil {
		return attemptResult{result: &domain.Result{Reason: transportReason(err, ctx)}, retryable: true}
	}
	defer resp.Body.Close()
	body, truncated, readErr := readLimited(resp.Body, resp.ContentLength, d.cfg.MaxResponseBytes)
	res := &domain.Result{
		ResponseStatus: resp.StatusCode,
		Body:           body,
		BodyTruncated:  truncated,
		ContentType:    resp.Header.Get("Content-Type"),
	}
	if readErr != nil {
		res.Reason = "reading response body: " + transportReason(readErr, ctx)
		return attemptResult{result: res, retryable: true}
	}
	if resp.StatusCode >= 500 {
		res.Reason = fmt.Sprintf("upstream returned %d", resp.StatusCode)
		return attemptResult{result: res, retryable: true}
	}
	return attemptResult{result: res}
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
	for k, v := range j.Headers {
		if http.CanonicalHeaderKey(k) == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return req, nil
}

func transportReason(err error, ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "request timed out: " + err.Error()
	}
	return err.Error()
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
	_, _ = io.CopyN(io.Discard, r, drainLimit)
	return body[:limit], true, nil
}

// markInFlightLater records the attempt in the store only if it is still
// running after PersistInFlightAfter. This instance knows what it is running
// (Service.Get reports it); the store copy exists for attempts long enough to
// matter to the stale-job sweep and to other readers, and skipping it for
// quick attempts saves two writes per job. The returned func cancels it.
func (d *dispatcher) markInFlightLater(j *domain.Job, at time.Time) (stop func()) {
	id, seq := j.ID, j.Seq
	mark := func() {
		if err := d.cfg.Store.MarkInFlight(d.runCtx, &ports.MarkInFlightParams{ID: id, Seq: seq, At: at}); err != nil && d.runCtx.Err() == nil {
			d.log.Warn("mark in flight failed", zap.String("job_id", string(id)), zap.Error(err))
		}
	}
	if d.cfg.PersistInFlightAfter < 0 {
		mark()
		return func() {}
	}
	t := time.AfterFunc(d.cfg.PersistInFlightAfter, mark)
	return func() { t.Stop() }
}

// finish records j's terminal status and result, makes its webhook delivery
// due in the receiver's lane in the same transaction, and tells subscribers.
func (d *dispatcher) finish(j *domain.Job, status domain.Status, attempts int, res *domain.Result) {
	if res == nil {
		res = &domain.Result{}
	}
	now := d.cfg.Clock.Now()
	var deliverIn domain.LaneKey
	if j.WebhookURL != "" {
		if u, ok := domain.UpstreamOf(j.WebhookURL); ok {
			deliverIn = domain.SharedLane(u)
		}
	}
	readySeq, err := d.cfg.Store.Finish(context.WithoutCancel(d.runCtx), &ports.FinishParams{
		ID: j.ID, Seq: j.Seq, Status: status, Attempts: attempts, Result: res, Now: now, DeliverIn: deliverIn,
	})
	switch {
	case errors.Is(err, domain.ErrNotFound):
		d.log.Info("job vanished before it finished (expired)", zap.String("job_id", string(j.ID)))
		return
	case err != nil:
		// The job stays ready in the store; it runs again after a restart or
		// when the stale sweep finds it.
		d.log.Error("recording job result failed; it will run again", zap.String("job_id", string(j.ID)), zap.Error(err))
		return
	}
	ev := domain.EventCompleted
	if status == domain.StatusFailed {
		ev = domain.EventFailed
	}
	d.broker.Publish(domain.Event{Type: ev, JobID: j.ID, Attempt: attempts, Result: res})
	if readySeq > 0 {
		// Hand the delivery to the receiver's lane. A copy: the lane that ran
		// the dispatch still identifies j by its old ReadySeq.
		next := *j
		next.Status, next.Attempts, next.Result, next.UpdatedAt = status, attempts, res, now
		next.ReadyLane, next.ReadySeq = deliverIn, readySeq
		next.Delivery = &domain.Delivery{Status: domain.DeliveryPending}
		d.offer(&next)
	}
}

// finishDelivery records the end of j's webhook delivery.
func (d *dispatcher) finishDelivery(j *domain.Job, delivered bool, attempts int, res *domain.Result) {
	if res == nil {
		res = &domain.Result{}
	}
	err := d.cfg.Store.FinishDelivery(context.WithoutCancel(d.runCtx), &ports.FinishDeliveryParams{
		ID: j.ID, Seq: j.Seq, Delivered: delivered, Attempts: attempts, Response: res.ResponseStatus,
		Reason: res.Reason, Now: d.cfg.Clock.Now(),
	})
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		d.log.Error("recording webhook delivery failed; it will be sent again", zap.String("job_id", string(j.ID)), zap.Error(err))
	}
}
