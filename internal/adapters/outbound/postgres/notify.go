package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Cluster messages (Broadcast, Listen) travel over LISTEN/NOTIFY on one
// channel per database and schema. Broadcast only queues; the notifier
// goroutine collects what was queued for NotifyInterval, merges it into as
// few JSON payloads as fit PostgreSQL's payload limit, and sends them with
// pg_notify in one transaction. Listen holds a connection of its own.

// maxPayload bounds one NOTIFY payload in bytes. PostgreSQL refuses payloads
// of 8000 bytes or more; the margin is for nothing in particular but costs
// nothing either.
const maxPayload = 7900

// listenCheck is how long Listen waits for a notification before checking
// that its connection still works (a connection to a host that vanished may
// otherwise wait forever).
const listenCheck = 30 * time.Second

// channelName returns the notification channel of a schema: "aquifer", or
// "aquifer_<schema>" so that deployments (and tests) in different schemas of
// one database do not hear each other; a schema name too long for an
// identifier is replaced by a hash of it.
func channelName(schema string) string {
	if schema == "" {
		return "aquifer"
	}
	if name := "aquifer_" + schema; len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(schema))
	return "aquifer_" + hex.EncodeToString(sum[:16])
}

// wireMessage is a payload: short field names, and events without results.
type wireMessage struct {
	From   string      `json:"f"`
	Events []wireEvent `json:"e"`
	Work   []wireWork  `json:"w"`
	Pools  []string    `json:"p"`
	Pauses bool        `json:"z,omitempty"` // in every payload of a message that has it
}

type wireEvent struct {
	Type     domain.EventType `json:"t"`
	JobID    domain.JobID     `json:"j"`
	Position int              `json:"n,omitempty"`
	Attempt  int              `json:"a,omitempty"`
}

type wireWork struct {
	Queue    domain.QueueKey `json:"l"`
	ReadySeq int64           `json:"s"`
}

// Broadcast implements ports.Cluster. It never blocks: the message is copied
// (events without their Result) into a bounded buffer, or dropped and
// counted in Stats.Dropped when the buffer is full or the store closed.
func (s *Store) Broadcast(m ports.ClusterMessage) {
	if len(m.Events)+len(m.Work)+len(m.Pools) == 0 && !m.Pauses {
		return
	}
	if s.isClosed() {
		s.dropped.Add(1)
		return
	}
	c := ports.ClusterMessage{From: s.opts.Owner, Work: append([]ports.WorkNotice(nil), m.Work...),
		Pools: append([]string(nil), m.Pools...), Pauses: m.Pauses}
	if len(m.Events) > 0 {
		c.Events = make([]domain.Event, len(m.Events))
		for i, e := range m.Events {
			e.Result = nil
			c.Events[i] = e
		}
	}
	select {
	case s.outbox <- c:
		select {
		case s.kick <- struct{}{}:
		default: // the notifier is awake already
		}
	default:
		s.dropped.Add(1)
	}
}

// notifier sends what Broadcast queued: woken by the first message, it waits
// NotifyInterval for more and sends them all. It does not tick while idle.
// On Close it sends what is left and stops.
func (s *Store) notifier() {
	defer close(s.notifyDone)
	for {
		select {
		case <-s.kick:
		case <-s.w.Closing():
			s.flushNotify(min(s.opts.Timeout, 2*time.Second))
			return
		}
		t := time.NewTimer(s.opts.NotifyInterval)
		select {
		case <-t.C:
		case <-s.w.Closing():
			t.Stop()
		}
		s.flushNotify(s.opts.Timeout)
	}
}

// flushNotify sends every queued message, within timeout. A failed send
// drops them (the messages are best effort: see ports.Cluster.Broadcast).
func (s *Store) flushNotify(timeout time.Duration) {
	var msgs []ports.ClusterMessage
	for len(msgs) < cap(s.outbox) {
		select {
		case m := <-s.outbox:
			msgs = append(msgs, m)
			continue
		default:
		}
		break
	}
	if len(msgs) == 0 {
		return
	}
	payloads, tooLarge := encodePayloads(s.opts.Owner, merge(msgs), maxPayload)
	if tooLarge > 0 {
		s.dropped.Add(int64(tooLarge))
		s.log.Warn("dropped cluster message parts too large for a NOTIFY payload", zap.Int("parts", tooLarge))
	}
	if len(payloads) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, p := range payloads {
		b.Queue("SELECT pg_notify($1, $2)", s.channel, p)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		s.dropped.Add(int64(len(msgs)))
		s.log.Warn("sending cluster messages failed; peers catch up at their next lease sync",
			zap.Int("messages", len(msgs)), zap.Error(err))
		return
	}
	s.notified.Add(int64(len(payloads)))
}

// merge folds messages into one: events in order, one work notice per lane
// with the smallest ReadySeq (the holder re-reads from the smallest, which
// covers the others), each pool once, and a change of the lane pauses if
// any message had one.
func merge(msgs []ports.ClusterMessage) ports.ClusterMessage {
	var out ports.ClusterMessage
	work := map[domain.QueueKey]int{}
	pools := map[string]bool{}
	for _, m := range msgs {
		out.Pauses = out.Pauses || m.Pauses
		out.Events = append(out.Events, m.Events...)
		for _, w := range m.Work {
			if i, ok := work[w.Queue]; ok {
				out.Work[i].ReadySeq = min(out.Work[i].ReadySeq, w.ReadySeq)
				continue
			}
			work[w.Queue] = len(out.Work)
			out.Work = append(out.Work, w)
		}
		for _, p := range m.Pools {
			if !pools[p] {
				pools[p] = true
				out.Pools = append(out.Pools, p)
			}
		}
	}
	return out
}

