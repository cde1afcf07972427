package domain

import (
	"math"
	"strings"
	"time"
)

// Pool membership limits and defaults (BEHAVIOR.md §8).
const (
	DefaultHeartbeatInterval = 30 * time.Second
	MaxHeartbeatInterval     = time.Hour
	MaxMemberIDLen           = 128
	MaxCapacityRPS           = 1_000_000
)

// MemberRegistration is a pool member announcing itself (first time) or
// heartbeating (every time after).
type MemberRegistration struct {
	PoolID            string
	MemberID          string
	Address           string  // the complete URL pool jobs are sent to
	CapacityRPS       float64 // what the member says it can take
	HeartbeatInterval time.Duration
}

// Validate checks the registration and fills in the default heartbeat
// interval. Messages follow BEHAVIOR.md §8.
func (r *MemberRegistration) Validate() error {
	if r.PoolID == "" || strings.TrimSpace(r.MemberID) == "" || r.Address == "" {
		return Invalid("member_id", "pool_id, member_id, and address are required")
	}
	if err := ValidatePoolID("pool_id", r.PoolID); err != nil {
		return err
	}
	if len(r.MemberID) > MaxMemberIDLen {
		return Invalid("member_id", "member_id is longer than %d characters", MaxMemberIDLen)
	}
	for _, c := range r.MemberID {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c)) {
			return Invalid("member_id", "member_id may contain only letters, digits, '.', '_', ':' and '-'")
		}
	}
	if err := ValidateTargetURL("address", r.Address); err != nil {
		return err
	}
	if math.IsNaN(r.CapacityRPS) || r.CapacityRPS <= 0 {
		return Invalid("capacity_rps", "capacity_rps must be greater than 0")
	}
	if r.CapacityRPS > MaxCapacityRPS || math.IsInf(r.CapacityRPS, 0) {
		return Invalid("capacity_rps", "capacity_rps must be at most %d", MaxCapacityRPS)
	}
	if r.HeartbeatInterval <= 0 {
		r.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if r.HeartbeatInterval > MaxHeartbeatInterval {
		return Invalid("heartbeat_interval_seconds", "heartbeat_interval_seconds must be at most %d", int(MaxHeartbeatInterval/time.Second))
	}
	return nil
}
