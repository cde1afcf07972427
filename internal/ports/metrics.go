package ports

import "time"

// Metrics receives what the application counts. Implementations must be
// cheap and non-blocking (they are called on hot paths) and must keep label
// sets bounded: upstream is a lane's key (scheme://host:port, or a pool),
// never a full URL or a job id. NopMetrics is the default.
type Metrics interface {
	// JobAccepted counts a new job; JobDuplicate a resubmission answered
	// with the existing job; JobRejected an admission rejection (reason:
	// memory, db_size, …).
	JobAccepted(upstream string)
	JobDuplicate(upstream string)
	JobRejected(reason string)

	// Dispatched records one dispatch attempt's outcome: outcome is
	// "completed", "retry", "deferred" or "failed"; status the HTTP status
	// (0 when none was obtained); took the attempt's duration.
	Dispatched(upstream, outcome string, status int, took time.Duration)
	// JobFinished counts a job reaching a terminal status ("completed" or
	// "failed").
	JobFinished(upstream, status string)

	// WebhookDelivered / WebhookFailed count the end of a result's delivery.
	WebhookDelivered(upstream string)
	WebhookFailed(upstream string)

	// CircuitChanged counts a lane's outage circuit changing state: "open"
	// when the destination is found down, "closed" when it answers again.
	CircuitChanged(upstream, state string)
}

// NopMetrics discards everything.
type NopMetrics struct{}

func (NopMetrics) JobAccepted(string)                            {}
func (NopMetrics) JobDuplicate(string)                           {}
func (NopMetrics) JobRejected(string)                            {}
func (NopMetrics) Dispatched(string, string, int, time.Duration) {}
func (NopMetrics) JobFinished(string, string)                    {}
func (NopMetrics) WebhookDelivered(string)                       {}
func (NopMetrics) WebhookFailed(string)                          {}
func (NopMetrics) CircuitChanged(string, string)                 {}

var _ Metrics = NopMetrics{}
