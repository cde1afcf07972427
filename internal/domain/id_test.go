package domain

// This file is an internal test so it can inject the generator's random
// source and exercise the carry in the tail increment deterministically.

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var jobIDShape = regexp.MustCompile(`^[0-9a-f]{32}$`)

// fakeClock is a settable clock for the generator.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var idBase = time.UnixMilli(1_700_000_000_123).UTC()

func TestIDGeneratorShape(t *testing.T) {
	t.Parallel()
	g := NewIDGenerator(nil) // real clock
	for range 200 {
		id := g.New()
		if !jobIDShape.MatchString(string(id)) {
			t.Fatalf("id %q is not 32 lowercase hex characters", id)
		}
		if !ValidJobID(string(id)) {
			t.Fatalf("ValidJobID(%q) = false for a generated ID", id)
		}
		if id.String() != string(id) {
			t.Fatalf("String() = %q, want %q", id.String(), id)
		}
	}
}

func TestIDGeneratorTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		now  time.Time
		want time.Time
	}{
		{"whole millisecond", idBase, idBase},
		{"sub-millisecond truncated", idBase.Add(456 * time.Microsecond), idBase},
		{"just below next millisecond", idBase.Add(time.Millisecond - time.Nanosecond), idBase},
		{"unix epoch plus 1ms", time.UnixMilli(1), time.UnixMilli(1)},
		{"far future (48-bit ms)", time.UnixMilli(1<<47 + 5), time.UnixMilli(1<<47 + 5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := NewIDGenerator(func() time.Time { return tc.now })
			id := g.New()
			if got := id.Time(); !got.Equal(tc.want) {
				t.Fatalf("Time() = %v (%d ms), want %v (%d ms)", got, got.UnixMilli(), tc.want, tc.want.UnixMilli())
			}
		})
	}
}

func TestIDGeneratorEncodesMillisecondsBigEndian(t *testing.T) {
	t.Parallel()
	g := NewIDGenerator(func() time.Time { return time.UnixMilli(0x0123456789ab) })
	id := g.New()
	if got := string(id)[:12]; got != "0123456789ab" {
		t.Fatalf("time prefix = %s, want 0123456789ab (id %s)", got, id)
	}
}

func TestIDGeneratorMonotonicWhenClockStalls(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: idBase}
	g := NewIDGenerator(clk.now)
	prev := g.New()
	for i := range 5000 {
		id := g.New()
		if id <= prev {
			t.Fatalf("id %d: %s is not greater than previous %s", i, id, prev)
		}
		if !id.Time().Equal(idBase) {
			t.Fatalf("id %d: Time() = %v, want %v", i, id.Time(), idBase)
		}
		prev = id
	}
}

func TestIDGeneratorMonotonicWhenClockGoesBackwards(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: idBase.Add(10 * time.Millisecond)}
	g := NewIDGenerator(clk.now)
	a := g.New()

	clk.set(idBase) // 10ms backwards
	b := g.New()
	if b <= a {
		t.Fatalf("after clock went back: %s is not greater than %s", b, a)
	}
	if !b.Time().Equal(idBase.Add(10 * time.Millisecond)) {
		t.Fatalf("after clock went back, Time() = %v; want the last issued millisecond", b.Time())
	}

	clk.set(idBase.Add(-time.Hour)) // far backwards
	c := g.New()
	if c <= b {
		t.Fatalf("after clock went far back: %s is not greater than %s", c, b)
	}

	clk.set(idBase.Add(11 * time.Millisecond)) // clock recovers
	d := g.New()
	if d <= c {
		t.Fatalf("after clock recovered: %s is not greater than %s", d, c)
	}
	if !d.Time().Equal(idBase.Add(11 * time.Millisecond)) {
		t.Fatalf("after clock recovered, Time() = %v, want %v", d.Time(), idBase.Add(11*time.Millisecond))
	}
}

func TestIDGeneratorOrderedByTime(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: idBase}
	g := NewIDGenerator(clk.now)
	prev := g.New()
	for i := 1; i <= 100; i++ {
		clk.set(idBase.Add(time.Duration(i) * time.Millisecond))
		id := g.New()
		if id <= prev {
			t.Fatalf("step %d: %s is not greater than %s", i, id, prev)
		}
		if want := idBase.Add(time.Duration(i) * time.Millisecond); !id.Time().Equal(want) {
			t.Fatalf("step %d: Time() = %v, want %v", i, id.Time(), want)
		}
		prev = id
	}
}

