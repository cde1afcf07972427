package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Status is the lifecycle state of a job.
type Status string

const (
	StatusQueued    Status = "queued"    // durable, waiting in its lane
	StatusInFlight  Status = "in_flight" // a dispatch attempt is running
	StatusCompleted Status = "completed" // an HTTP response that is not a retryable failure was obtained
	StatusFailed    Status = "failed"    // retries exhausted, or the job could not run
)

// Terminal reports whether no further transition can happen.
func (s Status) Terminal() bool { return s == StatusCompleted || s == StatusFailed }

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusInFlight, StatusCompleted, StatusFailed:
		return true
	}
	return false
}

// Phase is what a job's next action is.
type Phase int

const (
	PhaseNone     Phase = iota // nothing left to do
	PhaseDispatch              // send the job's request to its upstream
	PhaseDeliver               // POST the job's result to its webhook_url
)

// DeliveryStatus is the state of a job's webhook delivery.
type DeliveryStatus string

const (
	DeliveryPending   DeliveryStatus = "pending"   // waiting in the receiver's lane
	DeliveryDelivered DeliveryStatus = "delivered" // the receiver answered with a non-retryable status
	DeliveryFailed    DeliveryStatus = "failed"    // retries spent
)

// Delivery tracks the durable delivery of a finished job's result to its
// webhook_url. It is part of the job's own record: one row per job lifecycle.
type Delivery struct {
	Status         DeliveryStatus
	Attempts       int
	ResponseStatus int    // the receiver's last answer (0 if none)
	Reason         string // why the last attempt failed
}

// TTLs after which rows expire (BEHAVIOR.md §2.3). The expiry clock restarts at
// every status change that sets a TTL.
const (
	QueuedTTL    = 24 * time.Hour
	CompletedTTL = 30 * time.Minute
	FailedTTL    = 2 * time.Hour
)

// RetentionTTL returns how long a job that enters status s is kept:
// retention when it is positive (an operator's setting for failed jobs),
// TTL(s) otherwise.
func RetentionTTL(s Status, retention time.Duration) time.Duration {
	if retention > 0 {
		return retention
	}
	return TTL(s)
}

// TTL returns the row lifetime that starts when a job enters status s.
func TTL(s Status) time.Duration {
	switch s {
	case StatusCompleted:
		return CompletedTTL
	case StatusFailed:
		return FailedTTL
	default:
		return QueuedTTL
	}
}

// Job is a durable unit of work: one HTTP request to send, and what came of it.
type Job struct {
	ID            JobID
	Seq           int64 // the store's row number; stable for the job's life
	UserID        string
	IdempotentKey string
	URL           string
	PoolID        string
	Method        string
	Headers       map[string]string
	Body          []byte
	WebhookURL    string
	Queue         QueueKey // where the request is dispatched (upstream, or tenant of it)
	Status        Status
	Attempts      int
	Deferrals     int // times the destination said "come back later" (429) in the current phase
	CreatedAt     time.Time
	UpdatedAt     time.Time
	DispatchedAt  time.Time // start of the latest attempt; zero before the first
	ExpiresAt     time.Time
	Result        *Result // set once the job is terminal

	// ReadyQueue is the queue that holds the job's next action (Queue while
	// it waits for dispatch, the receiver's shared queue while its result
	// waits for delivery), or "" when nothing is left to do. ReadySeq orders it in
	// that queue: it is assigned at commit, so a later commit has a larger one.
	ReadyQueue QueueKey
	ReadySeq   int64

	// Delivery is set once a job with a webhook_url is terminal.
	Delivery *Delivery

	// History is the job's last MaxHistory dispatch attempts, oldest first.
	History []Attempt

	// JobOptions are the caller's options: schedule, deadline, priority,
	// retry policy, timeout, trace context.
	JobOptions
}

// Result is what the last attempt of a job produced.
type Result struct {
	ResponseStatus int    // 0 when no HTTP response was obtained
	Body           []byte // the response body, up to the configured limit
	BodyTruncated  bool   // the response body was longer than the limit
	ContentType    string
	Reason         string // why the job failed; empty when completed
}

// ReasonCanceled is the Result.Reason of a job cancelled before it was
// dispatched (its status is failed).
const ReasonCanceled = "canceled"

// Canceled reports whether the job ended by cancellation.
func (j *Job) Canceled() bool {
	return j.Status == StatusFailed && j.Result != nil && j.Result.Reason == ReasonCanceled
}

// Upstream returns the job's upstream key.
func (j *Job) Upstream() UpstreamKey {
	if j.PoolID != "" {
		return PoolUpstream(j.PoolID)
	}
	k, _ := UpstreamOf(j.URL)
	return k
}

// Phase returns what the job's next action is.
func (j *Job) Phase() Phase {
	switch {
	case !j.Status.Terminal():
		return PhaseDispatch
	case j.Delivery != nil && j.Delivery.Status == DeliveryPending:
		return PhaseDeliver
	}
	return PhaseNone
}

// PhaseStart is when the job entered its current phase: its submission
// while it waits for dispatch; its result while that waits for delivery. A
// pending delivery expires QueuedTTL after its result was recorded (every
// store sets it so, and a delivery retry leaves it), which dates the result.
func (j *Job) PhaseStart() time.Time {
	if j.Phase() == PhaseDeliver && !j.ExpiresAt.IsZero() {
		return j.ExpiresAt.Add(-QueuedTTL)
	}
	return j.CreatedAt
}

// Expired reports whether the row has outlived its TTL at now.
func (j *Job) Expired(now time.Time) bool { return !j.ExpiresAt.IsZero() && !now.Before(j.ExpiresAt) }

// Clone returns a deep copy, so callers can hand jobs across goroutines
// without sharing maps or slices.
func (j *Job) Clone() *Job {
	c := *j
	if j.Headers != nil {
		c.Headers = make(map[string]string, len(j.Headers))
		for k, v := range j.Headers {
			c.Headers[k] = v
		}
	}
	if j.Body != nil {
		c.Body = append([]byte(nil), j.Body...)
	}
	if j.Result != nil {
		r := *j.Result
		r.Body = append([]byte(nil), j.Result.Body...)
		c.Result = &r
	}
	if j.Delivery != nil {
		d := *j.Delivery
		c.Delivery = &d
	}
	if j.History != nil {
		c.History = append([]Attempt(nil), j.History...)
	}
	return &c
}

// LedgerHash returns the legacy dedup hash sha256(user_id + ":" + key) in
// lowercase hex. It is ambiguous when either part contains ':' and is used only
// where the wire format requires it (the drain ledger), never for dedup.
func LedgerHash(userID, idempotentKey string) string {
	sum := sha256.Sum256([]byte(userID + ":" + idempotentKey))
	return hex.EncodeToString(sum[:])
}
