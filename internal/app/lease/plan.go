package lease

import (
	"hash/fnv"
	"math"
	"sort"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// The lease sync is a pure plan in two halves around the one store call
// that renews and takes leases: ask decides what to ask for, settle decides
// what the answer means. Neither does I/O nor takes a lock, so both are
// tested as tables of inputs and decisions.

// askInput is what ask needs to know.
type askInput struct {
	Me        string                          // this instance
	WithWork  map[domain.UpstreamKey]int      // lanes with waiting work: how many queues each has
	Held      map[domain.UpstreamKey]bool     // leases held (dispatching or being released)
	Instances map[string][]domain.UpstreamKey // live instances and the lanes each holds
}

// ask is what to ask the store for: the lanes with work, in this process's
// own order of preference (so processes do not all race for the same lane
// first), and the fair share — the lanes with work or held, spread over the
// live processes.
func ask(in askInput) (want []domain.UpstreamKey, share int) {
	all := map[domain.UpstreamKey]bool{}
	for u := range in.WithWork {
		all[u] = true
	}
	for u := range in.Held {
		all[u] = true
	}
	owned := 0
	for _, lanes := range in.Instances {
		owned += len(lanes)
	}
	n := max(len(all), owned)
	share = max(1, int(math.Ceil(float64(n)/float64(max(len(in.Instances), 1)))))
	want = make([]domain.UpstreamKey, 0, len(in.WithWork))
	for u := range in.WithWork {
		want = append(want, u)
	}
	sort.Slice(want, func(i, j int) bool { return spread(in.Me, want[i]) < spread(in.Me, want[j]) })
	return want, share
}

// settleInput is what settle needs to know after the store answered.
type settleInput struct {
	Now       time.Time
	Share     int
	WithWork  map[domain.UpstreamKey]int
	Got       map[domain.UpstreamKey]bool      // leases held after the call
	Held      map[domain.UpstreamKey]bool      // dispatching before the call
	Releasing map[domain.UpstreamKey]time.Time // being given up, since when
	// Running is how many attempts a lane has running; HasLane whether it
	// has a lane in this process at all.
	Running     func(domain.UpstreamKey) int
	HasLane     func(domain.UpstreamKey) bool
	ReleaseWait time.Duration
}

// settlement is what to do after a sync.
type settlement struct {
	Taken []domain.UpstreamKey // newly held: start dispatching
	Lost  []domain.UpstreamKey // another process took them: stop at once
	Extra []domain.UpstreamKey // beyond the fair share: stop, release once idle
	// Release are the leases to give up now: being released and without
	// running attempts (or waited long enough), and held lanes with nothing
	// to do.
	Release []domain.UpstreamKey
	// Held and Releasing are the new state.
	Held      map[domain.UpstreamKey]bool
	Releasing map[domain.UpstreamKey]time.Time
}

// settle decides what the store's answer means: leases not returned are
// lost; ones returned that were not held are taken; beyond the fair share,
// the lanes with the least waiting work are given up (released once their
// attempts are done, or after ReleaseWait); held lanes with nothing to do
// and no local lane are given up at once.
func settle(in settleInput) settlement {
	s := settlement{Held: map[domain.UpstreamKey]bool{}, Releasing: map[domain.UpstreamKey]time.Time{}}
	for u := range in.Held {
		if in.Got[u] {
			s.Held[u] = true
		} else {
			s.Lost = append(s.Lost, u)
		}
	}
	for u, since := range in.Releasing {
		if in.Got[u] {
			s.Releasing[u] = since
		} else if !in.Held[u] {
			s.Lost = append(s.Lost, u)
		}
	}
	for u := range in.Got {
		if !in.Held[u] && in.Releasing[u].IsZero() {
			s.Taken = append(s.Taken, u)
		}
	}
	if n := len(s.Held) + len(s.Taken) - in.Share; n > 0 {
		cands := make([]domain.UpstreamKey, 0, len(s.Held))
		for u := range s.Held {
			cands = append(cands, u)
		}
		sort.Slice(cands, func(i, j int) bool {
			if a, b := in.WithWork[cands[i]], in.WithWork[cands[j]]; a != b {
				return a < b
			}
			return cands[i] < cands[j]
		})
		s.Extra = cands[:min(n, len(cands))]
		for _, u := range s.Extra {
			delete(s.Held, u)
			s.Releasing[u] = in.Now
		}
	}
	var idle []domain.UpstreamKey
	for u := range s.Held {
		if in.WithWork[u] == 0 && !in.HasLane(u) {
			idle = append(idle, u)
			delete(s.Held, u)
		}
	}
	for u, since := range s.Releasing {
		if in.Running(u) == 0 || in.Now.Sub(since) > in.ReleaseWait {
			s.Release = append(s.Release, u)
			delete(s.Releasing, u)
		}
	}
	s.Release = append(s.Release, idle...)
	sortKeys(s.Taken)
	sortKeys(s.Lost)
	sortKeys(s.Release)
	return s
}

func sortKeys(us []domain.UpstreamKey) { sort.Slice(us, func(i, j int) bool { return us[i] < us[j] }) }

// spread orders lanes differently for each process.
func spread(instance string, u domain.UpstreamKey) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(instance))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(u))
	return h.Sum64()
}
