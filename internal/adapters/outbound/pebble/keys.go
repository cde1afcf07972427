package pebble

import (
	"encoding/binary"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Key prefixes; see the package documentation for the layout.
var (
	prefixJob    = []byte("j/")
	prefixKey    = []byte("k/")
	prefixReady  = []byte("r/")
	prefixExpiry = []byte("e/")
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
// version 2 store is migrated when it is opened (migrate).
const (
	layoutVersion   = 3
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

func idemKey(b []byte, user, key string) []byte {
	b = binary.AppendUvarint(append(b, prefixKey...), uint64(len(user)))
	return append(append(b, user...), key...)
}

// lanePrefix is the prefix of every ready-index key of lane.
func lanePrefix(b []byte, lane domain.QueueKey) []byte {
	b = binary.AppendUvarint(append(b, prefixReady...), uint64(len(lane)))
	return append(b, lane...)
}

func readyKey(b []byte, lane domain.QueueKey, readySeq int64) []byte {
	return binary.BigEndian.AppendUint64(lanePrefix(b, lane), uint64(readySeq))
}

// parseReadyKey splits a ready-index key into its lane and ready seq.
func parseReadyKey(k []byte) (lane []byte, readySeq int64, ok bool) {
	if len(k) < len(prefixReady)+1+8 {
		return nil, 0, false
	}
	n, w := binary.Uvarint(k[len(prefixReady):])
	start := len(prefixReady) + w
	if w <= 0 || uint64(len(k)-start) != n+8 {
		return nil, 0, false
	}
	return k[start : start+int(n)], int64(binary.BigEndian.Uint64(k[start+int(n):])), true
}

// expiryKey is the e/ key of a job expiring at expiresMS (never 0: jobs
// without expiry have no entry).
func expiryKey(b []byte, expiresMS int64, id domain.JobID) []byte {
	b = binary.BigEndian.AppendUint64(append(b, prefixExpiry...), uint64(expiresMS)^(1<<63))
	return append(b, id...)
}

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
