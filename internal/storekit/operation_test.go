package storekit

import (
	"fmt"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestHistoryRoundTrips(t *testing.T) {
	at := time.UnixMilli(1700000000123)
	h := []domain.Attempt{
		{At: at, Duration: 1500 * time.Microsecond, Status: 429, Signal: domain.SignalRetryAfter},
		{At: at.Add(time.Second), Duration: 3 * time.Second, Error: "dial tcp: \x00 \xff refused"},
		{At: at.Add(2 * time.Second), Status: 200, Member: "gpu-1", Signal: domain.SignalORCA},
	}
	enc, err := EncodeHistory(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHistory(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(h) {
		t.Fatalf("decoded %+v", got)
	}
	for i := range h {
		w := h[i]
		if i == 1 {
			w.Error = "dial tcp: \x00 \uFFFD refused" // JSON keeps text: invalid UTF-8 becomes U+FFFD
		}
		if g := got[i]; !g.At.Equal(w.At) || g != (domain.Attempt{At: g.At, Duration: w.Duration, Status: w.Status,
			Error: w.Error, Signal: w.Signal, Member: w.Member}) {
			t.Fatalf("attempt %d = %+v, want %+v", i, g, w)
		}
	}
	for _, empty := range [][]domain.Attempt{nil, {}} {
		if enc, err := EncodeHistory(empty); err != nil || enc != "" {
			t.Fatalf("EncodeHistory(%v) = %q, %v", empty, enc, err)
		}
	}
	if h, err := DecodeHistory(""); err != nil || h != nil {
		t.Fatalf(`DecodeHistory("") = %v, %v`, h, err)
	}
	if _, err := DecodeHistory("{"); err == nil {
		t.Fatal("a damaged history decoded")
	}
}

func TestFilterRoundTrips(t *testing.T) {
	at := time.UnixMilli(1700000000123)
	for _, f := range []domain.JobFilter{
		{},
		{Statuses: []domain.Status{domain.StatusFailed, domain.StatusCompleted}, Tenant: "acme", UserID: domain.Scope("acme", "alice"),
			Destination: "https://api.test:443", PoolID: "acme\x1fp", CreatedAfter: at, CreatedBefore: at.Add(time.Hour),
			ResponseStatus: 503, Q: "re\x00fused"},
	} {
		enc, err := EncodeFilter(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeFilter(enc)
		if err != nil {
			t.Fatal(err)
		}
		if !got.CreatedAfter.Equal(f.CreatedAfter) || !got.CreatedBefore.Equal(f.CreatedBefore) {
			t.Fatalf("times of %+v decoded as %+v", f, got)
		}
		got.CreatedAfter, got.CreatedBefore = f.CreatedAfter, f.CreatedBefore
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", f) {
			t.Fatalf("decoded %#v\nwant %#v", got, f)
		}
	}
}

// TestCreatedBoundsSelectWhatMatchesDoes: for stored (millisecond) creation
// times around a bound with and without a sub-millisecond part, the integer
// conditions agree with JobFilter.Matches.
func TestCreatedBoundsSelectWhatMatchesDoes(t *testing.T) {
	for _, bound := range []time.Time{time.UnixMilli(1700000000123), time.UnixMilli(1700000000123).Add(400 * time.Microsecond),
		time.UnixMilli(-5).Add(300 * time.Microsecond)} {
		f := domain.JobFilter{CreatedAfter: bound, CreatedBefore: bound}
		after, before := CreatedBounds(&f)
		for d := int64(-2); d <= 2; d++ {
			created := bound.UnixMilli() + d
			j := &domain.Job{CreatedAt: time.UnixMilli(created)}
			if a := (&domain.JobFilter{CreatedAfter: bound}).Matches(j); a != (created > after) {
				t.Errorf("bound %v, created %d: Matches after = %v, created > %d = %v", bound, created, a, after, created > after)
			}
			if b := (&domain.JobFilter{CreatedBefore: bound}).Matches(j); b != (created < before) {
				t.Errorf("bound %v, created %d: Matches before = %v, created < %d = %v", bound, created, b, before, created < before)
			}
		}
	}
}

func TestFoldQLowersASCIIOnly(t *testing.T) {
	if got := string(FoldQ("AbÉ\xffZ")); got != "abÉ\xffz" {
		t.Fatalf("FoldQ = %q", got)
	}
}
