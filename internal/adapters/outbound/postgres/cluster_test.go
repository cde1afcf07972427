package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Tests of cluster messages (Broadcast, Listen) and shared pool membership.

// inbox collects the messages a Listen delivers.
type inbox struct {
	mu   sync.Mutex
	msgs []ports.ClusterMessage
	ch   chan struct{} // signalled on every delivery
}

func (b *inbox) deliver(m ports.ClusterMessage) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
	select {
	case b.ch <- struct{}{}:
	default:
	}
}

func (b *inbox) snapshot() []ports.ClusterMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ports.ClusterMessage(nil), b.msgs...)
}

// waitFor waits until cond holds for the messages received so far.
func (b *inbox) waitFor(t *testing.T, what string, cond func([]ports.ClusterMessage) bool) []ports.ClusterMessage {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		if msgs := b.snapshot(); cond(msgs) {
			return msgs
		}
		select {
		case <-b.ch:
		case <-time.After(100 * time.Millisecond):
		case <-timeout:
			t.Fatalf("timed out waiting for %s; got %d messages: %+v", what, len(b.snapshot()), b.snapshot())
		}
	}
}

// listen runs s.Listen until the test ends and waits until it listens.
func listen(t *testing.T, s *Store) *inbox {
	t.Helper()
	b := &inbox{ch: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, b.deliver) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, domain.ErrClosed) {
			t.Errorf("Listen returned %v", err)
		}
	})
	waitListening(t, s, 0)
	return b
}

