package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// recordVersion is the first byte of every record this package writes.
// Version 4 (layout 6) keeps a request body of more than maxInlineBody
// bytes under its own key (b/), not in the record. Version 3 and older
// records hold every body inline; version 1 records (layout 2) lack the history too, version 2
// records (layout 3) the job options. All are read as they are (a version
// 2 record is a job with no options) and rewritten as version 4 when the
// job next changes, the body moving out to b/ then.
const (
	recordVersion   = 4
	recordVersionV3 = 3
	recordVersionV2 = 2
	recordVersionV1 = 1
)

// maxInlineBody is the longest request body a version 4 record holds
// inline; a longer one is under b/. Part of the format: a record of
// version 4 says only the body's length, and the length says where it is.
// A key of its own costs a job about 40 bytes more of WAL and tables (the
// key and its single delete) and a memtable insert, which the body's bytes
// saved on each later write of the record (three in a lifecycle with a
// webhook) repay only from a few tens of bytes on.
const maxInlineBody = 64

// bodyRef is where a record's request body is: whether the job has one
// (nil vs empty: flag bit 1), its length, and whether the record holds it
// (every body in versions 1 to 3, one of at most maxInlineBody bytes in
// version 4; a full decode copies it into the job) or a b/ key does. The
// body never changes once the job is stored, so a rewrite of the record
// keeps its bodyRef (a long body of an older record excepted, which moves
// out: update).
type bodyRef struct {
	present bool
	n       int
	inline  bool
}

// apart reports whether the body is under the job's b/ key.
func (r bodyRef) apart() bool { return !r.inline }

// refOf is the bodyRef of a new job's body, b: in the record if it is at
// most maxInlineBody bytes, under b/ otherwise.
func refOf(b []byte) bodyRef {
	return bodyRef{present: b != nil, n: len(b), inline: len(b) <= maxInlineBody}
}

const (
	flagHeaders = 1 << iota
	flagBody
	flagResult
	flagResultBody
	flagTruncated
	flagDelivery
	flagSchedule // version 3 on: not_before, deadline and priority follow the history
	flagOptions  // version 3 on: the retry policy, timeout and trace context follow
)

// Status codes, shared by records and the ready index's state byte.
const (
	stQueued    byte = 'q'
	stInFlight  byte = 'f'
	stCompleted byte = 'c'
	stFailed    byte = 'x'
	stDeliver   byte = 'd' // ready index only: the result waits for delivery
)

const (
	dlPending   byte = 'p'
	dlDelivered byte = 'd'
	dlFailed    byte = 'x'
)

var errCorrupt = errors.New("corrupt job record")

func statusCode(s domain.Status) byte {
	switch s {
	case domain.StatusQueued:
		return stQueued
	case domain.StatusInFlight:
		return stInFlight
	case domain.StatusCompleted:
		return stCompleted
	case domain.StatusFailed:
		return stFailed
	}
	return 0
}

func statusOf(c byte) (domain.Status, bool) {
	switch c {
	case stQueued:
		return domain.StatusQueued, true
	case stInFlight:
		return domain.StatusInFlight, true
	case stCompleted:
		return domain.StatusCompleted, true
	case stFailed:
		return domain.StatusFailed, true
	}
	return "", false
}

func deliveryCode(s domain.DeliveryStatus) byte {
	switch s {
	case domain.DeliveryPending:
		return dlPending
	case domain.DeliveryDelivered:
		return dlDelivered
	case domain.DeliveryFailed:
		return dlFailed
	}
	return 0
}

