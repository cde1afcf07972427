package pebble

import (
	"encoding/binary"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// Key prefixes; see the package documentation for the layout.
var (
	prefixJob    = []byte("j/")
	prefixBody   = []byte("b/") // request bodies of version 4 records (layout 6)
	prefixKey    = []byte("k/")
	prefixReady  = []byte("r/")
	prefixSched  = []byte("s/") // scheduled jobs by (not_before, seq)
	prefixDue    = []byte("d/") // waiting jobs with a deadline, by (deadline, seq)
	prefixExpiry = []byte("e/") // finished jobs by expiry (a delivery pending excepted)
	prefixWait   = []byte("w/") // waiting jobs by expiry: what Counts counts (layout 5)
	prefixStatus = []byte("x/") // jobs by status, newest first
	prefixIndex  = []byte("i/") // jobs by user, destination or tenant, newest first
	prefixCount  = []byte("c/") // job counts per status, overall and per user, destination or tenant
	prefixOp     = []byte("o/") // bulk operations
	prefixPause  = []byte("p/") // paused destinations
	keySeq       = []byte("m/seq")
	keyFormat    = []byte("m/format")
	keyProbe     = []byte("m/probe") // written by write probes (CheckWrites); never read
)

// layoutVersion is the value of m/format: the key layout this build writes.
// Version 1 was a development snapshot (records keyed by seq, plus an
// index under i/ of another shape); such a store is refused, not misread.
// Version 2 had no listing indexes, counters, operations or pauses; a
// version 2 store is migrated when it is opened (migrate). Version 3 had
// no priority in the ready-index keys and no s/ or d/ index; it is
// migrated too (migrate3), a version 2 store first to 3 and then to 4.
// Version 4 had no count of pending deliveries (c/ under stDeliver), which
// Counts reads; it is migrated by counting them (migrate4). Version 5
// stores no record of version 4 (request bodies under b/), which an older
// build would misread; its records are read as they are, so only m/format
// changes (migrate5).
const (
	layoutVersion   = 6
	layoutVersionV5 = 5
	layoutVersionV4 = 4
	layoutVersionV3 = 3
	layoutVersionV2 = 2
)

// Dimensions of the i/ index and the c/ counters.
const (
	dimAll    byte = '*' // counters only: every job
	dimUser   byte = 'u' // the stored (scoped) user_id
	dimDest   byte = 'd' // the upstream of the job's queue
	dimTenant byte = 't' // the tenant of a scoped user_id
)

func jobKey(b []byte, id domain.JobID) []byte { return append(append(b, prefixJob...), id...) }

func jobKeyBytes(b, id []byte) []byte { return append(append(b, prefixJob...), id...) }

// bodyKey is the b/ key of a job's request body.
func bodyKey(b []byte, id domain.JobID) []byte { return append(append(b, prefixBody...), id...) }

func idemKey(b []byte, user, key string) []byte {
	b = binary.AppendUvarint(append(b, prefixKey...), uint64(len(user)))
	return append(append(b, user...), key...)
}

// lanePrefix is the prefix of every ready-index key of lane, whatever the
// priority.
func lanePrefix(b []byte, lane domain.QueueKey) []byte {
	b = binary.AppendUvarint(append(b, prefixReady...), uint64(len(lane)))
	return append(b, lane...)
}

// priorityCode is a priority's byte in ready-index keys: its Class (0
// high, 1 normal, 2 low), so that a lane's ranges sort high first.
func priorityCode(p domain.Priority) byte { return byte(p.Class()) }

// priorityPrefix is the prefix of the ready-index keys of lane's jobs of
// priority p: one ordered range per priority, which ListReady reads.
func priorityPrefix(b []byte, lane domain.QueueKey, p domain.Priority) []byte {
	return append(lanePrefix(b, lane), priorityCode(p))
}

func readyKey(b []byte, lane domain.QueueKey, p domain.Priority, readySeq int64) []byte {
	return binary.BigEndian.AppendUint64(priorityPrefix(b, lane, p), uint64(readySeq))
}

// parseReadyKey splits a ready-index key into its lane, priority code and
// ready seq.
func parseReadyKey(k []byte) (lane []byte, prio byte, readySeq int64, ok bool) {
	n, start, ok := readyLane(k)
	if !ok || uint64(len(k)-start) != n+9 {
		return nil, 0, 0, false
	}
	end := start + int(n)
	return k[start:end], k[end], int64(binary.BigEndian.Uint64(k[end+1:])), true
}

// readyLane reads the lane length of a ready-index key and where the lane
// starts. What follows the lane tells the layouts apart: its ready seq
// alone (8 bytes) in layout 3, a priority code and the seq (9) from layout
// 4 on.
func readyLane(k []byte) (n uint64, start int, ok bool) {
	if len(k) < len(prefixReady)+1+8 {
		return 0, 0, false
	}
	n, w := binary.Uvarint(k[len(prefixReady):])
	start = len(prefixReady) + w
	return n, start, w > 0 && n <= uint64(len(k)-start)
}

// timeKey appends a Unix ms time as 8 key bytes that sort by time,
// negative times first (the sign bit flipped).
func timeKey(b []byte, ms int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(ms)^(1<<63)) }