// waitListening waits until s listens on a connection other than oldPID.
func waitListening(t *testing.T, s *Store, oldPID uint32) uint32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid := s.listenPID.Load(); pid != 0 && pid != oldPID {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("Listen did not (re)connect within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func events(msgs []ports.ClusterMessage) []domain.Event {
	var out []domain.Event
	for _, m := range msgs {
		out = append(out, m.Events...)
	}
	return out
}

func TestBroadcastListen(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	other := openStore(t, newSchema(t), "a:1", nil) // same id, other schema: another deployment
	inA, inB, inOther := listen(t, a), listen(t, b), listen(t, other)

	res := &domain.Result{ResponseStatus: 200, Body: []byte("secret body")}
	a.Broadcast(ports.ClusterMessage{
		From:   "forged",
		Events: []domain.Event{{Type: domain.EventCompleted, JobID: "j1", Result: res}, {Type: domain.EventDispatching, JobID: "j2", Attempt: 2}},
		Work:   []ports.WorkNotice{{Queue: "http://up.test:80", ReadySeq: 7}},
	})
	a.Broadcast(ports.ClusterMessage{Work: []ports.WorkNotice{{Queue: "http://up.test:80", ReadySeq: 5}, {Queue: "h|t", ReadySeq: 9}},
		Pools: []string{"p1", "p1"}})
	a.Broadcast(ports.ClusterMessage{}) // nothing to say: not sent
	msgs := inB.waitFor(t, "A's messages", func(ms []ports.ClusterMessage) bool {
		var work, pools int
		for _, m := range ms {
			work += len(m.Work)
			pools += len(m.Pools)
		}
		return len(events(ms)) == 2 && work >= 2 && pools >= 1
	})
	var work []ports.WorkNotice
	for _, m := range msgs {
		if m.From != "a:1" {
			t.Fatalf("message from %q, want a:1", m.From)
		}
		work = append(work, m.Work...)
	}
	ev := events(msgs)
	if ev[0] != (domain.Event{Type: domain.EventCompleted, JobID: "j1"}) || ev[1] != (domain.Event{Type: domain.EventDispatching, JobID: "j2", Attempt: 2}) {
		t.Fatalf("events = %+v (results must be left out)", ev)
	}
	if res.Body == nil {
		t.Fatal("Broadcast changed the caller's event")
	}
	// Sent together, the notices of one lane merge into the smallest ReadySeq.
	if len(msgs) == 1 && fmt.Sprint(work) != "[{http://up.test:80 5} {h|t 9}]" {
		t.Fatalf("work = %v", work)
	}

	// B's message reaches A; A never heard its own, and the other schema
	// heard nothing.
	b.Broadcast(ports.ClusterMessage{Pools: []string{"from-b"}})
	got := inA.waitFor(t, "B's message", func(ms []ports.ClusterMessage) bool { return len(ms) > 0 })
	if len(got) != 1 || got[0].From != "b:1" || fmt.Sprint(got[0].Pools) != "[from-b]" {
		t.Fatalf("A received %+v, want only B's message", got)
	}
	if got := inOther.snapshot(); len(got) != 0 {
		t.Fatalf("a store on another schema received %+v", got)
	}
	// A change of the lane pauses, alone, reaches the peers.
	b.Broadcast(ports.ClusterMessage{Pauses: true})
	got = inA.waitFor(t, "B's pause notice", func(ms []ports.ClusterMessage) bool { return len(ms) > 1 })
	if len(got) != 2 || !got[1].Pauses || got[1].From != "b:1" || len(got[1].Pools) != 0 {
		t.Fatalf("A received %+v, want B's pause notice", got)
	}
	if st := a.Stats(); st.Notified == 0 || st.Dropped != 0 {
		t.Fatalf("A's stats = %+v", st)
	}
	if st := b.Stats(); st.Delivered == 0 {
		t.Fatalf("B's stats = %+v", st)
	}
}

// TestBroadcastSplitsLargeBatches: what does not fit one NOTIFY goes in
// several, and all of it arrives, in order.
func TestBroadcastSplitsLargeBatches(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", func(o *Options) { o.NotifyInterval = 200 * time.Millisecond })
	b := openStore(t, schema, "b:1", nil)
	in := listen(t, b)
	const n, lanesN = 3000, 500
	for i := range n {
		a.Broadcast(ports.ClusterMessage{
			Events: []domain.Event{{Type: domain.EventPosition, JobID: domain.JobID(fmt.Sprintf("%032d", i)), Position: i + 1}},
			Work:   []ports.WorkNotice{{Queue: domain.QueueKey(fmt.Sprintf("http://up%03d.test:80", i%lanesN)), ReadySeq: int64(i + 1)}},
		})
	}
	msgs := in.waitFor(t, "every event and notice", func(ms []ports.ClusterMessage) bool {
		lanes := map[domain.QueueKey]bool{}
		for _, m := range ms {
			for _, w := range m.Work {
				lanes[w.Queue] = true
			}
		}
		return len(events(ms)) >= n && len(lanes) >= lanesN
	})
	for i, e := range events(msgs) {
		if e.Position != i+1 || e.JobID != domain.JobID(fmt.Sprintf("%032d", i)) {
			t.Fatalf("event %d = %+v: out of order or damaged", i, e)
		}
	}
	lanes := map[domain.QueueKey]int64{}
	for _, m := range msgs {
		for _, w := range m.Work {
			if seq, ok := lanes[w.Queue]; !ok || w.ReadySeq < seq {
				lanes[w.Queue] = w.ReadySeq
			}
		}
	}
	if len(lanes) != lanesN {
		t.Fatalf("work notices for %d lanes, want %d", len(lanes), lanesN)
	}
	for i := range lanesN {
		if seq := lanes[domain.QueueKey(fmt.Sprintf("http://up%03d.test:80", i))]; seq != int64(i+1) {
			t.Fatalf("lane %d: earliest ReadySeq %d, want %d", i, seq, i+1)
		}
	}
	if st := a.Stats(); st.Notified < 2 || st.Dropped != 0 {
		t.Fatalf("A's stats = %+v: want several payloads, none dropped", st)
	}
	t.Logf("%d messages in %d payloads", n, a.Stats().Notified)
}

func TestEncodePayloads(t *testing.T) {
	t.Parallel()
	m := ports.ClusterMessage{Pools: []string{strings.Repeat("p", 300)}}
	for i := range 50 {
		m.Events = append(m.Events, domain.Event{Type: domain.EventQueued, JobID: domain.JobID(fmt.Sprint("job-", i))})
		m.Work = append(m.Work, ports.WorkNotice{Queue: domain.QueueKey(fmt.Sprint("lane \"ü\" ", i)), ReadySeq: int64(i)})
	}
	big := ports.ClusterMessage{Pools: []string{strings.Repeat("x", 500), "ok"}}
	paused := m
	paused.Pauses = true
	for _, c := range []struct {
		m     ports.ClusterMessage
		limit int
	}{{m, 400}, {m, maxPayload}, {big, 400}, {paused, 400}, {ports.ClusterMessage{Pauses: true}, 400}} {
		payloads, tooLarge := encodePayloads("a:1", c.m, c.limit)
		var got ports.ClusterMessage
		for _, p := range payloads {
			if len(p) > c.limit {
				t.Fatalf("payload of %d bytes, limit %d", len(p), c.limit)
			}
			d, err := decodePayload(p)
			if err != nil || d.From != "a:1" {
				t.Fatalf("decode %q: %+v, %v", p, d, err)
			}
			if d.Pauses != c.m.Pauses {
				t.Fatalf("payload %q: pauses %v, want %v in every payload", p, d.Pauses, c.m.Pauses)
			}
			got.Events, got.Work, got.Pools = append(got.Events, d.Events...), append(got.Work, d.Work...), append(got.Pools, d.Pools...)
			got.Pauses = d.Pauses
		}
		want := c.m
		if tooLarge > 0 {
			want.Pools = want.Pools[1:] // the 500-byte name fits no 400-byte payload
		}
		if len(payloads) == 0 || tooLarge != len(c.m.Pools)-len(want.Pools) || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: %d payloads, %d too large; round trip %+v, want %+v", c.limit, len(payloads), tooLarge, got, want)
		}
	}
}

