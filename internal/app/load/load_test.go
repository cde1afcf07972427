package load

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func TestTextsFormatWhatIsNotPreformatted(t *testing.T) {
	total, depth, rate := Load{Total: 12, Depth: 3, FlowRate: 2.5}.Texts()
	if total[0] != "12" || depth[0] != "3" || rate[0] != "2.50" {
		t.Fatalf("Texts = %v %v %v", total, depth, rate)
	}
	pre := Load{Total: 1, TotalText: []string{"x"}, DepthText: []string{"y"}, FlowRateText: []string{"z"}}
	if total, depth, rate := pre.Texts(); total[0] != "x" || depth[0] != "y" || rate[0] != "z" {
		t.Fatalf("Texts ignored the preformatted values: %v %v %v", total, depth, rate)
	}
}

func TestRateTextIsFormatRateAndStaysBounded(t *testing.T) {
	for i := range 3 * rateTexts {
		r := float64(i) / 7
		if got := RateText(r); len(got) != 1 || got[0] != FormatRate(r) {
			t.Fatalf("RateText(%v) = %v, want [%s]", r, got, FormatRate(r))
		}
	}
	rateMu.RLock()
	n := len(rateCache)
	rateMu.RUnlock()
	if n > rateTexts {
		t.Fatalf("%d rate texts remembered, want at most %d", n, rateTexts)
	}
	if a, b := RateText(0.125), RateText(0.125); &a[0] != &b[0] {
		t.Fatal("a remembered rate was formatted again")
	}
	if got := RateText(1e9); got[0] != strconv.FormatFloat(1e9, 'f', 2, 64) {
		t.Fatalf("RateText(1e9) = %v", got)
	}
}

// slowCounts is a store whose Counts takes d on the test clock.
type slowCounts struct {
	ports.JobStore
	clock *clocktest.Clock
	d     time.Duration
	calls int
}

func (s *slowCounts) Counts(context.Context) (ports.Counts, error) {
	s.calls++
	s.clock.Advance(s.d)
	return ports.Counts{Queued: int64(s.calls)}, nil
}

func TestRefreshBacksOffWhenCountingIsSlow(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	store := &slowCounts{clock: clock, d: 100 * time.Millisecond}
	g := NewGauge(store, func() int { return 0 }, clock, zap.NewNop())
	for range 20 { // 20 s of one refresh a second, somebody reading throughout
		g.Snapshot()
		g.Refresh(context.Background(), false)
		clock.Advance(time.Second)
	}
	// A 100 ms count may run once per 2 s: 10 of the 20 ticks.
	if store.calls < 9 || store.calls > 11 {
		t.Fatalf("%d counts in 20 s at 100 ms each, want ~10 (at most 1/%d of the time)", store.calls, countShare)
	}
	if got := g.Snapshot().Total; got != int64(store.calls) {
		t.Fatalf("snapshot total %d, want the last count %d", got, store.calls)
	}
	store.calls, store.d = 0, time.Millisecond
	for range 20 {
		g.Snapshot()
		g.Refresh(context.Background(), false)
		clock.Advance(time.Second)
	}
	if store.calls < 19 {
		t.Fatalf("%d counts in 20 s once counting is quick, want one a second", store.calls)
	}
	store.calls = 0
	g.Refresh(context.Background(), false) // nobody read since
	g.Refresh(context.Background(), true)
	if store.calls != 1 {
		t.Fatalf("%d counts, want only the forced one", store.calls)
	}
}

// failingCounts is a store that cannot count.
type failingCounts struct{ ports.JobStore }

func (failingCounts) Counts(context.Context) (ports.Counts, error) {
	return ports.Counts{}, context.DeadlineExceeded
}

func TestCountsForHealthKeepToTheBudget(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	store := &slowCounts{clock: clock, d: 100 * time.Millisecond}
	g := NewGauge(store, func() int { return 0 }, clock, zap.NewNop())
	s, err := g.Counts(context.Background(), 0)
	if err != nil || store.calls != 1 || s.Counts.Queued != 1 || s.CountedAt.IsZero() {
		t.Fatalf("first Counts = %+v, %v after %d counts", s, err, store.calls)
	}
	clock.Advance(time.Second) // within the 2 s a 100 ms count waits
	if s, _ = g.Counts(context.Background(), 0); store.calls != 1 || s.Counts.Queued != 1 {
		t.Fatalf("counted again (%d) within the back-off", store.calls)
	}
	clock.Advance(time.Second)
	if s, _ = g.Counts(context.Background(), 0); store.calls != 2 || s.Counts.Queued != 2 {
		t.Fatalf("not counted again after the back-off: %d counts, snapshot %+v", store.calls, s.Counts)
	}
	store.d = 0
	clock.Advance(5 * time.Second)
	g.Counts(context.Background(), 0)
	g.Counts(context.Background(), 0)
	if store.calls != 4 {
		t.Fatalf("%d counts; quick counts must be made for every caller", store.calls)
	}

	bad := NewGauge(failingCounts{}, func() int { return 0 }, clock, zap.NewNop())
	if s, err := bad.Counts(context.Background(), 0); err == nil || !s.CountedAt.IsZero() {
		t.Fatalf("Counts of a failing store = %+v, %v; want the error and no counts", s, err)
	}
}
