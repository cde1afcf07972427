package dispatch

import (
	"context"
	"sort"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/pacing"
)

// What operators see of and do to the dispatcher: each attempt's record in
// its job's history, the dead-letter retention, lane pauses, and a lane's
// detail (its pace and why).

// attemptRecord is one dispatch attempt as its job's history keeps it.
func attemptRecord(start, end time.Time, ar attemptResult, member string) domain.Attempt {
	a := domain.Attempt{At: start, Duration: end.Sub(start), Status: ar.status(), Member: member, Signal: anySignal(ar.signals)}
	if !ar.observed || ar.result.ResponseStatus == 0 {
		a.Error = ar.result.Reason
	}
	return a
}

// loadSignal names the load signal in s that sets a lane's pace.
func loadSignal(s pacing.Signals) string {
	if s.RPS > 0 || s.MaxConcurrent > 0 {
		return domain.SignalAqueduct
	}
	if s.HasUtilization {
		return domain.SignalORCA
	}
	if s.RetryAfter > 0 {
		return domain.SignalRetryAfter
	}
	return ""
}

// anySignal names the pacing signal a response carried, if any.
func anySignal(s pacing.Signals) string {
	if n := loadSignal(s); n != "" {
		return n
	}
	if s.ResetIn > 0 {
		return domain.SignalRateLimit
	}
	return ""
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Retention is how long a job that finishes with status is kept:
// FailedRetention for failed jobs when set, the status's TTL otherwise
// (0 tells the store to use it).
func (d *Dispatcher) Retention(status domain.Status) time.Duration {
	if status == domain.StatusFailed {
		return d.cfg.FailedRetention
	}
	return 0
}

// SetPauses replaces the set of paused destinations (as the store holds
// it) and wakes the lanes whose pause ended.
func (d *Dispatcher) SetPauses(ps []domain.LanePause) {
	next := make(map[domain.UpstreamKey]domain.LanePause, len(ps))
	for _, p := range ps {
		next[p.Upstream] = p
	}
	var prev map[domain.UpstreamKey]domain.LanePause
	if len(next) == 0 {
		if old := d.pauses.Swap(nil); old != nil {
			prev = *old
		}
	} else if old := d.pauses.Swap(&next); old != nil {
		prev = *old
	}
	for u := range prev {
		if _, still := next[u]; !still {
			d.wake(u)
		}
	}
}

// wake has u's lane, if it has one, look at its work again.
func (d *Dispatcher) wake(u domain.UpstreamKey) {
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	if l != nil {
		l.poke()
	}
}

// Paused returns u's pause, if an operator paused it.
func (d *Dispatcher) Paused(u domain.UpstreamKey) (domain.LanePause, bool) {
	m := d.pauses.Load()
	if m == nil {
		return domain.LanePause{}, false
	}
	p, ok := (*m)[u]
	return p, ok
}

func (d *Dispatcher) isPaused(u domain.UpstreamKey) bool {
	m := d.pauses.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[u]
	return ok
}

// Pauses returns the paused destinations, in upstream order.
func (d *Dispatcher) Pauses() []domain.LanePause {
	m := d.pauses.Load()
	if m == nil {
		return nil
	}
	out := make([]domain.LanePause, 0, len(*m))
	for _, p := range *m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Upstream < out[j].Upstream })
	return out
}

// LaneDetail is one live lane as an operator sees it: its stats, why it
// runs at its pace, and each of its queues.
type LaneDetail struct {
	LaneStats
	// PacedBy is the load signal that last moved the pace (domain.Signal*),
	// "" while the lane runs at its ceiling; PacedAt is when.
	PacedBy string
	PacedAt time.Time
	// HeldUntil is the end of a hold a 503 Retry-After put on the whole
	// lane (zero: none, or over).
	HeldUntil   time.Time
	LastError   string // the last failed attempt's reason
	LastErrorAt time.Time
	Queues      []QueueDetail
}

// QueueDetail is one queue of a lane (the shared queue or a tenant's).
type QueueDetail struct {
	Queue    domain.QueueKey
	Buffered int // in memory: the window and retry waits
	Running  int
	// PausedUntil and PausedBy: the destination asked this queue to wait
	// (a 429 with Retry-After, or a rate limit's reset).
	PausedUntil time.Time
	PausedBy    string
	// CapRPS and CapMaxConcurrent are the tenant's configured cap on the
	// destination (0: none).
	CapRPS           float64
	CapMaxConcurrent int
	// OldestBuffered is when the oldest work the queue holds in memory
	// entered its phase (zero: none held).
	OldestBuffered time.Time
	// Budget is the rate-limit window the queue paces to (nil: none known,
	// or budget pacing off).
	Budget *QueueBudget
}

// QueueBudget is a queue's rate-limit window as budget pacing sees it.
type QueueBudget struct {
	// Left is the estimate of the requests left (reported remaining, less
	// what was in flight and started since), Limit the window's size.
	Left, Limit float64
	ResetAt     time.Time
	Source      string  // the header family: github, openai or ietf
	RPS         float64 // the pace the budget allows now
	Holding     bool    // only the reserve is left: nothing starts until the reset
}

