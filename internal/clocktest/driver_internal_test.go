package clocktest

import (
	"sync"
	"testing"
	"time"
)

// TestQuietCountsOnlyTimeTheDriverSawPass: while the process is busy, the
// quiet window is what lets settle finish; a gap between two looks longer
// than half of it (the OS ran nothing of ours) must not count towards it,
// or a goroutine starved with its work half done would see the clock jump.
func TestQuietCountsOnlyTimeTheDriverSawPass(t *testing.T) {
	for _, tc := range []struct {
		name string
		jump time.Duration // once, at the tenth look
		want time.Duration // the least real time settle may take
	}{
		{"no gap", 0, 100 * time.Millisecond},
		{"a gap under half the window", 40 * time.Millisecond, 100 * time.Millisecond},
		{"a gap longer than the window", 250 * time.Millisecond, 250*time.Millisecond + 100*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			begin := time.Unix(1_000_000, 0)
			var mu sync.Mutex
			now, looks := begin, 0
			d := NewDriver(t, New(begin))
			d.idle = func() bool { return false } // some goroutine always runs
			d.now = func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				looks++
				now = now.Add(time.Millisecond)
				if looks == 10 {
					now = now.Add(tc.jump)
				}
				return now
			}
			d.Settle()
			mu.Lock()
			took := now.Sub(begin)
			mu.Unlock()
			if took < tc.want {
				t.Fatalf("settled after %v of driver time; want at least %v", took, tc.want)
			}
			if took > tc.want+20*time.Millisecond {
				t.Fatalf("settled after %v of driver time; want about %v", took, tc.want)
			}
		})
	}
}
