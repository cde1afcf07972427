// Package events fans job events out to the subscribers that follow a job
// (SSE streams, long polls, the A2A and MCP adapters).
package events

import (
	"sync"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Broker fans job events out to subscribers (SSE streams, long-polls).
// Publishing never blocks: a subscriber whose buffer is full is dropped — its
// channel is closed with Lagged set — so the reader can reload the job from
// the store and resubscribe instead of silently missing a terminal event.
type Broker struct {
	mu     sync.Mutex
	subs   map[domain.JobID]map[*Subscription]struct{}
	buffer int
	sinks  []ports.EventSink
}

// Subscription receives one job's events on C until the job ends, the
// subscriber lags, or Close is called.
type Subscription struct {
	C      <-chan domain.Event
	c      chan domain.Event
	id     domain.JobID
	b      *Broker
	lagged bool
	closed bool
}

// NewBroker returns a broker with the given per-subscriber buffer. Every event
// is also handed to sinks (metrics).
func NewBroker(buffer int, sinks ...ports.EventSink) *Broker {
	return &Broker{subs: make(map[domain.JobID]map[*Subscription]struct{}), buffer: max(buffer, 1), sinks: sinks}
}

// Subscribe starts receiving events for id.
func (b *Broker) Subscribe(id domain.JobID) *Subscription {
	c := make(chan domain.Event, b.buffer)
	s := &Subscription{C: c, c: c, id: id, b: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.subs[id]
	if m == nil {
		m = make(map[*Subscription]struct{})
		b.subs[id] = m
	}
	m[s] = struct{}{}
	return s
}

// Publish delivers ev to every subscriber of its job without blocking.
func (b *Broker) Publish(ev domain.Event) {
	for _, s := range b.sinks {
		s.Publish(ev)
	}
	b.Deliver(ev)
}

// HasSubscribers reports whether anyone follows job id.
func (b *Broker) HasSubscribers(id domain.JobID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs[id]) > 0
}

// Deliver hands ev to its subscribers only (an event another process
// published: its sinks counted it there).
func (b *Broker) Deliver(ev domain.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs[ev.JobID] {
		select {
		case s.c <- ev:
		default:
			s.lagged = true
			b.removeLocked(s)
		}
	}
}

// SubscribedIDs returns the jobs that have at least one subscriber.
func (b *Broker) SubscribedIDs() []domain.JobID {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]domain.JobID, 0, len(b.subs))
	for id := range b.subs {
		ids = append(ids, id)
	}
	return ids
}

// Subscribers returns the number of open subscriptions (for health and tests).
func (b *Broker) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.subs {
		n += len(m)
	}
	return n
}

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.removeLocked(s)
}

// Lagged reports whether the subscription was dropped because its reader
// fell behind. Valid once C is closed.
func (s *Subscription) Lagged() bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.lagged
}

func (b *Broker) removeLocked(s *Subscription) {
	if s.closed {
		return
	}
	s.closed = true
	close(s.c)
	if m := b.subs[s.id]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(b.subs, s.id)
		}
	}
}
