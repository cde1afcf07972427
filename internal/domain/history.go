package domain

import (
	"net/url"
	"strings"
	"time"
)

// MaxHistory is how many attempts a job's history keeps: the latest ones.
const MaxHistory = 10

// Attempt is one dispatch attempt as a job's history keeps it. A job keeps
// its last MaxHistory attempts, across retries by an operator, so that the
// record of what its destination answered stays bounded.
type Attempt struct {
	At       time.Time     // when the request was sent
	Duration time.Duration // until the answer or the error
	Status   int           // the destination's HTTP status (0 if none)
	Error    string        // the transport error or timeout ("" when there was an answer)
	// Signal names the pacing signal the answer carried, if any: one of the
	// Signal* constants below.
	Signal string
	Member string // the pool member that served it (pool jobs only)
}

// Pacing signals an answer can carry (Attempt.Signal, and why a lane runs at
// its current pace).
const (
	SignalAqueduct   = "x-aqueduct"  // X-Aqueduct-* headers
	SignalORCA       = "orca"        // an ORCA load report (endpoint-load-metrics)
	SignalRetryAfter = "retry-after" // 429 or 503 with Retry-After
	SignalRateLimit  = "rate-limit"  // X-RateLimit-*, RateLimit, x-ratelimit-* headers
	SignalTenantCap  = "tenant-cap"  // the tenant's configured cap on the destination
)

// AppendHistory returns h with a appended, keeping only the last MaxHistory
// attempts. It never modifies h's backing array, so a job's history can be
// shared with a clone taken earlier.
func AppendHistory(h []Attempt, a Attempt) []Attempt {
	keep := h
	if len(keep) >= MaxHistory {
		keep = keep[len(keep)-MaxHistory+1:]
	}
	out := make([]Attempt, 0, len(keep)+1)
	return append(append(out, keep...), a)
}

// URLPath returns the path of a job's URL, the part the q filter searches.
// The query is left out: it may hold credentials.
func URLPath(raw string) string {
	if p, ok := plainPath(raw); ok {
		return p // every submitted job's URL is parsed at validation; this one is not parsed again
	}
	return parsedPath(raw)
}

// parsedPath is URLPath by url.Parse, for any URL.
func parsedPath(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.EscapedPath()
}

// plainPath is URLPath without url.Parse for the usual URL: http or https,
// a host of letters, digits, '.', '-', '_' and '~' with an optional port,
// a path of characters url.URL.EscapedPath leaves as they are, any query,
// no fragment and no control character. Then the path is the text between
// the host and the query. ok is false for anything else (parsedPath
// decides); FuzzURLPath holds the two to the same answers.
func plainPath(raw string) (path string, ok bool) {
	rest, ok := cutSchemeHTTP(raw)
	if !ok {
		return "", false
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c < 0x20 || c == 0x7f || c == '#' {
			return "", false
		}
	}
	rest, _, _ = strings.Cut(rest, "?")
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		slash = len(rest)
	}
	host, path := rest[:slash], rest[slash:]
	if host == "" {
		return "", false
	}
	if i := strings.IndexByte(host, ':'); i >= 0 {
		for _, c := range []byte(host[i+1:]) {
			if c < '0' || c > '9' {
				return "", false
			}
		}
		host = host[:i]
	}
	for _, c := range []byte(host) {
		if !unreserved(c) {
			return "", false
		}
	}
	for _, c := range []byte(path) {
		if !unreserved(c) && strings.IndexByte("$&+,/:;=@", c) < 0 {
			return "", false
		}
	}
	return path, true
}

// cutSchemeHTTP returns raw after "http://" or "https://" (the scheme in
// any case).
func cutSchemeHTTP(raw string) (string, bool) {
	for _, scheme := range [2]string{"http://", "https://"} {
		if len(raw) >= len(scheme) && strings.EqualFold(raw[:len(scheme)], scheme) {
			return raw[len(scheme):], true
		}
	}
	return "", false
}

// unreserved: RFC 3986's unreserved characters.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// ContainsFold reports whether s contains substr, ignoring the case of ASCII
// letters (the q filter's rule, which every store implements).
func ContainsFold(s, substr string) bool {
	return strings.Contains(asciiLower(s), asciiLower(substr))
}