// TestListenReconnects: a listening connection the server kills is
// replaced, and messages keep arriving.
func TestListenReconnects(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	in := listen(t, b)
	a.Broadcast(ports.ClusterMessage{Pools: []string{"before"}})
	in.waitFor(t, "the first message", func(ms []ports.ClusterMessage) bool { return len(ms) == 1 })

	pid := b.listenPID.Load()
	var killed bool
	query(t, schema, func(tx pgx.Tx) error {
		return tx.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&killed)
	})
	if !killed {
		t.Fatalf("could not terminate backend %d", pid)
	}
	waitListening(t, b, pid)
	a.Broadcast(ports.ClusterMessage{Pools: []string{"after"}})
	msgs := in.waitFor(t, "the message after reconnecting", func(ms []ports.ClusterMessage) bool { return len(ms) == 2 })
	if fmt.Sprint(msgs[1].Pools) != "[after]" {
		t.Fatalf("second message = %+v", msgs[1])
	}
}

// TestBroadcastDropsWhenFull: Broadcast never blocks; what does not fit the
// buffer is dropped and counted. Listen ends when the store closes.
func TestBroadcastDropsWhenFull(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", func(o *Options) {
		o.NotifyBuffer = 2
		o.NotifyInterval = time.Hour // nothing is sent before Close
	})
	b := openStore(t, schema, "b:1", nil)
	in := listen(t, b)
	for i := range 5 {
		a.Broadcast(ports.ClusterMessage{Pools: []string{fmt.Sprint(i)}})
	}
	if st := a.Stats(); st.Dropped != 3 {
		t.Fatalf("dropped %d, want 3", st.Dropped)
	}
	done := make(chan error, 1)
	go func() { done <- a.Listen(context.Background(), func(ports.ClusterMessage) {}) }()
	waitListening(t, a, 0)
	if err := a.Close(); err != nil { // sends what is queued
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, domain.ErrClosed) {
		t.Fatalf("Listen after Close = %v, want ErrClosed", err)
	}
	msgs := in.waitFor(t, "the queued messages", func(ms []ports.ClusterMessage) bool { return len(ms) == 1 })
	if fmt.Sprint(msgs[0].Pools) != "[0 1]" {
		t.Fatalf("B received %+v, want the two queued messages merged", msgs)
	}
	a.Broadcast(ports.ClusterMessage{Pools: []string{"late"}}) // after Close: dropped, no panic
	if st := a.Stats(); st.Dropped != 4 {
		t.Fatalf("dropped %d after Close, want 4", st.Dropped)
	}
	if err := a.Listen(t.Context(), func(ports.ClusterMessage) {}); !errors.Is(err, domain.ErrClosed) {
		t.Fatalf("Listen on a closed store = %v", err)
	}
}

