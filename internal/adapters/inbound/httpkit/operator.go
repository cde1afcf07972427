package httpkit

import (
	"math"
	"strings"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// The wire shapes of what operators see: a job's attempt history, a job in a
// listing, the per-status counts, bulk operations and lanes. Every time is
// Unix milliseconds, as in JobView, and is left out when it is not set.

// AttemptView is one dispatch attempt of a job's history.
type AttemptView struct {
	At         int64   `json:"at" jsonschema:"When the request was sent: Unix time in milliseconds."`
	DurationMS float64 `json:"duration_ms" jsonschema:"How long the attempt took, until the answer or the error."`
	Status     int     `json:"status,omitempty" jsonschema:"The destination's HTTP status (absent when no answer came)."`
	Error      string  `json:"error,omitempty" jsonschema:"The transport error or timeout, when no answer came."`
	Signal     string  `json:"signal,omitempty" jsonschema:"The pacing signal the answer carried: x-aqueduct, orca, retry-after or rate-limit."`
	Member     string  `json:"member,omitempty" jsonschema:"The pool member that served it (pool jobs only)."`
}

// NewAttemptView renders one attempt.
func NewAttemptView(a domain.Attempt) AttemptView {
	return AttemptView{At: a.At.UnixMilli(), DurationMS: durationMS(a.Duration), Status: a.Status, Error: a.Error,
		Signal: a.Signal, Member: a.Member}
}

// durationMS is d in milliseconds, to the microsecond: a quick attempt on
// loopback takes well under a millisecond.
func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func historyView(h []domain.Attempt) []AttemptView {
	out := make([]AttemptView, len(h))
	for i, a := range h {
		out[i] = NewAttemptView(a)
	}
	return out
}

// JobSummary is a job as a listing shows it: the job view without the
// response body, plus the newest attempt of its history and how many the
// history holds.
type JobSummary struct {
	JobID            string            `json:"job_id"`
	Status           string            `json:"status" jsonschema:"queued, in_flight, completed or failed."`
	URL              string            `json:"url" jsonschema:"The target URL, secret query parameters redacted; empty for pool jobs."`
	Method           string            `json:"method"`
	CreatedAt        int64             `json:"created_at" jsonschema:"Unix time in milliseconds."`
	UpdatedAt        int64             `json:"updated_at" jsonschema:"Unix time in milliseconds."`
	Tenant           string            `json:"tenant,omitempty" jsonschema:"The API-key tenant the job belongs to (shown to operators)."`
	UserID           string            `json:"user_id"`
	PoolID           string            `json:"pool_id,omitempty"`
	WebhookURL       string            `json:"webhook_url,omitempty" jsonschema:"The webhook URL, secret query parameters redacted."`
	Headers          map[string]string `json:"headers,omitempty" jsonschema:"The request headers, secrets redacted."`
	Attempts         int               `json:"attempts" jsonschema:"Dispatch attempts in the current cycle."`
	ResponseStatus   *int              `json:"response_status,omitempty" jsonschema:"The upstream's HTTP status, once finished (0: no response was obtained)."`
	ContentType      string            `json:"content_type,omitempty"`
	Reason           string            `json:"reason,omitempty" jsonschema:"Why the job failed."`
	Webhook          *WebhookView      `json:"webhook,omitempty"`
	LastAttempt      *AttemptView      `json:"last_attempt,omitempty" jsonschema:"The newest entry of the job's attempt history."`
	AttemptsRecorded int               `json:"attempts_recorded" jsonschema:"How many attempts the job's history holds (at most 10)."`

	// When the job runs, as the job view shows it; a listing leaves the
	// normal priority out to stay compact.
	NotBefore string `json:"not_before,omitempty" jsonschema:"When the job becomes due (RFC 3339, UTC); omitted when it was due at once."`
	Scheduled bool   `json:"scheduled,omitempty" jsonschema:"True while the job waits for its not_before."`
	Deadline  string `json:"deadline,omitempty" jsonschema:"The latest time the job may be sent (RFC 3339, UTC)."`
	Priority  string `json:"priority,omitempty" jsonschema:"high or low; omitted for normal."`
}

// NewJobSummary renders j for a listing.
func NewJobSummary(j *domain.Job) JobSummary {
	v := NewJobView(j)
	s := JobSummary{JobID: v.JobID, Status: v.Status, URL: v.URL, Method: v.Method, CreatedAt: v.CreatedAt,
		UpdatedAt: v.UpdatedAt, Tenant: v.Tenant, UserID: v.UserID, PoolID: v.PoolID, WebhookURL: v.WebhookURL,
		Headers: v.Headers, Attempts: v.Attempts, ResponseStatus: v.ResponseStatus, ContentType: v.ContentType,
		Reason: v.Reason, Webhook: v.Webhook, AttemptsRecorded: len(j.History),
		NotBefore: v.NotBefore, Scheduled: v.Scheduled, Deadline: v.Deadline}
	if j.Priority != domain.PriorityNormal {
		s.Priority = v.Priority
	}
	if n := len(j.History); n > 0 {
		last := NewAttemptView(j.History[n-1])
		s.LastAttempt = &last
	}
	return s
}

// CountsView is how many jobs match a listing's filters in each status.
type CountsView struct {
	Queued    int64 `json:"queued"`
	InFlight  int64 `json:"in_flight"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

// NewCountsView renders a page's counts; nil (a later page) stays nil.
func NewCountsView(c map[domain.Status]int64) *CountsView {
	if c == nil {
		return nil
	}
	return &CountsView{Queued: c[domain.StatusQueued], InFlight: c[domain.StatusInFlight],
		Completed: c[domain.StatusCompleted], Failed: c[domain.StatusFailed]}
}

// FilterView is a bulk operation's filter, in the shape of the filter a
// POST /jobs/retry or /jobs/cancel takes (times as Unix milliseconds,
// which that filter accepts too), so it can be sent again as it is.
type FilterView struct {
	Status         []string `json:"status,omitempty"`
	Tenant         string   `json:"tenant,omitempty"`
	UserID         string   `json:"user_id,omitempty"`
	Destination    string   `json:"destination,omitempty"`
	PoolID         string   `json:"pool_id,omitempty"`
	CreatedAfter   int64    `json:"created_after,omitempty"`
	CreatedBefore  int64    `json:"created_before,omitempty"`
	ResponseStatus int      `json:"response_status,omitempty"`
	Q              string   `json:"q,omitempty"`
}

// NewFilterView renders a stored filter: user and pool ids without their
// tenant scope (the tenant is its own field).
func NewFilterView(f domain.JobFilter) FilterView {
	v := FilterView{Tenant: f.Tenant, Destination: string(f.Destination), ResponseStatus: f.ResponseStatus, Q: f.Q,
		CreatedAfter: unixMilli(f.CreatedAfter), CreatedBefore: unixMilli(f.CreatedBefore)}
	for _, s := range f.Statuses {
		v.Status = append(v.Status, string(s))
	}
	_, v.UserID = domain.Unscope(f.UserID)
	_, v.PoolID = domain.Unscope(f.PoolID)
	return v
}

// OperationView is a bulk retry or cancel and its progress.
type OperationView struct {
	ID        string     `json:"id"`
	Kind      string     `json:"kind" jsonschema:"retry or cancel."`
	State     string     `json:"state" jsonschema:"running, completed or failed."`
	Filter    FilterView `json:"filter"`
	Total     int64      `json:"total" jsonschema:"Jobs the filter selected when the operation began."`
	Processed int64      `json:"processed" jsonschema:"Jobs examined so far."`
	Changed   int64      `json:"changed" jsonschema:"Jobs re-queued or cancelled."`
	Skipped   int64      `json:"skipped" jsonschema:"Jobs examined but left alone: their state had moved on."`
	Progress  float64    `json:"progress" jsonschema:"processed / total, 0 to 1."`
	CreatedAt int64      `json:"created_at" jsonschema:"Unix time in milliseconds."`
	UpdatedAt int64      `json:"updated_at" jsonschema:"Unix time in milliseconds."`
	Error     string     `json:"error,omitempty"`
}

// NewOperationView renders op.
func NewOperationView(op *domain.Operation) OperationView {
	v := OperationView{ID: op.ID, Kind: string(op.Kind), State: string(op.State), Filter: NewFilterView(op.Filter),
		Total: op.Total, Processed: op.Processed, Changed: op.Changed, Skipped: op.Skipped,
		CreatedAt: op.CreatedAt.UnixMilli(), UpdatedAt: op.UpdatedAt.UnixMilli(), Error: op.Error}
	switch {
	case op.State == domain.OpCompleted:
		v.Progress = 1
	case op.Total > 0:
		v.Progress = min(float64(op.Processed)/float64(op.Total), 1)
	}
	return v
}

// LaneJSON is one destination as GET /lanes shows it.
type LaneJSON struct {
	Destination string   `json:"destination" jsonschema:"scheme://host:port, or pool:<pool_id>."`
	Ceiling     RateJSON `json:"ceiling" jsonschema:"The configured ceiling (a pool's: its members' live capacity)."`
	Pace        PaceJSON `json:"pace" jsonschema:"The pace now, and the signal that set it."`
	Mode        string   `json:"mode" jsonschema:"What holds the pace now: static, signalled, budget or adaptive."`
	ModeReason  string   `json:"mode_reason,omitempty" jsonschema:"Why, in words: e.g. budget: 37 of 100 left, resets in 6.2s (github), pacing 5.3 rps."`
	HeldUntil   int64    `json:"held_until,omitempty" jsonschema:"A 503 with Retry-After holds the whole lane until then (Unix ms)."`
	Backlog     int64    `json:"backlog" jsonschema:"Jobs to the destination waiting in the store (the caller's own, for a tenant)."`
	InFlight    int      `json:"in_flight"`
	Buffered    int      `json:"buffered" jsonschema:"Jobs this process holds in memory for the lane."`
	// OldestQueuedAt is when the oldest work waiting at a queue's head
	// entered its phase; its age is computed when the view is rendered.
	OldestQueuedAt         int64             `json:"oldest_queued_at,omitempty"`
	OldestQueuedAgeSeconds float64           `json:"oldest_queued_age_seconds,omitempty"`
	LastError              string            `json:"last_error,omitempty"`
	LastErrorAt            int64             `json:"last_error_at,omitempty"`
	AccountQueues          bool              `json:"account_queues"`
	Queues                 []QueueJSON       `json:"queues" jsonschema:"The lane's queues with work in memory (operators only)."`
	Paused                 *PauseJSON        `json:"paused" jsonschema:"An operator's pause, or null."`
	Circuit                app.CircuitHealth `json:"circuit"`
	Live                   bool              `json:"live" jsonschema:"This process has a lane for the destination now."`
	HeldBy                 string            `json:"held_by,omitempty" jsonschema:"The instance dispatching the lane, when that is another (cluster mode)."`
}

// RateJSON is a pace ceiling.
type RateJSON struct {
	RPS           float64 `json:"rps"`
	MaxConcurrent int     `json:"max_concurrent"`
}

// PaceJSON is a lane's pace now: PacedBy names the signal holding it below
// the ceiling ("" at the ceiling), Since when it last moved.
type PaceJSON struct {
	RPS           float64 `json:"rps"`
	MaxConcurrent int     `json:"max_concurrent"`
	PacedBy       string  `json:"paced_by,omitempty" jsonschema:"x-aqueduct, orca, retry-after, rate-limit or tenant-cap."`
	Since         int64   `json:"since,omitempty"`
}

// QueueJSON is one queue of a lane: the shared one, or a tenant's.
type QueueJSON struct {
	Queue            string  `json:"queue"`
	Buffered         int     `json:"buffered"`
	Running          int     `json:"running"`
	PausedUntil      int64   `json:"paused_until,omitempty" jsonschema:"The destination asked this queue to wait until then (Unix ms)."`
	PausedBy         string  `json:"paused_by,omitempty"`
	CapRPS           float64 `json:"cap_rps,omitempty" jsonschema:"The tenant's configured cap on the destination."`
	CapMaxConcurrent int     `json:"cap_max_concurrent,omitempty"`
	// Budget is the rate-limit window the queue paces to, when its answers
	// report one and budget pacing is on.
	Budget *QueueBudgetJSON `json:"budget,omitempty" jsonschema:"The rate-limit window the queue paces to (budget pacing)."`
}

// QueueBudgetJSON is a queue's rate-limit window as budget pacing sees it.
type QueueBudgetJSON struct {
	Left    float64 `json:"left" jsonschema:"Requests left: the reported remaining, less those in flight and started since."`
	Limit   float64 `json:"limit" jsonschema:"The window's size (reported, else the most seen remaining)."`
	ResetAt int64   `json:"reset_at" jsonschema:"When the window resets (Unix ms)."`
	Source  string  `json:"source" jsonschema:"github, openai or ietf."`
	RPS     float64 `json:"rps" jsonschema:"The pace the budget allows now: (left - reserve) / time to the reset."`
	Holding bool    `json:"holding,omitempty" jsonschema:"Only the reserve is left: nothing starts until the reset."`
}

// PauseJSON is an operator's pause of a lane.
type PauseJSON struct {
	Since  int64  `json:"since"`
	Reason string `json:"reason,omitempty"`
}

// NewLaneJSON renders v at now for the caller named caller (its tenant, ""
// when none): a pool lane of the caller's own shows as pool:<id>, the way
// the caller names it; another tenant's as pool:<tenant>/<id>.
func NewLaneJSON(v *app.LaneView, caller string, now time.Time) LaneJSON {
	out := LaneJSON{Destination: LaneName(v.Destination, caller),
		Ceiling: RateJSON{RPS: v.CeilingRPS, MaxConcurrent: v.CeilingMaxConcurrent},
		Pace:    PaceJSON{RPS: v.RPS, MaxConcurrent: v.MaxConcurrent, PacedBy: v.PacedBy, Since: unixMilli(v.PacedAt)},
		Mode:    v.Mode, ModeReason: v.ModeReason,
		HeldUntil: unixMilli(v.HeldUntil), Backlog: v.Backlog, InFlight: v.InFlight, Buffered: v.Buffered,
		OldestQueuedAt: unixMilli(v.OldestQueued), LastError: v.LastError, LastErrorAt: unixMilli(v.LastErrorAt),
		AccountQueues: v.AccountQueues, Queues: make([]QueueJSON, 0, len(v.Queues)), Circuit: circuitJSON(v.Circuit),
		Live: v.Live, HeldBy: v.HeldBy}
	if !v.OldestQueued.IsZero() {
		out.OldestQueuedAgeSeconds = max(math.Round(now.Sub(v.OldestQueued).Seconds()*1000)/1000, 0)
	}
	for _, q := range v.Queues {
		qj := QueueJSON{Queue: strings.ReplaceAll(string(q.Queue), "\x1f", "/"),
			Buffered: q.Buffered, Running: q.Running, PausedUntil: unixMilli(q.PausedUntil), PausedBy: q.PausedBy,
			CapRPS: q.CapRPS, CapMaxConcurrent: q.CapMaxConcurrent}
		if b := q.Budget; b != nil {
			qj.Budget = &QueueBudgetJSON{Left: b.Left, Limit: b.Limit, ResetAt: unixMilli(b.ResetAt), Source: b.Source,
				RPS: math.Round(b.RPS*1000) / 1000, Holding: b.Holding}
		}
		out.Queues = append(out.Queues, qj)
	}
	if p := v.Paused; p != nil {
		out.Paused = &PauseJSON{Since: p.At.UnixMilli(), Reason: p.Reason}
	}
	return out
}

// LaneName is how a destination is shown to the caller named caller.
func LaneName(u domain.UpstreamKey, caller string) string {
	pool, ok := strings.CutPrefix(string(u), "pool:")
	if !ok {
		return string(u)
	}
	owner, name := domain.Unscope(pool)
	if owner == "" || owner == caller {
		return "pool:" + name
	}
	return "pool:" + owner + "/" + name
}

// circuitJSON renders a lane's circuit exactly as /health's lanes[].circuit.
func circuitJSON(c app.CircuitStats) app.CircuitHealth {
	return app.CircuitHealth{State: c.State.String(), SinceMS: unixMilli(c.Since), NextProbeMS: unixMilli(c.NextProbe),
		ConsecutiveFailures: c.Failures, Probes: c.Probes, LastError: c.LastError}
}

// unixMilli is t in Unix milliseconds, 0 for the zero time (which the
// views leave out).
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