func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// JobFilter selects jobs for listing, counting and bulk operations. Zero
// fields do not filter. Every store must select exactly the jobs Matches
// accepts (the store contract tests check it against Matches).
type JobFilter struct {
	Statuses []Status // any of these (none: every status)
	// Tenant limits the jobs to one API-key tenant's ("" = no limit): jobs
	// whose stored user_id is scoped to it (Scope).
	Tenant         string
	UserID         string      // the stored (scoped) user_id, exactly
	Destination    UpstreamKey // the upstream of the job's queue: scheme://host:port, or pool:<id>
	PoolID         string      // the stored (scoped) pool id, exactly
	CreatedAfter   time.Time   // created strictly after (zero: no bound)
	CreatedBefore  time.Time   // created strictly before (zero: no bound)
	ResponseStatus int         // the result's HTTP status (terminal jobs)
	// Q is a substring of the URL's path or of the failure reason, ASCII
	// case-insensitive.
	Q string
}

// MatchesIgnoringStatus reports whether j passes every filter but Statuses.
func (f *JobFilter) MatchesIgnoringStatus(j *Job) bool {
	switch {
	case f.Tenant != "" && !strings.HasPrefix(j.UserID, f.Tenant+scopeSep):
		return false
	case f.UserID != "" && j.UserID != f.UserID:
		return false
	case f.Destination != "" && j.Queue.Upstream() != f.Destination:
		return false
	case f.PoolID != "" && j.PoolID != f.PoolID:
		return false
	case !f.CreatedAfter.IsZero() && !j.CreatedAt.After(f.CreatedAfter):
		return false
	case !f.CreatedBefore.IsZero() && !j.CreatedAt.Before(f.CreatedBefore):
		return false
	case f.ResponseStatus != 0 && (j.Result == nil || j.Result.ResponseStatus != f.ResponseStatus):
		return false
	case f.Q != "":
		reason := ""
		if j.Result != nil {
			reason = j.Result.Reason
		}
		if !ContainsFold(URLPath(j.URL), f.Q) && !ContainsFold(reason, f.Q) {
			return false
		}
	}
	return true
}

// Matches reports whether j passes the filter.
func (f *JobFilter) Matches(j *Job) bool {
	if len(f.Statuses) > 0 && !f.HasStatus(j.Status) {
		return false
	}
	return f.MatchesIgnoringStatus(j)
}

// HasStatus reports whether s is among the filter's statuses (true when the
// filter names none).
func (f *JobFilter) HasStatus(s Status) bool {
	if len(f.Statuses) == 0 {
		return true
	}
	for _, x := range f.Statuses {
		if x == s {
			return true
		}
	}
	return false
}

// Retryable reports whether an operator may re-queue the job: it has
// finished, and its webhook delivery, if any, is not still pending (a retry
// would race the delivery of the result it replaces).
func (j *Job) Retryable() bool {
	return j.Status.Terminal() && (j.Delivery == nil || j.Delivery.Status != DeliveryPending)
}

// ErrNotFinished is returned by a retry of a job that has not finished, or
// whose webhook delivery is still pending.
var ErrNotFinished = &Error{Code: CodeConflict, Message: "job has not finished (or its webhook is still being delivered); only finished jobs can be retried"}

// OperationKind is what a bulk operation does to each job it selects.
type OperationKind string

const (
	OpKindRetry  OperationKind = "retry"  // re-queue finished jobs
	OpKindCancel OperationKind = "cancel" // cancel jobs still waiting
)

// OperationState is where a bulk operation stands.
type OperationState string

const (
	OpRunning   OperationState = "running"
	OpCompleted OperationState = "completed"
	OpFailed    OperationState = "failed"
)

// Operation is a bulk retry or cancel over the jobs a filter selects, run in
// batches newest first. It is durable: each batch changes its jobs and
// records the operation's progress in one transaction, so after a crash the
// operation resumes where the last committed batch ended and no job is acted
// on twice.
type Operation struct {
	ID     string
	Kind   OperationKind
	Filter JobFilter
	State  OperationState
	// Cursor is where the next batch starts: jobs with Seq < Cursor. It
	// starts one past the newest job that existed when the operation began,
	// so jobs submitted later are not touched.
	Cursor    int64
	Total     int64 // jobs the filter selected when the operation began
	Processed int64 // jobs examined so far
	Changed   int64 // jobs re-queued or cancelled
	Skipped   int64 // jobs examined but left alone (their state had moved on)
	Error     string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Finished reports whether the operation has nothing left to do.
func (o *Operation) Finished() bool { return o.State != OpRunning }

// LanePause is an operator's pause of one destination: its jobs are accepted
// and stored, none is dispatched, until it is resumed. It is durable.
type LanePause struct {
	Upstream UpstreamKey
	At       time.Time
	Reason   string // free text from the operator ("" if none)
}