func TestPoolMembers(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	a := openStore(t, schema, "a:1", nil)
	b := openStore(t, schema, "b:1", nil)
	m1 := &ports.PoolMember{PoolID: "p1", MemberID: "m1", Address: "http://10.0.0.1:80", CapacityRPS: 10, HeartbeatInterval: 5 * time.Second}
	created, err := a.PutMember(t.Context(), m1)
	if err != nil || !created || m1.LastSeen.IsZero() {
		t.Fatalf("PutMember(new) = %v, %v; LastSeen %v", created, err, m1.LastSeen)
	}
	first := m1.LastSeen
	for _, m := range []*ports.PoolMember{{PoolID: "p1", MemberID: "m2", Address: "http://10.0.0.2:80", CapacityRPS: 5},
		{PoolID: "p2", MemberID: "m1", Address: "http://10.0.0.3:80", CapacityRPS: 1}} {
		if created, err := b.PutMember(t.Context(), m); err != nil || !created {
			t.Fatalf("PutMember(%s/%s) = %v, %v", m.PoolID, m.MemberID, created, err)
		}
	}
	// The pool lane's holder saves the state it keeps.
	state := ports.PoolMember{PoolID: "p1", MemberID: "m1", Reputation: 0.5, Probation: 2, EffectiveRPS: 7.5, InFlight: 3,
		Paused: true, Picks: 100, Successes: 90, Failures: 10}
	if err := a.SaveMemberStates(t.Context(), []ports.PoolMember{state}); err != nil {
		t.Fatal(err)
	}
	// A heartbeat through another process overwrites address and capacity
	// and keeps the state.
	beat := &ports.PoolMember{PoolID: "p1", MemberID: "m1", Address: "http://10.0.0.9:80", CapacityRPS: 20, HeartbeatInterval: time.Second}
	if created, err := b.PutMember(t.Context(), beat); err != nil || created {
		t.Fatalf("heartbeat = %v, %v; want an update", created, err)
	}
	if beat.LastSeen.Before(first) {
		t.Fatalf("LastSeen went back: %v after %v", beat.LastSeen, first)
	}
	got, err := a.Members(t.Context(), "p1")
	if err != nil || len(got) != 2 {
		t.Fatalf("Members(p1) = %+v, %v", got, err)
	}
	want := state
	want.Address, want.CapacityRPS, want.HeartbeatInterval, want.LastSeen = beat.Address, 20, time.Second, beat.LastSeen
	if got[0].LastSeen.Equal(want.LastSeen) {
		got[0].LastSeen = want.LastSeen // same instant, maybe another location
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(want) || got[1].MemberID != "m2" || got[1].Reputation != 0 {
		t.Fatalf("Members(p1) = %+v\nwant first %+v", got, want)
	}
	if all, err := b.Members(t.Context(), ""); err != nil || len(all) != 3 || all[2].PoolID != "p2" {
		t.Fatalf("Members(all) = %+v, %v", all, err)
	}
	// A deleted member stays deleted when a late state save names it.
	if ok, err := b.DeleteMember(t.Context(), "p1", "m2"); err != nil || !ok {
		t.Fatalf("DeleteMember = %v, %v", ok, err)
	}
	if ok, err := b.DeleteMember(t.Context(), "p1", "m2"); err != nil || ok {
		t.Fatalf("second DeleteMember = %v, %v; want false", ok, err)
	}
	late := []ports.PoolMember{{PoolID: "p1", MemberID: "m2", Reputation: 1}, {PoolID: "p1", MemberID: "m1", Reputation: 0.25},
		{PoolID: "p1", MemberID: "m1", Reputation: 0.75}}
	if err := a.SaveMemberStates(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	got, err = a.Members(t.Context(), "p1")
	if err != nil || len(got) != 1 || got[0].MemberID != "m1" || got[0].Reputation != 0.25 {
		t.Fatalf("after the late save: %+v, %v; want m1 alone, with its first listed state", got, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Members(t.Context(), ""); !errors.Is(err, domain.ErrClosed) {
		t.Fatalf("Members after Close = %v", err)
	}
}
