package ports

import (
	"net/http"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Clock tells time and makes timers. Lanes, sweeps and pacing take one so
// tests can drive them with a fake clock.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f on its own goroutine once d has passed, as
	// time.AfterFunc does; the returned Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the subset of *time.Timer the app uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

// AfterFunc returns time.AfterFunc(d, f).
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return sysTimer{time.AfterFunc(d, f)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time        { return s.t.C }
func (s sysTimer) Stop() bool                 { return s.t.Stop() }
func (s sysTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }

// Doer sends outbound HTTP requests (to upstreams, pool members and webhook
// receivers). *http.Client satisfies it.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// EventSink hears about every job transition (the SSE broker, metrics).
// Publish must not block.
type EventSink interface {
	Publish(ev domain.Event)
}

// TrustStore keeps the webhook receivers that proved their L8 identity
// (l8.FileTrust is the default). Get returns l8.ErrNoTrust for unknown or
// revoked receivers.
type TrustStore interface {
	Get(domain string) (*l8.Trust, error)
	Put(t *l8.Trust) error
}
