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
	keySeq       = []byte("m/seq")
	keyFormat    = []byte("m/format")
	keyProbe     = []byte("m/probe") // written by write probes (CheckWrites); never read
)

// layoutVersion is the value of m/format: the key layout this build writes.
// Version 1 was a development snapshot (records keyed by seq, plus an i/
// index); such a store is refused, not misread.
const layoutVersion = 2

func jobKey(b []byte, id domain.JobID) []byte { return append(append(b, prefixJob...), id...) }

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
