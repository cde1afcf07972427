package pebble

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// allStatuses are the status codes in the order counts and streams use.
var allStatuses = []byte{stQueued, stInFlight, stCompleted, stFailed}

// statusSlot is the position of a status code in allStatuses (-1 if none).
func statusSlot(st byte) int {
	for i, c := range allStatuses {
		if c == st {
			return i
		}
	}
	return -1
}

// query is a job filter prepared for the indexes.
type query struct {
	f            *domain.JobFilter
	tenantPrefix []byte // f.Tenant and the scope separator: the prefix of its users' user_ids
	statuses     []byte // the status codes f lists, every status when it names none
	none         bool   // f matches no job whatever is stored
}

func newQuery(f *domain.JobFilter) *query {
	q := &query{f: f, statuses: allStatuses}
	if f.Tenant != "" {
		q.tenantPrefix = []byte(f.Tenant + scopeSep)
		q.none = f.UserID != "" && !strings.HasPrefix(f.UserID, f.Tenant+scopeSep)
	}
	if len(f.Statuses) > 0 {
		q.statuses = nil
		for _, st := range allStatuses {
			if s, _ := statusOf(st); f.HasStatus(s) {
				q.statuses = append(q.statuses, st)
			}
		}
		q.none = q.none || len(q.statuses) == 0
	}
	return q
}

// dimRef is one value of an i/ dimension.
type dimRef struct {
	dim   byte
	value string
}

// dims are the i/ ranges that hold every job q can match. A user_id implies
// its tenant, so with both only the user counts.
func (q *query) dims() []dimRef {
	var out []dimRef
	f := q.f
	if f.UserID != "" {
		out = append(out, dimRef{dimUser, f.UserID})
	} else if f.Tenant != "" && !strings.Contains(f.Tenant, scopeSep) {
		out = append(out, dimRef{dimTenant, f.Tenant})
	}
	if f.Destination != "" {
		out = append(out, dimRef{dimDest, string(f.Destination)})
	}
	return out
}

// counted reports whether the counters answer q's count: at most one
// dimension and no other filter but statuses (dimAll for none).
func (q *query) counted() (dimRef, bool) {
	f := q.f
	if f.PoolID != "" || !f.CreatedAfter.IsZero() || !f.CreatedBefore.IsZero() || f.ResponseStatus != 0 || f.Q != "" {
		return dimRef{}, false
	}
	if f.Tenant != "" && f.UserID == "" && strings.Contains(f.Tenant, scopeSep) {
		return dimRef{}, false
	}
	switch d := q.dims(); len(d) {
	case 0:
		return dimRef{dimAll, ""}, true
	case 1:
		return d[0], true
	}
	return dimRef{}, false
}

// loadCost is what reading the record of an i/ entry costs against reading
// an x/ entry, in the planner's rough units; recordScanCost what reading and
// checking the next record of all in key order costs (countRecords).
// Measured with BenchmarkListJobs: 0.1 to 0.3 µs an x/ entry; the record
// of an i/ entry 3 to 5 µs over 100,000 jobs, 8 µs over 1,000,000 (most
// records no longer in the block cache); 1 to 2 µs a record in key order.
const (
	loadCost       = 32
	recordScanCost = 8
)