func deliveryOf(c byte) (domain.DeliveryStatus, bool) {
	switch c {
	case dlPending:
		return domain.DeliveryPending, true
	case dlDelivered:
		return domain.DeliveryDelivered, true
	case dlFailed:
		return domain.DeliveryFailed, true
	}
	return "", false
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encodeJob appends the version 4 record of j to b, whose request body is
// as body says: j.Body, of body.n bytes, when the record holds it
// (body.inline, which must agree with maxInlineBody); otherwise j.Body is
// not looked at, the body being under its b/ key, which the caller writes
// (a record rewritten by a later write keeps the bodyRef it had). Fields
// with no valid encoding (an unknown status, encodable) are an error, so a
// record that is written can always be read back.
func encodeJob(b []byte, j *domain.Job, body bodyRef) ([]byte, error) {
	if err := encodable(j); err != nil {
		return b, err
	}
	if body.inline != (body.n <= maxInlineBody) || (body.inline && len(j.Body) != body.n) || (!body.present && body.n != 0) {
		return b, fmt.Errorf("encode job %s: request body of %d bytes held as %+v", j.ID, len(j.Body), body)
	}
	st := statusCode(j.Status)
	var flags, dl byte
	if j.Headers != nil {
		flags |= flagHeaders
	}
	if body.present {
		flags |= flagBody
	}
	r, d := j.Result, j.Delivery
	if r == nil {
		r = &domain.Result{}
	} else {
		flags |= flagResult
		if r.Body != nil {
			flags |= flagResultBody
		}
		if r.BodyTruncated {
			flags |= flagTruncated
		}
	}
	if d == nil {
		d = &domain.Delivery{}
	} else {
		flags |= flagDelivery
		dl = deliveryCode(d.Status)
	}
	o := &j.JobOptions
	// A plain job (most) spends no byte on options: the flags say there
	// are none.
	if !o.NotBefore.IsZero() || !o.Deadline.IsZero() || o.Priority != domain.PriorityNormal {
		flags |= flagSchedule
	}
	if !o.Plain() {
		flags |= flagOptions
	}
	b = append(b, recordVersion, flags, st, dl)
	b = binary.AppendUvarint(b, uint64(j.Seq))
	b = binary.AppendUvarint(b, uint64(j.ReadySeq))
	b = binary.AppendVarint(b, int64(j.Attempts))
	b = binary.AppendVarint(b, int64(j.Deferrals))
	b = binary.AppendVarint(b, storekit.Millis(j.CreatedAt))
	b = binary.AppendVarint(b, storekit.Millis(j.UpdatedAt))
	b = binary.AppendVarint(b, storekit.Millis(j.DispatchedAt))
	b = binary.AppendVarint(b, storekit.Millis(j.ExpiresAt))
	b = binary.AppendVarint(b, int64(r.ResponseStatus))
	b = binary.AppendVarint(b, int64(d.ResponseStatus))
	b = binary.AppendUvarint(b, uint64(d.Attempts))
	b = binary.AppendUvarint(b, uint64(body.n))
	b = binary.AppendUvarint(b, uint64(len(r.Body)))
	for _, s := range [...]string{string(j.ID), j.UserID, j.IdempotentKey, j.URL, j.PoolID, j.Method,
		j.WebhookURL, string(j.Queue), string(j.ReadyQueue), r.ContentType, r.Reason, d.Reason} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(j.Headers)))
	for k, v := range j.Headers {
		b = appendString(appendString(b, k), v)
	}
	b = binary.AppendUvarint(b, uint64(len(j.History)))
	for _, a := range j.History {
		b = binary.AppendVarint(b, storekit.Millis(a.At))
		b = binary.AppendVarint(b, a.Duration.Milliseconds())
		b = binary.AppendVarint(b, int64(a.Status))
		b = appendString(appendString(appendString(b, a.Error), a.Signal), a.Member)
	}
	if flags&flagSchedule != 0 {
		b = binary.AppendVarint(b, storekit.Millis(o.NotBefore))
		b = binary.AppendVarint(b, storekit.Millis(o.Deadline))
		b = binary.AppendVarint(b, int64(o.Priority))
	}
	if flags&flagOptions != 0 {
		b = binary.AppendVarint(b, int64(o.Retry.MaxAttempts))
		b = binary.AppendVarint(b, o.Retry.Backoff.Milliseconds())
		b = binary.AppendVarint(b, o.Retry.MaxBackoff.Milliseconds())
		b = binary.AppendVarint(b, o.Timeout.Milliseconds())
		b = appendString(appendString(b, o.TraceParent), o.TraceState)
	}
	if body.inline {
		b = append(b, j.Body...)
	}
	return append(b, r.Body...), nil
}

// encodable returns why j has no record encoding (an unknown status,
// delivery status or priority; a negative seq, ready seq or delivery
// attempt count), or nil.
func encodable(j *domain.Job) error {
	if statusCode(j.Status) == 0 {
		return fmt.Errorf("encode job %s: unknown status %q", j.ID, j.Status)
	}
	if d := j.Delivery; d != nil && deliveryCode(d.Status) == 0 {
		return fmt.Errorf("encode job %s: unknown delivery status %q", j.ID, d.Status)
	}
	if j.Seq < 0 || j.ReadySeq < 0 || (j.Delivery != nil && j.Delivery.Attempts < 0) {
		return fmt.Errorf("encode job %s: negative seq, ready seq or delivery attempts", j.ID)
	}
	if !j.Priority.Valid() {
		return fmt.Errorf("encode job %s: unknown priority %d", j.ID, j.Priority)
	}
	return nil
}

// decoder decodes the fixed part of a record. The first error sticks.
type decoder struct {
	b   []byte
	off int
	bad bool
}

