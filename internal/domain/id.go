package domain

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
	"sync"
	"time"
)

// JobID identifies a job: 32 lowercase hex characters (16 bytes). The first 6
// bytes are the Unix time in milliseconds, big-endian, and the remaining 10 are
// random, so IDs sort by creation time; IDs made by one generator are strictly
// increasing even within a millisecond.
type JobID string

// String returns the ID as text.
func (id JobID) String() string { return string(id) }

// Time returns the creation time encoded in the ID, or the zero time for an
// ID that is not well formed.
func (id JobID) Time() time.Time {
	b, err := hex.DecodeString(string(id))
	if err != nil || len(b) != 16 {
		return time.Time{}
	}
	var ms [8]byte
	copy(ms[2:], b[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:])))
}

// ValidJobID reports whether s has the shape of a JobID. Adapters use it to
// answer 404 for garbage without touching the store.
func ValidJobID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IDGenerator makes monotonic, time-ordered JobIDs. The zero value is not
// usable; call NewIDGenerator.
type IDGenerator struct {
	mu     sync.Mutex
	now    func() time.Time
	rand   io.Reader
	lastMS uint64
	last   [10]byte
}

// NewIDGenerator returns a generator reading time from now (time.Now when nil)
// and randomness from crypto/rand.
func NewIDGenerator(now func() time.Time) *IDGenerator {
	if now == nil {
		now = time.Now
	}
	return &IDGenerator{now: now, rand: rand.Reader}
}

// New returns the next ID. If the clock has not advanced past the previous ID's
// millisecond (or went backwards), the random tail of the previous ID is
// incremented instead, keeping IDs strictly increasing.
func (g *IDGenerator) New() JobID {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := uint64(g.now().UnixMilli())
	if ms > g.lastMS {
		g.lastMS = ms
		if _, err := io.ReadFull(g.rand, g.last[:]); err != nil {
			panic("domain: crypto/rand failed: " + err.Error()) // the platform is broken
		}
		g.last[0] &= 0x7f // leave headroom so increments do not overflow in practice
	} else {
		increment(g.last[:])
	}
	var b [16]byte
	var msb [8]byte
	binary.BigEndian.PutUint64(msb[:], g.lastMS)
	copy(b[:6], msb[2:])
	copy(b[6:], g.last[:])
	return JobID(hex.EncodeToString(b[:]))
}

func increment(b []byte) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			return
		}
	}
}