// plan picks the index range a listing or count of q walks: the x/ ranges
// of its statuses (dim 0), or the i/ range of one of its dimensions. It
// estimates, from the counters, how many entries each would read to find
// limit matches (math.MaxInt: all of them) and what rejecting the others
// costs — nothing for an x/ entry, whose summary decides; a record read for
// an i/ entry, which holds only the job id — and takes the cheapest. The
// estimate ignores the filters no counter covers (created, pool, response
// status, q).
func (q *query) plan(r reader, limit int) (dimRef, error) {
	all, err := readCounts(r, dimRef{dimAll, ""})
	if err != nil {
		return dimRef{}, err
	}
	entries := q.sum(all)
	matches := entries
	refs := q.dims()
	perDim := make([][4]int64, len(refs))
	for i, d := range refs {
		if perDim[i], err = readCounts(r, d); err != nil {
			return dimRef{}, err
		}
		matches = min(matches, q.sum(perDim[i]))
	}
	best, bestCost := dimRef{}, scanned(entries, matches, limit)
	if limit == math.MaxInt && q.f.Q != "" {
		bestCost *= recordScanCost // a q count reads the records in key order instead (countRecords)
	}
	for i, d := range refs {
		e := perDim[i][0] + perDim[i][1] + perDim[i][2] + perDim[i][3]
		n := scanned(e, matches, limit)
		rejected := n - min(float64(limit), float64(matches))
		if limit == math.MaxInt {
			rejected = n // a count needs every entry's status: a record read each
		}
		// On a tie one range beats merging the status ranges.
		if cost := n + max(rejected, 0)*loadCost; cost <= bestCost {
			best, bestCost = d, cost
		}
	}
	return best, nil
}

// sum adds up counts over q's statuses.
func (q *query) sum(c [4]int64) int64 {
	var n int64
	for _, st := range q.statuses {
		n += c[statusSlot(st)]
	}
	return n
}

// scanned estimates the entries read from a range of n entries, matches of
// them matching, to find limit matches, assuming matches spread evenly.
func scanned(n, matches int64, limit int) float64 {
	if limit == math.MaxInt || matches <= 0 {
		return float64(n)
	}
	return min(float64(n), float64(limit)*float64(n)/float64(matches))
}

// readCounts reads the c/ counts of one dimension value, by status slot.
// It reads them with point lookups, not an iterator: each counter is
// rewritten by nearly every group, and an iterator would step over every
// version of it still in the memtable, where a lookup goes to the newest.
func readCounts(r reader, d dimRef) ([4]int64, error) {
	var out [4]int64
	k := countKey(nil, d.dim, d.value, 0)
	for i, st := range allStatuses {
		k[len(k)-1] = st
		v, closer, err := r.Get(k)
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		n, ok := parseCount(v)
		if err := closer.Close(); err != nil || !ok {
			return out, errors.Join(err, errCorruptCount)
		}
		out[i] = n
	}
	return out, nil
}

// stream is one index range read newest first.
type stream struct {
	it     *pebble.Iterator
	status bool // an x/ range: the entries carry the response status
	valid  bool
	seq    int64
}

func (st *stream) next(first bool) {
	if first {
		st.valid = st.it.First()
	} else {
		st.valid = st.it.Next()
	}
	if st.valid {
		st.seq, st.valid = seqOfDesc(st.it.Key())
	}
}

// openStreams opens the ranges of driver d for q, from the newest job with
// Seq < before (0: from the newest).
func openStreams(r reader, q *query, d dimRef, before int64) ([]*stream, error) {
	var prefixes [][]byte
	if d.dim == 0 {
		for _, st := range q.statuses {
			prefixes = append(prefixes, statusPrefix(nil, st))
		}
	} else {
		prefixes = append(prefixes, indexPrefix(nil, d.dim, d.value))
	}
	var out []*stream
	for _, p := range prefixes {
		lower := p
		if before > 0 {
			lower = descSeq(append([]byte(nil), p...), before-1)
		}
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(p)})
		if err != nil {
			closeStreams(out)
			return nil, err
		}
		st := &stream{it: it, status: d.dim == 0}
		st.next(true)
		out = append(out, st)
	}
	return out, nil
}

func closeStreams(ss []*stream) error {
	var err error
	for _, s := range ss {
		err = errors.Join(err, s.it.Error(), s.it.Close())
	}
	return err
}

// newest returns the stream whose current entry is the newest job, or nil
// when every stream is spent.
func newest(ss []*stream) *stream {
	var top *stream
	for _, s := range ss {
		if s.valid && (top == nil || s.seq > top.seq) {
			top = s
		}
	}
	return top
}