// schedKey is the s/ key of a scheduled job: due at notBeforeMS, then by
// seq, so PromoteDue reads the due jobs in (NotBefore, Seq) order.
func schedKey(b []byte, notBeforeMS, seq int64) []byte {
	return binary.BigEndian.AppendUint64(timeKey(append(b, prefixSched...), notBeforeMS), uint64(seq))
}

// dueKey is the d/ key of a waiting job whose deadline is deadlineMS, then
// by seq: Overdue reads them earliest deadline first.
func dueKey(b []byte, deadlineMS, seq int64) []byte {
	return binary.BigEndian.AppendUint64(timeKey(append(b, prefixDue...), deadlineMS), uint64(seq))
}

// parseTimeSeqKey splits an s/ or d/ key into its time (Unix ms) and seq.
func parseTimeSeqKey(k []byte) (ms, seq int64, ok bool) {
	if len(k) != 2+8+8 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[2:]) ^ (1 << 63)), int64(binary.BigEndian.Uint64(k[10:])), true
}

// expiryKey is the e/ key of a job expiring at expiresMS (never 0: jobs
// without expiry have no entry).
func expiryKey(b []byte, expiresMS int64, id domain.JobID) []byte {
	return expiryKeyIn(b, prefixExpiry, expiresMS, id)
}

// expiryKeyIn is expiryKey under prefix: e/ or w/.
func expiryKeyIn(b, prefix []byte, expiresMS int64, id domain.JobID) []byte {
	return append(timeKey(append(b, prefix...), expiresMS), id...)
}

// waiting reports whether Counts counts j: it waits for dispatch (queued,
// scheduled or not), is in flight, or its result waits for delivery.
func waiting(j *domain.Job) bool { return !j.Status.Terminal() || delivering(j) }

// expiryPrefixOf is the expiry index j's entry belongs in: w/ while it is
// waiting, e/ otherwise.
func expiryPrefixOf(j *domain.Job) []byte {
	if waiting(j) {
		return prefixWait
	}
	return prefixExpiry
}

// jobExpiryKey is j's entry in the expiry indexes, nil when it never
// expires.
func jobExpiryKey(b []byte, j *domain.Job) []byte {
	ms := storekit.Millis(j.ExpiresAt)
	if ms == 0 {
		return nil
	}
	return expiryKeyIn(b, expiryPrefixOf(j), ms, j.ID)
}

// parseExpiryKey splits an e/ or w/ key.
func parseExpiryKey(k []byte) (expiresMS int64, id domain.JobID, ok bool) {
	if len(k) < len(prefixExpiry)+8 {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint64(k[2:]) ^ (1 << 63)), domain.JobID(k[10:]), true
}

// descSeq is a seq as 8 key bytes that sort newest first.
func descSeq(b []byte, seq int64) []byte { return binary.BigEndian.AppendUint64(b, ^uint64(seq)) }

// seqOfDesc reads the seq from the last 8 bytes of a key made with descSeq.
func seqOfDesc(k []byte) (int64, bool) {
	if len(k) < 8 {
		return 0, false
	}
	return int64(^binary.BigEndian.Uint64(k[len(k)-8:])), true
}

// statusPrefix is the prefix of every x/ key of one status (a status code).
func statusPrefix(b []byte, st byte) []byte { return append(append(b, prefixStatus...), st) }

func statusKey(b []byte, st byte, seq int64) []byte { return descSeq(statusPrefix(b, st), seq) }

// dimPrefix is a dimension and its value, length-prefixed, as both the i/
// and the c/ keys hold them.
func dimPrefix(b, prefix []byte, dim byte, value string) []byte {
	b = binary.AppendUvarint(append(append(b, prefix...), dim), uint64(len(value)))
	return append(b, value...)
}

// indexPrefix is the prefix of every i/ key of one dimension value.
func indexPrefix(b []byte, dim byte, value string) []byte {
	return dimPrefix(b, prefixIndex, dim, value)
}

func indexKey(b []byte, dim byte, value string, seq int64) []byte {
	return descSeq(indexPrefix(b, dim, value), seq)
}

// countKey is the c/ key of the count of jobs in status st (a status code)
// with value in dimension dim ("" for dimAll).
func countKey(b []byte, dim byte, value string, st byte) []byte {
	return append(dimPrefix(b, prefixCount, dim, value), st)
}

func opKey(id string) []byte { return append(append([]byte(nil), prefixOp...), id...) }

func pauseKey(upstream domain.UpstreamKey) []byte {
	return append(append([]byte(nil), prefixPause...), upstream...)
}

func seqValue(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }

func parseSeq(v []byte) (int64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// prefixEnd returns the least key greater than every key starting with p, or
// nil if there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