// LaneDetail returns u's lane detail, read on the lane's goroutine; false
// when u has no lane in this process (it is idle, or held by another).
func (d *Dispatcher) LaneDetail(ctx context.Context, u domain.UpstreamKey) (LaneDetail, bool) {
	d.mu.RLock()
	l := d.lanes[u]
	d.mu.RUnlock()
	if l == nil {
		return LaneDetail{}, false
	}
	got := make(chan LaneDetail, 1)
	select {
	case l.ctl <- func() { got <- l.detail(d.cfg.Clock.Now()) }:
	case <-l.quit:
		return LaneDetail{}, false
	case <-ctx.Done():
		return LaneDetail{}, false
	}
	select {
	case det := <-got:
		return det, true
	case <-l.quit:
	case <-ctx.Done():
	}
	return LaneDetail{}, false
}

// detail runs on the lane's goroutine.
func (l *lane) detail(now time.Time) LaneDetail {
	l.modeAt = time.Time{} // the mode as it is now, not as last published
	l.publishStats(now)
	det := LaneDetail{LaneStats: l.stats(), LastError: l.lastError, LastErrorAt: l.lastErrorAt}
	if ceilRPS, ceilConc := l.pace.Ceiling(); l.pace.RPS() < ceilRPS || l.pace.MaxConcurrent() < ceilConc {
		det.PacedBy, det.PacedAt = l.pacedBy, l.pacedAt
	}
	if now.Before(l.heldUntil) {
		det.HeldUntil = l.heldUntil
	}
	for _, q := range l.order {
		qd := QueueDetail{Queue: q.key, Buffered: q.buffered(), Running: q.running}
		if now.Before(q.pausedUntil) {
			qd.PausedUntil, qd.PausedBy = q.pausedUntil, q.pausedBy
		}
		if q.limiter != nil {
			qd.CapRPS, qd.CapMaxConcurrent = q.limiter.Rate(), q.maxRunning
		}
		if q.budget != nil {
			if st := q.budget.State(now); st.Active {
				qd.Budget = &QueueBudget{Left: st.Left, Limit: st.Limit, ResetAt: now.Add(st.ResetIn), Source: st.Source,
					RPS: st.RPS, Holding: st.Holding}
			}
		}
		for c := range q.streams {
			for _, j := range q.streams[c].window {
				if at := j.PhaseStart(); qd.OldestBuffered.IsZero() || at.Before(qd.OldestBuffered) {
					qd.OldestBuffered = at
				}
			}
		}
		for _, dl := range q.delayed {
			if at := dl.job.PhaseStart(); qd.OldestBuffered.IsZero() || at.Before(qd.OldestBuffered) {
				qd.OldestBuffered = at
			}
		}
		det.Queues = append(det.Queues, qd)
	}
	sort.Slice(det.Queues, func(i, j int) bool { return det.Queues[i].Queue < det.Queues[j].Queue })
	return det
}

// Retried hands a job an operator re-queued to its lane: it is ready again
// in its own queue under a new ReadySeq. If it was cancelled lately, copies
// of its cancelled run that a lane may still read stay cancelled; the
// retry's copy runs.
func (d *Dispatcher) Retried(j *domain.Job) {
	d.execMu.Lock()
	if m, ok := d.canceled[j.ID]; ok {
		m.retrySeq = j.ReadySeq
		d.canceled[j.ID] = m
	}
	d.execMu.Unlock()
	d.Offer(j)
}

// RetriedInBulk is Retried for a job a bulk operation re-queued, which the
// lane reads from the store (Reread) rather than being handed: its new
// ReadySeq is above lastSeq, the one the operation saw before the retry, so
// a cancellation remembered for it covers only copies from before.
func (d *Dispatcher) RetriedInBulk(id domain.JobID, lastSeq int64) {
	d.execMu.Lock()
	defer d.execMu.Unlock()
	if m, ok := d.canceled[id]; ok {
		m.retrySeq = lastSeq + 1
		d.canceled[id] = m
	}
}

// CanceledInBulk tells subscribers, metrics and quotas that a bulk cancel
// ended j (claimed with ClaimCancel; the store has recorded it), and has
// its lane forget it. Its webhook delivery, if any, is due in the store:
// Reread the receiver's queue.
func (d *Dispatcher) CanceledInBulk(j *domain.Job) {
	res := &domain.Result{Reason: domain.ReasonCanceled}
	d.cfg.Metrics.JobFinished(string(j.Upstream()), string(domain.StatusFailed))
	d.tenants.Finished(domain.TenantOfJob(j))
	d.events.Publish(domain.Event{Type: domain.EventFailed, JobID: j.ID, Attempt: j.Attempts, Result: res})
	ctx, cancel := context.WithTimeout(d.loopCtx, time.Second)
	defer cancel()
	d.dropFromLane(ctx, j)
}

// Reread has the lane of queue q read it again from the start: the store
// made work ready there that no lane was handed (a bulk operation's jobs).
// The holder of the lane hears of it when another process dispatches it.
func (d *Dispatcher) Reread(q domain.QueueKey) {
	if d.owner.Holds(q.Upstream()) {
		d.Notify(q, true)
		return
	}
	d.owner.WorkElsewhere(&domain.Job{ReadyQueue: q, ReadySeq: 1}) // from the start
}
