package pebble

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// summary is what an x/ entry carries of its job: enough to apply every
// filter but q without loading the record. (An i/ entry carries only the
// job id: its dimension and seq are in the key.)
type summary struct {
	created  int64 // Unix ms
	resp     int64 // the result's HTTP status (0 without a result)
	id       []byte
	user     []byte
	upstream []byte
	pool     []byte
	idBuf    [32]byte // holds id when it was packed
}

// respStatus is the response status a summary records for j.
func respStatus(j *domain.Job) int64 {
	if j.Result == nil {
		return 0
	}
	return int64(j.Result.ResponseStatus)
}

// appendStatusValue appends the x/ value of j: created, the job id
// (appendID), then user_id, upstream and pool id as length-prefixed
// strings, then the response status.
func appendStatusValue(b []byte, j *domain.Job) []byte {
	b = binary.AppendVarint(b, storekit.Millis(j.CreatedAt))
	b = appendID(b, j.ID)
	b = appendString(b, j.UserID)
	b = appendString(b, string(j.Queue.Upstream()))
	b = appendString(b, j.PoolID)
	return binary.AppendVarint(b, respStatus(j))
}

// appendID appends a job id as the index values hold it: 1 and its 16
// bytes for the 32 lowercase hex characters domain.IDGenerator makes, 0
// and the length-prefixed string for any other.
func appendID(b []byte, id domain.JobID) []byte {
	if domain.ValidJobID(string(id)) {
		b = append(b, 1)
		for i := 0; i < len(id); i += 2 {
			b = append(b, unhex(id[i])<<4|unhex(id[i+1]))
		}
		return b
	}
	return appendString(append(b, 0), string(id))
}

// unhex is the value of a lowercase hex digit.
func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// id reads a job id written by appendID; a packed one is expanded into
// buf. The result aliases the decoder's buffer or buf.
func (r *decoder) id(buf *[32]byte) []byte {
	switch r.byte() {
	case 1:
		if r.bad || len(r.b)-r.off < 16 {
			r.bad = true
			return nil
		}
		hex.Encode(buf[:], r.b[r.off:r.off+16])
		r.off += 16
		return buf[:]
	case 0:
		return r.bytes()
	}
	r.bad = true
	return nil
}

// parse reads an x/ value into s; its byte slices alias v or s.
func (s *summary) parse(v []byte) bool {
	r := decoder{b: v}
	s.created = r.varint()
	s.id = r.id(&s.idBuf)
	s.user, s.upstream, s.pool = r.bytes(), r.bytes(), r.bytes()
	s.resp = r.varint()
	return !r.bad && r.off == len(v)
}

// parseIndexValue reads the job id of an i/ value into buf.
func parseIndexValue(v []byte, buf *[32]byte) ([]byte, bool) {
	r := decoder{b: v}
	id := r.id(buf)
	return id, !r.bad && r.off == len(v)
}