// ListJobs implements ports.OperatorStore. It reads one snapshot, so index
// and records agree, and never the writer's batch: listing does not hold
// up ingest. The plan (package doc) walks one index range, or merges the
// status ranges, newest first; entries the summary rejects cost no record
// read.
func (s *Store) ListJobs(_ context.Context, p *ports.ListJobsParams) ([]*domain.Job, error) {
	limit := max(p.Limit, 1)
	q := newQuery(&p.Filter)
	if q.none {
		return nil, nil
	}
	var out []*domain.Job
	err := s.read(func() error {
		snap := s.db.NewSnapshot()
		defer snap.Close()
		d, err := q.plan(snap, limit)
		if err != nil {
			return err
		}
		ss, err := openStreams(snap, q, d, p.BeforeSeq)
		if err != nil {
			return err
		}
		recs, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
		if err != nil {
			return errors.Join(err, closeStreams(ss))
		}
		bodies := &bodyReader{r: snap}
		for len(out) < limit {
			cands, err := q.candidates(ss, limit-len(out))
			if err == nil && len(cands) == 0 {
				break
			}
			if err == nil {
				out, err = q.load(recs, bodies, cands, p, out)
			}
			if err != nil {
				return errors.Join(err, bodies.close(), recs.Close(), closeStreams(ss))
			}
		}
		return errors.Join(bodies.close(), recs.Close(), closeStreams(ss))
	})
	if err != nil {
		return nil, wrapRead("list jobs", err)
	}
	return out, nil
}

// candidate is a job a listing's index walk found: its record key and seq,
// and whether only its status byte remains to check before decoding (an
// i/ entry, whose status the index does not hold).
type candidate struct {
	key         []byte
	seq         int64
	checkStatus bool
}

// candidates takes up to n entries from the streams, newest first, that
// pass what their entries can tell of q.
func (q *query) candidates(ss []*stream, n int) ([]candidate, error) {
	var out []candidate
	var sum summary
	for top := newest(ss); top != nil && len(out) < n; top = newest(ss) {
		id, ok := top.id(&sum)
		if !ok {
			return nil, errCorruptIndex
		}
		if !top.status || sum.passes(q) {
			out = append(out, candidate{key: jobKeyBytes(nil, id), seq: top.seq, checkStatus: !top.status})
		}
		top.next(false)
	}
	return out, nil
}

// load reads the records of cands in key order through recs, so that each
// seek moves forward from the last (a page's newest jobs sit next to each
// other in j/), and appends those that match q and are live at p.Now to
// out, in the order of cands. The request bodies under b/ of the jobs it
// returns are read through bodies the same way (b/ keys are in the same
// order), from the same snapshot.
func (q *query) load(recs *pebble.Iterator, bodies *bodyReader, cands []candidate, p *ports.ListJobsParams, out []*domain.Job) ([]*domain.Job, error) {
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(cands[a].key, cands[b].key) })
	jobs := make([]*domain.Job, len(cands))
	for _, i := range order {
		c := cands[i]
		if !recs.SeekGE(c.key) || !bytes.Equal(recs.Key(), c.key) {
			return out, errors.Join(recs.Error(), errCorruptIndex)
		}
		v := recs.Value()
		if c.checkStatus && len(v) > 2 && !q.hasStatus(v[2]) {
			continue // the record's status byte, read without decoding it
		}
		j, ref, err := decodeJob(v)
		switch {
		case err != nil:
			return out, err
		case j.Seq != c.seq:
			return out, errCorruptIndex
		case j.Expired(p.Now) || !q.f.Matches(j):
			continue
		}
		if err := bodies.read(j, ref); err != nil {
			return out, err
		}
		jobs[i] = j
	}
	for _, j := range jobs {
		if j != nil {
			out = append(out, j)
		}
	}
	return out, nil
}

