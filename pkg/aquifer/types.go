package aquifer

import (
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// The types below are aliases of the ones Aquifer's core uses, so a program
// embedding Aquifer and the aquiferd daemon share one implementation. Their
// fields and methods are documented here; the definitions live in the
// module's internal packages.

// JobID identifies a job: 32 lower-case hex digits, time-ordered.
type JobID = domain.JobID

// JobRequest is what a caller asks Aquifer to send. UserID and
// IdempotentKey are required and together make the submission idempotent;
// exactly one of URL (an absolute http or https URL) and PoolID names the
// destination. Method defaults to GET; Headers and Body (a string, sent as
// is) are optional; WebhookURL, when set, receives the result as a signed
// POST. ID, when set, becomes the new job's id (it must be a valid JobID);
// otherwise one is generated. AccountQueue switches the destination's
// per-tenant isolation (see docs/PACING.md). Options, all optional, say
// when and how the job runs (OptionsRequest).
type JobRequest = domain.JobRequest

// OptionsRequest are a job's options as the caller gives them; a zero
// field (a nil pointer) is not given, and nothing given keeps the
// defaults. NotBefore (or DelaySeconds from now, not both) schedules the
// job: it is stored at once, status queued, but enters its destination's
// queue only when due. Deadline (or MaxWaitSeconds from when it is due)
// fails a job not sent by then with reason "deadline exceeded". Priority
// is "high", "normal" (also "") or "low" (the PriorityHigh… constants'
// String). Retry is the job's own retry policy for its dispatch;
// TimeoutSeconds bounds each attempt; TraceParent and TraceState (W3C
// Trace Context) are continued by the sent request and the webhook. The
// values are checked against Options.JobBounds when the job is enqueued;
// errors name the field as the REST API does ("retry.max_attempts").
// ParseTime reads a time as the REST API takes one.
type OptionsRequest = domain.OptionsRequest

// RetryRequest is a job's own retry policy: MaxAttempts in all (the first
// included), the wait after the first failed attempt BackoffSeconds,
// doubling after each further one up to MaxBackoffSeconds (default 300 when
// only BackoffSeconds is given). Without BackoffSeconds the server's
// backoff applies.
type RetryRequest = domain.RetryRequest

// JobOptions are a job's options as resolved when it was enqueued (Job
// embeds them): NotBefore and Deadline (zero: none), Priority, Retry,
// Timeout (zero: the server's), TraceParent and TraceState.
type JobOptions = domain.JobOptions

// Priority orders the jobs waiting for one destination: high before
// normal before low, first in first out within a priority, and none
// passed for longer than Options.PriorityAging per class.
type Priority = domain.Priority

// Priorities; OptionsRequest.Priority takes their String.
const (
	PriorityHigh   = domain.PriorityHigh
	PriorityNormal = domain.PriorityNormal
	PriorityLow    = domain.PriorityLow
)

// OptionBounds are the limits on job options (Options.JobBounds).
type OptionBounds = domain.OptionBounds

// DefaultOptionBounds are the bounds unless Options.JobBounds sets others:
// scheduled up to 30 days ahead, 25 attempts, 6h backoff, 10m timeout.
var DefaultOptionBounds = domain.DefaultOptionBounds

// ParseTime reads a point in time as the REST API takes one: an RFC 3339
// timestamp, or Unix milliseconds (digits only). Errors name field.
func ParseTime(field, s string) (time.Time, error) { return domain.ParseTime(field, s) }

// EnqueueBatchItem is one request's answer in EnqueueBatch: its Result,
// or the Err that kept it out. (BatchItem is the Store's: see store.go.)
type EnqueueBatchItem = app.BatchItem

// MaxBatch is the most requests one EnqueueBatch takes.
const MaxBatch = app.MaxBatch

// AccountQueueMode is a JobRequest's opinion about per-tenant queues for
// its destination.
type AccountQueueMode = domain.AccountQueueMode

// Account-queue modes.
const (
	AccountQueueUnchanged = domain.AccountQueueUnchanged // leave the destination's mode as it is
	AccountQueueEnabled   = domain.AccountQueueEnabled   // one queue per tenant from now on
	AccountQueueDisabled  = domain.AccountQueueDisabled  // one shared queue from now on
)

// Job is a durable unit of work: the request, its progress and its result.
// The fields a caller usually reads are ID, Status, Attempts, Result (set
// once the job is terminal) and Delivery (the webhook's progress). Jobs
// returned by Aquifer are copies; changing them changes nothing stored.
type Job = domain.Job

// Status is the lifecycle state of a job: StatusQueued → StatusInFlight →
// StatusCompleted or StatusFailed (docs/ARCHITECTURE.md has the state
// machine). Status.Terminal reports whether it can still change.
type Status = domain.Status

// Job statuses.
const (
	StatusQueued    = domain.StatusQueued    // durable, waiting for its turn
	StatusInFlight  = domain.StatusInFlight  // an attempt is running
	StatusCompleted = domain.StatusCompleted // the destination answered with a response that is not retried
	StatusFailed    = domain.StatusFailed    // retries spent, cancelled, or the job could not run
)

// Result is what the last attempt of a job produced: the destination's
// status code (0 when no response was obtained), its body (up to
// Options.MaxResponseBytes; BodyTruncated says whether it was cut) and
// Content-Type, and for a failed job the Reason.
type Result = domain.Result

// Delivery is the progress of a finished job's webhook.
type Delivery = domain.Delivery

// DeliveryStatus is the state of a job's webhook delivery.
type DeliveryStatus = domain.DeliveryStatus

// Webhook delivery states.
const (
	DeliveryPending   = domain.DeliveryPending   // waiting in the receiver's queue
	DeliveryDelivered = domain.DeliveryDelivered // the receiver answered
	DeliveryFailed    = domain.DeliveryFailed    // retries spent
)

// Event is one transition of one job, as a Subscription delivers it.
// Position is set for EventPosition, Attempt for EventDispatching, and
// Result for the two terminal events.
type Event = domain.Event

// EventType names a job event. EventType.Terminal reports whether the event
// ends the job's stream.
type EventType = domain.EventType

// Job events.
const (
	EventQueued      = domain.EventQueued      // the job waits; SSE streams open with it (Subscribe returns the job instead)
	EventPosition    = domain.EventPosition    // a waiting job's place in line (every few seconds)
	EventDispatching = domain.EventDispatching // an attempt starts
	EventCompleted   = domain.EventCompleted   // terminal: the job completed
	EventFailed      = domain.EventFailed      // terminal: the job failed
)

// Subscription receives one job's events on its channel C until the job
// ends, the reader falls behind (C is closed and Lagged reports true: read
// the job again and resubscribe), or Close is called. Always Close it.
type Subscription = app.Subscription

// EnqueueResult is the answer to Enqueue: the job's id and status,
// whether the submission was a duplicate of an earlier one (same UserID and
// IdempotentKey), and the Load figures the HTTP API reports in its
// X-Aquifer-* headers.
type EnqueueResult = app.EnqueueResult

// Load is the backlog and the destination's pace at the time of a
// submission, for a caller's autoscaling.
type Load = app.Load

// Health is the state of a running Aquifer, as GET /health reports it:
// the store, job counts, live lanes and their pace, admission control,
// pools, and the L8 identity.
type Health = app.Health

// Rate is a pace: requests started per second (at least 0.5) and how many
// may run at once (at least 1).
type Rate = domain.Rate

// DefaultRate is the pace of destinations nothing configures: 2 requests per
// second, one at a time.
var DefaultRate = domain.DefaultRate

// RateTable gives each destination its ceiling. Hosts maps "host" or
// "host:port" (lower case) to a Rate; "host:port" is matched first, then
// "host", then Defaults (DefaultRate when zero). Pools use Defaults.
type RateTable = app.RateTable

// RetryPolicy says how often and how soon a 5xx answer or a transport error
// is retried: Attempts in total (default 5), waiting Backoff[n-1] after
// attempt n (default 1s, 2s, 4s, 8s; the last entry repeats).
type RetryPolicy = app.RetryPolicy

// AdmissionLimits shed new jobs with a rejection (HTTP 429) while a limit is
// exceeded: MemoryLimitMB (the process's memory in MiB: what the Go runtime
// holds from the OS less what it released) and DBMaxBytes (store size),
// both 0 = off. RetryAfter (default 5s) doubles per rejection in a row up
// to RetryAfterMax (default 60s).
type AdmissionLimits = app.AdmissionConfig

// DestinationRules restrict where jobs, webhooks and pool members may point:
// Allow (only these names, IPs or CIDRs), Deny, and DenyPrivate (loopback
// and private ranges). Link-local and cloud metadata addresses are always
// denied. See docs/CONFIGURATION.md.
type DestinationRules = domain.DestinationRules

// ProxyOptions tune edge-proxy mode (POST /proxy, docs/PROXY.md). The zero
// value uses the defaults.
type ProxyOptions = app.ProxyConfig

// DrainOptions turn on drain mode (docs/DRAIN.md): once the process has been
// idle, its ledger is posted to WebhookURL and cleared. It needs a store
// one process owns (SQLite, Pebble, memory, or a LedgerStore of your own).
type DrainOptions = app.DrainConfig

// ClusterOptions turn on cluster mode — several processes sharing one store
// (Postgres), each destination dispatched by one of them at a time — when
// Peers is set (PostgresPeers), and tune its lane leases. The zero value is
// a single process.
type ClusterOptions = app.ClusterConfig

// OutageOptions tune how Aquifer rides out a destination or webhook
// receiver that is down (docs/OPERATIONS.md, "When a destination is down"):
// once FailureThreshold different jobs have failed in a row its lane holds
// the work and probes it, instead of every job spending its retries. The
// zero value uses the defaults.
type OutageOptions = app.OutageConfig