func (r *decoder) byte() byte {
	if r.off >= len(r.b) {
		r.bad = true
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.off += n
	return v
}

func (r *decoder) varint() int64 {
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.off += n
	return v
}

// count reads a uvarint that must fit an int64.
func (r *decoder) count() int64 {
	v := r.uvarint()
	if v > math.MaxInt64 {
		r.bad = true
	}
	return int64(v)
}

// str returns the next string as a substring of s, which holds the same
// bytes as r.b up to where the bodies start.
func (r *decoder) str(s string) string {
	n := r.uvarint()
	if r.bad || r.off > len(s) || n > uint64(len(s)-r.off) {
		r.bad = true
		return ""
	}
	v := s[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

// decodeJob rebuilds a job from its record, and says where its request
// body is. A body the record holds (an older version's, or an empty one)
// is in the job; one under its b/ key (ref.apart()) is not: the caller
// reads it (loadJob) if it returns the job, or keeps ref for a rewrite. It
// copies everything it keeps, so val may be reused once it returns.
func decodeJob(val []byte) (*domain.Job, bodyRef, error) { return decodeRecord(val, true) }

// decodeMeta is decodeJob without the request and result bodies, headers
// and history, for filters and counts that look at a job without returning
// it.
func decodeMeta(val []byte) (*domain.Job, error) {
	j, _, err := decodeRecord(val, false)
	return j, err
}

func decodeRecord(val []byte, full bool) (*domain.Job, bodyRef, error) {
	var ref bodyRef
	if len(val) == 0 {
		return nil, ref, errCorrupt
	}
	version := val[0]
	if version < recordVersionV1 || version > recordVersion {
		return nil, ref, fmt.Errorf("job record version %d: %w (this build reads versions %d to %d)", val[0], errCorrupt,
			recordVersionV1, recordVersion)
	}
	r := decoder{b: val, off: 1}
	flags, stc, dlc := r.byte(), r.byte(), r.byte()
	if version < recordVersionV3 && flags&(flagSchedule|flagOptions) != 0 {
		return nil, ref, errCorrupt // older versions had no options
	}
	j := &domain.Job{}
	j.Seq = r.count()
	j.ReadySeq = r.count()
	j.Attempts = int(r.varint())
	j.Deferrals = int(r.varint())
	created, updated, dispatched, expires := r.varint(), r.varint(), r.varint(), r.varint()
	respStatus, dlResp := r.varint(), r.varint()
	dlAttempts := r.count()
	bodyLen, resBodyLen := r.count(), r.uvarint()
	ref = bodyRef{present: flags&flagBody != 0, n: int(bodyLen), inline: version < recordVersion || bodyLen <= maxInlineBody}
	inlineLen := uint64(0) // the request body's bytes in the record
	if ref.inline {
		inlineLen = uint64(bodyLen)
	}
	if rest := uint64(len(val) - r.off); r.bad || inlineLen > rest || resBodyLen > rest-inlineLen ||
		(!ref.present && bodyLen != 0) || bodyLen > math.MaxInt32 {
		return nil, ref, errCorrupt
	}
	bodyStart := len(val) - int(inlineLen+resBodyLen)
	s := string(val[:bodyStart]) // one copy for every string of the record
	var ctype, reason, dlReason string
	var id, lane, readyLane string
	id, j.UserID, j.IdempotentKey, j.URL = r.str(s), r.str(s), r.str(s), r.str(s)
	j.PoolID, j.Method, j.WebhookURL = r.str(s), r.str(s), r.str(s)
	lane, readyLane = r.str(s), r.str(s)
	ctype, reason, dlReason = r.str(s), r.str(s), r.str(s)
	nh := r.uvarint()
	if r.bad || r.off > bodyStart || nh > uint64(bodyStart-r.off)/2 {
		return nil, ref, errCorrupt
	}
	switch {
	case flags&flagHeaders != 0 && full:
		j.Headers = make(map[string]string, nh)
		for range nh {
			k := r.str(s)
			j.Headers[k] = r.str(s)
		}
	case flags&flagHeaders != 0:
		for range 2 * nh {
			r.str(s)
		}
	case nh != 0:
		r.bad = true
	}
	if version != recordVersionV1 {
		j.History = r.history(s, bodyStart, full)
	}
	if flags&flagSchedule != 0 {
		nb, dl, p := r.varint(), r.varint(), domain.Priority(r.varint())
		if !p.Valid() {
			r.bad = true
		}
		j.NotBefore, j.Deadline, j.Priority = storekit.FromMillis(nb), storekit.FromMillis(dl), p
	}
	if flags&flagOptions != 0 {
		j.Retry.MaxAttempts = int(r.varint())
		j.Retry.Backoff = time.Duration(r.varint()) * time.Millisecond
		j.Retry.MaxBackoff = time.Duration(r.varint()) * time.Millisecond
		j.Timeout = time.Duration(r.varint()) * time.Millisecond
		j.TraceParent, j.TraceState = r.str(s), r.str(s)
	}
	status, okStatus := statusOf(stc)
	if r.bad || r.off != bodyStart || !okStatus {
		return nil, ref, errCorrupt
	}
	j.ID, j.Queue, j.ReadyQueue, j.Status = domain.JobID(id), domain.QueueKey(lane), domain.QueueKey(readyLane), status
	j.CreatedAt, j.UpdatedAt, j.DispatchedAt, j.ExpiresAt = storekit.FromMillis(created), storekit.FromMillis(updated), storekit.FromMillis(dispatched), storekit.FromMillis(expires)
	if ref.present && full && ref.inline {
		j.Body = append(make([]byte, 0, inlineLen), val[bodyStart:bodyStart+int(inlineLen)]...)
	}
	if flags&flagResult != 0 {
		res := &domain.Result{ResponseStatus: int(respStatus), BodyTruncated: flags&flagTruncated != 0,
			ContentType: ctype, Reason: reason}
		if flags&flagResultBody != 0 && full {
			res.Body = append(make([]byte, 0, resBodyLen), val[bodyStart+int(inlineLen):]...)
		}
		j.Result = res
	}
	if flags&flagDelivery != 0 {
		ds, ok := deliveryOf(dlc)
		if !ok {
			return nil, ref, errCorrupt
		}
		j.Delivery = &domain.Delivery{Status: ds, Attempts: int(dlAttempts), ResponseStatus: int(dlResp), Reason: dlReason}
	}
	return j, ref, nil
}

// history reads a record's attempt history, keeping it if keep; nil when
// it has none. Each attempt takes at least 6 bytes, which bounds the count
// before anything is allocated.
func (r *decoder) history(s string, end int, keep bool) []domain.Attempt {
	n := r.uvarint()
	if r.bad || r.off > end || n > uint64(end-r.off)/6 {
		r.bad = true
		return nil
	}
	var h []domain.Attempt
	if keep && n > 0 {
		h = make([]domain.Attempt, n)
	}
	for i := range int(n) {
		at, d, st := r.varint(), r.varint(), r.varint()
		a := domain.Attempt{At: storekit.FromMillis(at), Duration: time.Duration(d) * time.Millisecond, Status: int(st)}
		a.Error, a.Signal, a.Member = r.str(s), r.str(s), r.str(s)
		if keep {
			h[i] = a
		}
	}
	return h
}

// readyState is the ready index's state byte for j.
func readyState(j *domain.Job) byte {
	switch {
	case j.Status == domain.StatusInFlight:
		return stInFlight
	case j.Status.Terminal():
		return stDeliver
	}
	return stQueued
}

// readyValue is the value of a ready-index entry.
func readyValue(b []byte, j *domain.Job) []byte {
	b = append(b, readyState(j))
	b = binary.BigEndian.AppendUint64(b, uint64(storekit.Millis(j.ExpiresAt)))
	return append(b, j.ID...)
}

// schedValue is the value of an s/ entry: the job's expiry (so Counts
// leaves out expired scheduled jobs without loading records) and its id.
func schedValue(b []byte, j *domain.Job) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(storekit.Millis(j.ExpiresAt))), j.ID...)
}

// parseSched splits an s/ value. id aliases v.
func parseSched(v []byte) (expiresMS int64, id []byte, ok bool) {
	if len(v) < 8 {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(v)), v[8:], true
}

// waitsWithDeadline reports whether j has a d/ entry: it has a deadline and
// is not finished (queued, scheduled or in flight). An in-flight job keeps
// its entry, so MarkInFlight and its requeue write nothing there; Overdue
// skips it by its record.
func waitsWithDeadline(j *domain.Job) bool { return !j.Deadline.IsZero() && !j.Status.Terminal() }

// parseReady splits a ready-index value. id aliases v.
func parseReady(v []byte) (state byte, expiresMS int64, id []byte, ok bool) {
	if len(v) < 9 {
		return 0, 0, nil, false
	}
	return v[0], int64(binary.BigEndian.Uint64(v[1:])), v[9:], true
}

// liveAt reports whether an expiry (Unix ms, 0 for none) lies after nowMS.
func liveAt(expiresMS, nowMS int64) bool { return expiresMS == 0 || expiresMS > nowMS }