// id reads the job id of the stream's current entry, and for an x/ entry
// its summary into sum. The id aliases the entry or sum.
func (st *stream) id(sum *summary) ([]byte, bool) {
	if st.status {
		ok := sum.parse(st.it.Value())
		return sum.id, ok
	}
	return parseIndexValue(st.it.Value(), &sum.idBuf)
}

func (q *query) hasStatus(st byte) bool {
	for _, c := range q.statuses {
		if c == st {
			return true
		}
	}
	return false
}

// errCorruptIndex is an index entry that does not match a record.
var errCorruptIndex = errors.New("corrupt job index entry")

// CountJobs implements ports.OperatorStore. With no filter, or one of user,
// tenant or destination alone, the counters answer it: the c/ counts, less
// the jobs expired but not purged yet (found in the expiry index, at most a
// sweep interval's worth). Any other filter is counted by walking the
// cheapest index range (plan); a q filter loads the record of every job
// the other filters pass.
func (s *Store) CountJobs(_ context.Context, p *ports.CountJobsParams) (map[domain.Status]int64, error) {
	f := p.Filter
	f.Statuses = nil
	q := newQuery(&f)
	out := map[domain.Status]int64{}
	if q.none {
		return out, nil
	}
	var c [4]int64
	err := s.read(func() error {
		snap := s.db.NewSnapshot()
		defer snap.Close()
		var err error
		if d, ok := q.counted(); ok {
			c, err = q.countByCounters(snap, d, p)
		} else {
			c, err = q.countByScan(snap, p)
		}
		return err
	})
	if err != nil {
		return nil, wrapRead("count jobs", err)
	}
	for i, n := range c {
		if n > 0 {
			st, _ := statusOf(allStatuses[i])
			out[st] = n
		}
	}
	return out, nil
}

// countByCounters is the c/ counts of d less the expired jobs q matches.
func (q *query) countByCounters(r reader, d dimRef, p *ports.CountJobsParams) ([4]int64, error) {
	c, err := readCounts(r, d)
	if err != nil {
		return c, err
	}
	err = expired(r, p.Now, expiryPrefixes, func(j *domain.Job) {
		if q.f.MatchesIgnoringStatus(j) {
			c[statusSlot(statusCode(j.Status))]--
		}
	})
	return c, err
}

// countByScan counts q's jobs by walking the range plan picks.
func (q *query) countByScan(r reader, p *ports.CountJobsParams) ([4]int64, error) {
	d, err := q.plan(r, math.MaxInt)
	switch {
	case err != nil:
		return [4]int64{}, err
	case d.dim != 0:
		return q.countIndexRange(r, d, p)
	case q.f.Q != "":
		return q.countRecords(r, p)
	}
	return q.countStatusRanges(r, p)
}

// countStatusRanges counts q's jobs from the summaries of the four x/
// ranges, reading no record. The x/ entries do not carry expiry: the jobs
// the expiry index says have expired are left out.
func (q *query) countStatusRanges(r reader, p *ports.CountJobsParams) ([4]int64, error) {
	var c [4]int64
	gone := map[string]bool{}
	if err := expired(r, p.Now, expiryPrefixes, func(j *domain.Job) { gone[string(j.ID)] = true }); err != nil {
		return c, err
	}
	ss, err := openStreams(r, q, dimRef{}, 0)
	if err != nil {
		return c, err
	}
	var sum summary
	for i, st := range ss {
		for ; st.valid; st.next(false) {
			if !sum.parse(st.it.Value()) {
				return c, errors.Join(errCorruptIndex, closeStreams(ss))
			}
			if sum.passes(q) && !gone[string(sum.id)] {
				c[statusSlot(q.statuses[i])]++
			}
		}
	}
	return c, closeStreams(ss)
}

// countChunk is how many i/ entries countIndexRange sorts at a time.
const countChunk = 4096