// bytes returns the next length-prefixed string of the decoder's buffer,
// aliasing it.
func (r *decoder) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)-r.off) {
		r.bad = true
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

// scopeSep is the separator of a scoped name (domain.Scope).
var scopeSep = domain.Scope("t", "")[len("t"):]

// tenantOf returns the tenant of a stored user_id, or "" when it is not
// scoped. A filter's Tenant t selects exactly the user_ids whose tenantOf is
// t, as long as t holds no scope separator (a tenant name cannot; a filter
// whose tenant does is served by a scan).
func tenantOf(user string) string {
	t, _ := domain.Unscope(user)
	return t
}

// passes reports whether a job with summary s passes q's filters that the
// summary holds, exactly as domain.JobFilter.Matches decides them. The
// record decides the rest: q and expiry.
func (s *summary) passes(q *query) bool {
	f := q.f
	switch {
	case f.UserID != "" && string(s.user) != f.UserID:
		return false
	case q.tenantPrefix != nil && !bytes.HasPrefix(s.user, q.tenantPrefix):
		return false
	case f.Destination != "" && string(s.upstream) != string(f.Destination):
		return false
	case f.PoolID != "" && string(s.pool) != f.PoolID:
		return false
	case !f.CreatedAfter.IsZero() && !storekit.FromMillis(s.created).After(f.CreatedAfter):
		return false
	case !f.CreatedBefore.IsZero() && !storekit.FromMillis(s.created).Before(f.CreatedBefore):
		return false
	case f.ResponseStatus != 0 && s.resp != int64(f.ResponseStatus):
		return false
	}
	return true
}

// counter names one c/ count: of jobs in status st (a status code) with
// value in dimension dim.
type counter struct {
	dim   byte
	value string
	st    byte
}

// dims calls fn for each i/ dimension of j and its value there: user and
// destination always, tenant when the user_id is scoped.
func dims(j *domain.Job, fn func(dim byte, value string)) {
	fn(dimUser, j.UserID)
	fn(dimDest, string(j.Queue.Upstream()))
	if t := tenantOf(j.UserID); t != "" {
		fn(dimTenant, t)
	}
}

// count adds d to the counts of j in status st: overall and in each of its
// dimensions. The changes are summed over the group and written once per
// counter at its end (flushCounts).
func (w *wbatch) count(j *domain.Job, st byte, d int64) {
	w.add(counter{dimAll, "", st}, d)
	dims(j, func(dim byte, value string) { w.add(counter{dim, value, st}, d) })
}

// add adds d to counter c in the group's count changes.
func (w *wbatch) add(c counter, d int64) {
	if w.counts == nil {
		w.counts = make(map[counter]int64)
	}
	w.counts[c] += d
}

// deliveries is the counter of jobs whose result waits for webhook
// delivery (delivering), expired ones included until purged, as the
// status counters are. It exists overall only (no dimension), for Counts.
var deliveries = counter{dimAll, "", stDeliver}

// delivering reports whether j's result waits for webhook delivery: it is
// finished and still in a lane, which its ready-index entry records as
// stDeliver.
func delivering(j *domain.Job) bool { return j.ReadyQueue != "" && j.Status.Terminal() }

// countDelivery keeps the deliveries counter as j replaces old (nil for a
// new job).
func (w *wbatch) countDelivery(old, j *domain.Job) {
	switch was, is := old != nil && delivering(old), delivering(j); {
	case is && !was:
		w.add(deliveries, 1)
	case was && !is:
		w.add(deliveries, -1)
	}
}

// putIndexes writes the x/ and i/ entries and counts of j, a new job when
// old is nil, otherwise a changed copy of old. A job's i/ entries never
// change (user, queue and seq are fixed); its x/ entry moves when its
// status changes and is rewritten when its response status does. Each
// x/ and i/ key is set once and then single-deleted (sdel); the rewrite in
// place deletes it first, so that stays true.
func (w *wbatch) putIndexes(old, j *domain.Job) {
	s := w.s
	st := statusCode(j.Status)
	if old == nil {
		s.sbuf = appendID(s.sbuf[:0], j.ID)
		dims(j, func(dim byte, value string) {
			s.kbuf = indexKey(s.kbuf[:0], dim, value, j.Seq)
			w.set(s.kbuf, s.sbuf)
		})
	} else {
		ost := statusCode(old.Status)
		if ost == st && respStatus(old) == respStatus(j) {
			return
		}
		s.kbuf = statusKey(s.kbuf[:0], ost, old.Seq)
		if ost != st {
			w.sdel(s.kbuf)
			w.count(old, ost, -1)
		} else {
			w.del(s.kbuf) // rewritten in place: a plain delete keeps it one write since a delete
		}
	}
	if old == nil || statusCode(old.Status) != st {
		w.count(j, st, 1)
	}
	s.kbuf = statusKey(s.kbuf[:0], st, j.Seq)
	s.sbuf = appendStatusValue(s.sbuf[:0], j)
	w.set(s.kbuf, s.sbuf)
}

// removeIndexes deletes the x/ and i/ entries of j and takes it off the
// counts.
func (w *wbatch) removeIndexes(j *domain.Job) {
	st := statusCode(j.Status)
	w.sdel(statusKey(w.s.kbuf[:0], st, j.Seq))
	dims(j, func(dim byte, value string) { w.sdel(indexKey(w.s.kbuf[:0], dim, value, j.Seq)) })
	w.count(j, st, -1)
}

// flushCounts adds the group's count changes to the stored counts. A count
// that reaches zero is deleted, so users and destinations that no longer
// hold jobs leave nothing behind.
func (w *wbatch) flushCounts() {
	for c, d := range w.counts {
		if d == 0 {
			continue
		}
		k := countKey(nil, c.dim, c.value, c.st)
		v, err := get(w.b, k)
		if err != nil {
			w.fail(err)
			return
		}
		n, ok := parseCount(v)
		if !ok {
			w.fail(errCorruptCount)
			return
		}
		if n += d; n == 0 {
			w.del(k)
		} else {
			w.set(k, countValue(n))
		}
	}
}

// errCorruptCount is a c/ value that is not 8 bytes.
var errCorruptCount = errors.New("corrupt job count")

func countValue(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

// parseCount reads a c/ value; a missing one (nil) is 0.
func parseCount(v []byte) (int64, bool) {
	if v == nil {
		return 0, true
	}
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}