func TestIDGeneratorIncrementCarries(t *testing.T) {
	t.Parallel()
	g := NewIDGenerator(func() time.Time { return time.UnixMilli(1) })
	g.rand = bytes.NewReader(bytes.Repeat([]byte{0xff}, 10))
	first := g.New()
	// The top bit of the random tail is cleared to leave headroom.
	if want := JobID("000000000001" + "7f" + strings.Repeat("ff", 9)); first != want {
		t.Fatalf("first = %s, want %s", first, want)
	}
	second := g.New()
	if want := JobID("000000000001" + "80" + strings.Repeat("00", 9)); second != want {
		t.Fatalf("second = %s, want %s (carry through every byte)", second, want)
	}
	third := g.New()
	if want := JobID("000000000001" + "80" + strings.Repeat("00", 8) + "01"); third != want {
		t.Fatalf("third = %s, want %s", third, want)
	}
}

func TestIDGeneratorNewMillisecondRereadsRandomness(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.UnixMilli(1)}
	g := NewIDGenerator(clk.now)
	g.rand = bytes.NewReader(append(bytes.Repeat([]byte{0x11}, 10), bytes.Repeat([]byte{0x22}, 10)...))
	if got, want := g.New(), JobID("000000000001"+strings.Repeat("11", 10)); got != want {
		t.Fatalf("first = %s, want %s", got, want)
	}
	clk.set(time.UnixMilli(2))
	if got, want := g.New(), JobID("000000000002"+strings.Repeat("22", 10)); got != want {
		t.Fatalf("second = %s, want %s", got, want)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }

func TestIDGeneratorPanicsWhenRandomnessFails(t *testing.T) {
	t.Parallel()
	g := NewIDGenerator(func() time.Time { return idBase })
	g.rand = failingReader{}
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("New did not panic when the random source failed")
		}
		if s, _ := r.(string); !strings.Contains(s, "entropy exhausted") {
			t.Fatalf("panic value %v does not carry the cause", r)
		}
	}()
	g.New()
}

func TestIDGeneratorConcurrent(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: idBase}
	g := NewIDGenerator(clk.now)
	const workers, per = 8, 500
	results := make([][]JobID, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ids := make([]JobID, 0, per)
			for i := range per {
				if i%100 == 0 && w == 0 {
					clk.set(clk.now().Add(time.Millisecond))
				}
				ids = append(ids, g.New())
			}
			results[w] = ids
		})
	}
	wg.Wait()
	seen := make(map[JobID]bool, workers*per)
	for w, ids := range results {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("worker %d: id %d %s not greater than %s", w, i, id, ids[i-1])
			}
		}
	}
}

func TestValidJobID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		want bool
	}{
		{"0123456789abcdef0123456789abcdef", true},
		{strings.Repeat("0", 32), true},
		{strings.Repeat("f", 32), true},
		{"", false},
		{strings.Repeat("a", 31), false},
		{strings.Repeat("a", 33), false},
		{strings.Repeat("a", 64), false},
		{"0123456789ABCDEF0123456789abcdef", false}, // upper-case
		{"0123456789abcdef0123456789abcdeF", false}, // upper-case last
		{"g123456789abcdef0123456789abcdef", false}, // non-hex first
		{"0123456789abcdef0123456789abcdeg", false}, // non-hex last
		{"0123456789abcdef-123456789abcdef", false},
		{"0123456789abcdef 123456789abcdef", false},
		{"0123456789abcdef0123456789abcd\n", false},
		{strings.Repeat("0", 30) + "é", false}, // 32 bytes, not hex
		{"01234567-89ab-cdef-0123-456789ab", false},
	}
	for _, tc := range tests {
		if got := ValidJobID(tc.s); got != tc.want {
			t.Errorf("ValidJobID(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestJobIDTimeMalformed(t *testing.T) {
	t.Parallel()
	for _, id := range []JobID{
		"",
		"xyz",
		"zz" + JobID(strings.Repeat("0", 30)),
		JobID(strings.Repeat("0", 30)), // 15 bytes
		JobID(strings.Repeat("0", 34)), // 17 bytes
		JobID(strings.Repeat("0", 31)), // odd length
	} {
		if got := id.Time(); !got.IsZero() {
			t.Errorf("JobID(%q).Time() = %v, want zero", id, got)
		}
	}
	// Upper-case hex still decodes (Time is lenient; ValidJobID is not).
	if got := JobID("0000000003E8" + strings.Repeat("0", 20)).Time(); !got.Equal(time.UnixMilli(1000)) {
		t.Errorf("Time() of upper-case id = %v, want %v", got, time.UnixMilli(1000))
	}
}