// payloadBuilder packs JSON fragments into payloads of at most limit bytes.
type payloadBuilder struct {
	from     []byte // the From field, JSON-encoded
	pauses   bool   // every payload says the lane pauses changed
	limit    int
	lists    [3][][]byte // events, work, pools
	size     int         // the payload's length with the fragments so far
	payloads []string
	tooLarge int
}

const (
	listEvents = iota
	listWork
	listPools
)

func (b *payloadBuilder) empty() int {
	n := len(`{"f":,"e":[],"w":[],"p":[]}`) + len(b.from)
	if b.pauses {
		n += len(`,"z":true`)
	}
	return n
}

// add appends one fragment to list, starting a new payload when it would not
// fit; a fragment that fits no payload is counted and left out.
func (b *payloadBuilder) add(list int, frag []byte) {
	if b.empty()+len(frag) > b.limit {
		b.tooLarge++
		return
	}
	extra := len(frag)
	if len(b.lists[list]) > 0 {
		extra++ // the comma
	}
	if b.size+extra > b.limit {
		b.flush()
		extra = len(frag)
	}
	b.lists[list] = append(b.lists[list], frag)
	b.size += extra
}

func (b *payloadBuilder) flush() {
	// A change of the pauses alone still makes a payload.
	if len(b.lists[0])+len(b.lists[1])+len(b.lists[2]) > 0 || (b.pauses && len(b.payloads) == 0) {
		var buf bytes.Buffer
		buf.Grow(b.size)
		buf.WriteString(`{"f":`)
		buf.Write(b.from)
		for i, name := range []string{`,"e":[`, `],"w":[`, `],"p":[`} {
			buf.WriteString(name)
			buf.Write(bytes.Join(b.lists[i], []byte{','}))
		}
		buf.WriteString(`]`)
		if b.pauses {
			buf.WriteString(`,"z":true`)
		}
		buf.WriteString(`}`)
		b.payloads = append(b.payloads, buf.String())
	}
	b.lists = [3][][]byte{}
	b.size = b.empty()
}

// encodePayloads splits m into JSON payloads of at most limit bytes each
// (wireMessage), and reports how many fragments were too large for any.
func encodePayloads(from string, m ports.ClusterMessage, limit int) ([]string, int) {
	f, _ := json.Marshal(from) // a string always encodes
	b := &payloadBuilder{from: f, pauses: m.Pauses, limit: limit}
	b.size = b.empty()
	// Work and pool notices first: they are what peers act on.
	for _, w := range m.Work {
		frag, _ := json.Marshal(wireWork(w))
		b.add(listWork, frag)
	}
	for _, p := range m.Pools {
		frag, _ := json.Marshal(p)
		b.add(listPools, frag)
	}
	for _, e := range m.Events {
		frag, _ := json.Marshal(wireEvent{Type: e.Type, JobID: e.JobID, Position: e.Position, Attempt: e.Attempt})
		b.add(listEvents, frag)
	}
	b.flush()
	return b.payloads, b.tooLarge
}

// decodePayload turns a payload back into a message.
func decodePayload(payload string) (ports.ClusterMessage, error) {
	var w wireMessage
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		return ports.ClusterMessage{}, err
	}
	m := ports.ClusterMessage{From: w.From, Pools: w.Pools, Pauses: w.Pauses}
	for _, e := range w.Events {
		m.Events = append(m.Events, domain.Event{Type: e.Type, JobID: e.JobID, Position: e.Position, Attempt: e.Attempt})
	}
	for _, x := range w.Work {
		m.Work = append(m.Work, ports.WorkNotice(x))
	}
	return m, nil
}

// Listen implements ports.Cluster. It holds a connection of its own (not
// one of the pool's) listening on the store's channel, and calls deliver, on
// its own goroutine and one message at a time, for every message another
// process sent; deliver should return quickly. After a connection error it
// reconnects, backing off from 100ms to 5s; messages sent meanwhile are
// missed (they are best effort). It returns nil when ctx ends, and
// domain.ErrClosed when the store is closed.
func (s *Store) Listen(ctx context.Context, deliver func(ports.ClusterMessage)) error {
	if s.isClosed() {
		return domain.ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { // ends the listen when the store closes
		defer close(watchDone)
		select {
		case <-s.w.Closing():
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(); <-watchDone }()

	backoff := 100 * time.Millisecond
	for {
		err := s.listenOnce(ctx, deliver, func() { backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			if s.isClosed() {
				return domain.ErrClosed
			}
			return nil
		}
		s.log.Warn("listening for cluster messages failed; reconnecting", zap.Duration("in", backoff), zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce connects, listens and delivers until the connection fails or
// ctx ends. listening is called once the LISTEN is in place.
func (s *Store) listenOnce(ctx context.Context, deliver func(ports.ClusterMessage), listening func()) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	}
	cancel()
	if conn != nil {
		defer func() {
			s.listenPID.Store(0)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}()
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.channel, err)
	}
	s.listenPID.Store(conn.PgConn().PID())
	listening()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenCheck)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// Quiet for a while: make sure the connection still works.
			pctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("check the listening connection: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for notifications: %w", err)
		}
		if n.Channel != s.channel {
			continue
		}
		m, err := decodePayload(n.Payload)
		if err != nil {
			s.log.Warn("ignored an unreadable cluster message", zap.Int("bytes", len(n.Payload)), zap.Error(err))
			continue
		}
		if m.From == s.opts.Owner {
			continue
		}
		s.delivered.Add(1)
		deliver(m)
	}
}