// countIndexRange counts q's jobs in the i/ range of d, reading each
// entry's record (for its status, and the filters the entry does not
// hold). The records are read in chunks sorted by key, through one
// iterator, so that each seek moves forward from the last, which Pebble
// does much faster than as many point reads.
func (q *query) countIndexRange(r reader, d dimRef, p *ports.CountJobsParams) ([4]int64, error) {
	var c [4]int64
	ss, err := openStreams(r, q, d, 0)
	if err != nil {
		return c, err
	}
	recs, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
	if err != nil {
		return c, errors.Join(err, closeStreams(ss))
	}
	type ref struct {
		key []byte
		seq int64
	}
	st := ss[0]
	var buf [32]byte
	chunk := make([]ref, 0, countChunk)
	for st.valid {
		chunk = chunk[:0]
		for ; st.valid && len(chunk) < countChunk; st.next(false) {
			id, ok := parseIndexValue(st.it.Value(), &buf)
			if !ok {
				return c, errors.Join(errCorruptIndex, recs.Close(), closeStreams(ss))
			}
			chunk = append(chunk, ref{jobKeyBytes(nil, id), st.seq})
		}
		slices.SortFunc(chunk, func(a, b ref) int { return bytes.Compare(a.key, b.key) })
		for _, e := range chunk {
			if !recs.SeekGE(e.key) || !bytes.Equal(recs.Key(), e.key) {
				return c, errors.Join(recs.Error(), errCorruptIndex, recs.Close(), closeStreams(ss))
			}
			j, err := decodeMeta(recs.Value())
			switch {
			case err != nil:
				return c, errors.Join(err, recs.Close(), closeStreams(ss))
			case j.Seq != e.seq:
				return c, errors.Join(errCorruptIndex, recs.Close(), closeStreams(ss))
			case !j.Expired(p.Now) && q.f.MatchesIgnoringStatus(j):
				c[statusSlot(statusCode(j.Status))]++
			}
		}
	}
	return c, errors.Join(recs.Close(), closeStreams(ss))
}

// countRecords counts q's jobs by reading every record in key order: the
// plan of a q count that no dimension narrows (the substring needs the
// URL and the reason, which only records hold).
func (q *query) countRecords(r reader, p *ports.CountJobsParams) ([4]int64, error) {
	var c [4]int64
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixJob, UpperBound: prefixEnd(prefixJob)})
	if err != nil {
		return c, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		j, err := decodeMeta(it.Value())
		if err != nil {
			return c, errors.Join(err, it.Close())
		}
		if !j.Expired(p.Now) && q.f.MatchesIgnoringStatus(j) {
			c[statusSlot(statusCode(j.Status))]++
		}
	}
	return c, errors.Join(it.Error(), it.Close())
}

// expiryPrefixes are both expiry indexes: finished jobs (e/) and waiting
// ones (w/).
var expiryPrefixes = [][]byte{prefixExpiry, prefixWait}

// expired calls fn with every job that the expiry indexes under prefixes
// say has expired at now and that is still stored (not purged yet), read
// without bodies.
func expired(r reader, now time.Time, prefixes [][]byte, fn func(*domain.Job)) error {
	for _, prefix := range prefixes {
		upper := expiryKeyIn(nil, prefix, storekit.Millis(now)+1, "")
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			exp, id, ok := parseExpiryKey(it.Key())
			if !ok {
				continue
			}
			j, err := loadMeta(r, jobKey(nil, id))
			if err != nil {
				return errors.Join(err, it.Close())
			}
			// An entry whose job moved on is stale (Purge drops those).
			if j != nil && storekit.Millis(j.ExpiresAt) == exp && bytes.Equal(expiryPrefixOf(j), prefix) && j.Expired(now) {
				fn(j)
			}
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return err
		}
	}
	return nil
}

// loadMeta reads the record at key k without its bodies (decodeMeta); nil
// if there is none.
func loadMeta(g getter, k []byte) (*domain.Job, error) {
	v, closer, err := g.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	j, err := decodeMeta(v)
	if err != nil {
		return nil, err
	}
	return j, nil
}
