package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// summary is what the x/ and i/ entries carry of their job: enough to apply
// every filter but q (and, in i/ entries, status and response status)
// without loading the record.
type summary struct {
	created  int64 // Unix ms
	resp     int64 // the result's HTTP status (x/ entries only; 0 without a result)
	id       []byte
	user     []byte
	upstream []byte
	pool     []byte
}

// respStatus is the response status a summary records for j.
func respStatus(j *domain.Job) int64 {
	if j.Result == nil {
		return 0
	}
	return int64(j.Result.ResponseStatus)
}

// appendSummary appends the i/ value of j: created, then id, user_id,
// upstream and pool id as length-prefixed strings. The x/ value is the same
// followed by the response status (appendStatusValue).
func appendSummary(b []byte, j *domain.Job) []byte {
	b = binary.AppendVarint(b, storekit.Millis(j.CreatedAt))
	b = appendString(b, string(j.ID))
	b = appendString(b, j.UserID)
	b = appendString(b, string(j.Queue.Upstream()))
	return appendString(b, j.PoolID)
}

func appendStatusValue(b []byte, j *domain.Job) []byte {
	return binary.AppendVarint(appendSummary(b, j), respStatus(j))
}

// parseSummary reads an i/ value, or with resp an x/ value. Its byte
// slices alias v.
func parseSummary(v []byte, resp bool) (summary, bool) {
	r := decoder{b: v}
	var s summary
	s.created = r.varint()
	s.id, s.user, s.upstream, s.pool = r.bytes(), r.bytes(), r.bytes(), r.bytes()
	if resp {
		s.resp = r.varint()
	}
	return s, !r.bad && r.off == len(v)
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
// summary holds, exactly as domain.JobFilter.Matches decides them; the
// response status only if withResp (s is from an x/ entry). The record
// decides the rest: q, expiry, and the status of an i/ entry.
func (s *summary) passes(q *query, withResp bool) bool {
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
	case withResp && f.ResponseStatus != 0 && s.resp != int64(f.ResponseStatus):
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
	if w.counts == nil {
		w.counts = make(map[counter]int64)
	}
	w.counts[counter{dimAll, "", st}] += d
	dims(j, func(dim byte, value string) { w.counts[counter{dim, value, st}] += d })
}

// putIndexes writes the x/ and i/ entries and counts of j, a new job when
// old is nil, otherwise a changed copy of old. A job's i/ entries never
// change (user, queue and seq are fixed); its x/ entry moves when its
// status changes and is rewritten when its response status does.
func (w *wbatch) putIndexes(old, j *domain.Job) {
	s := w.s
	st := statusCode(j.Status)
	if old == nil {
		s.sbuf = appendSummary(s.sbuf[:0], j)
		dims(j, func(dim byte, value string) {
			s.kbuf = indexKey(s.kbuf[:0], dim, value, j.Seq)
			w.set(s.kbuf, s.sbuf)
		})
	} else {
		ost := statusCode(old.Status)
		if ost == st && respStatus(old) == respStatus(j) {
			return
		}
		if ost != st {
			s.kbuf = statusKey(s.kbuf[:0], ost, old.Seq)
			w.del(s.kbuf)
			w.count(old, ost, -1)
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
	w.del(statusKey(w.s.kbuf[:0], st, j.Seq))
	dims(j, func(dim byte, value string) { w.del(indexKey(w.s.kbuf[:0], dim, value, j.Seq)) })
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
