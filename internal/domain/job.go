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

// Kind distinguishes jobs callers submitted from the jobs Aquifer creates to
// deliver their results.
type Kind string

const (
	KindForward Kind = "forward" // submitted by a caller
	KindWebhook Kind = "webhook" // delivers a forward job's result to its webhook_url
)

// TTLs after which rows expire (BEHAVIOR.md §2.3). The expiry clock restarts at
// every status change that sets a TTL.
const (
	QueuedTTL    = 24 * time.Hour
	CompletedTTL = 30 * time.Minute
	FailedTTL    = 2 * time.Hour
)

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
	Seq           int64 // commit order, assigned by the store; a later commit has a larger Seq
	Kind          Kind
	ParentID      JobID // for webhook jobs, the job whose result they deliver
	UserID        string
	IdempotentKey string
	URL           string
	PoolID        string
	Method        string
	Headers       map[string]string
	Body          []byte
	WebhookURL    string
	Lane          LaneKey
	Status        Status
	Attempts      int
	CreatedAt     time.Time
	UpdatedAt     time.Time
	DispatchedAt  time.Time // start of the latest attempt; zero before the first
	ExpiresAt     time.Time
	Result        *Result // set once the job is terminal
}

// Result is what the last attempt of a job produced.
type Result struct {
	ResponseStatus int    // 0 when no HTTP response was obtained
	Body           []byte // the response body, up to the configured limit
	BodyTruncated  bool   // the response body was longer than the limit
	ContentType    string
	Reason         string // why the job failed; empty when completed
}

// Upstream returns the job's upstream key.
func (j *Job) Upstream() UpstreamKey {
	if j.PoolID != "" {
		return PoolUpstream(j.PoolID)
	}
	k, _ := UpstreamOf(j.URL)
	return k
}

// IsWebhook reports whether this job delivers another job's result.
func (j *Job) IsWebhook() bool { return j.Kind == KindWebhook }

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
	return &c
}

// LedgerHash returns the legacy dedup hash sha256(user_id + ":" + key) in
// lowercase hex. It is ambiguous when either part contains ':' and is used only
// where the wire format requires it (the drain ledger), never for dedup.
func LedgerHash(userID, idempotentKey string) string {
	sum := sha256.Sum256([]byte(userID + ":" + idempotentKey))
	return hex.EncodeToString(sum[:])
}
