package groupcommit

import (
	"fmt"
	"sync"
	"time"
)

// Health is what a writer knows of its commits: when it last tried one and
// whether that failed. A failure shows until the next commit succeeds, so a
// store whose disk is full reports it for as long as it lasts, not only to
// the callers whose writes failed. Safe for concurrent use.
type Health struct {
	mu      sync.Mutex
	err     error     // the latest failure; nil after a success
	since   time.Time // the first failure of the current run of failures
	lastTry time.Time // the latest commit tried, failed or not
}

// Record notes the outcome of a commit tried at now.
func (h *Health) Record(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastTry = now
	if err == nil {
		h.err, h.since = nil, time.Time{}
		return
	}
	if h.err == nil {
		h.since = now
	}
	h.err = err
}

// Err returns nil while commits succeed, or a *FailingError saying since
// when they fail and why the latest one did.
func (h *Health) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return &FailingError{Since: h.since, Err: h.err}
}

// Idle reports whether no commit was tried in the d before now: then only
// a probe can tell whether writes would succeed.
func (h *Health) Idle(now time.Time, d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Sub(h.lastTry) >= d
}

// FailingError reports that a writer's commits have failed since Since.
type FailingError struct {
	Since time.Time
	Err   error // the latest failure
}

func (e *FailingError) Error() string {
	return fmt.Sprintf("writes failing since %s: %v", e.Since.UTC().Format(time.RFC3339), e.Err)
}

func (e *FailingError) Unwrap() error { return e.Err }
