package pacing_test

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/pacing"
)

// FuzzResponseSignals reads signals from raw upstream responses as net/http
// parses them off the wire (repeated fields, any casing, any status line),
// which is where they come from in production. Seed corpus:
// testdata/fuzz/FuzzResponseSignals; explore with
//
//	go test -run '^$' -fuzz FuzzResponseSignals -fuzztime 60s ./internal/pacing/
func FuzzResponseSignals(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte, nowUnix int64) {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			return // the client would have failed the attempt instead
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		now := time.Unix(nowUnix, 0)
		before := resp.Header.Clone()
		s := pacing.ParseSignals(resp.StatusCode, resp.Header, now)
		if !equalHeaders(before, resp.Header) {
			t.Fatalf("ParseSignals changed the header: %v -> %v", before, resp.Header)
		}
		if !(s.RPS >= 0) || math.IsInf(s.RPS, 0) || s.MaxConcurrent < 0 {
			t.Fatalf("RPS %v, MaxConcurrent %d", s.RPS, s.MaxConcurrent)
		}
		if !s.HasUtilization && s.Utilization != 0 || s.HasUtilization && !(s.Utilization >= 0 && s.Utilization <= 1) {
			t.Fatalf("Utilization %v (has %v)", s.Utilization, s.HasUtilization)
		}
		checkPause(t, "RetryAfter", s.RetryAfter)
		checkPause(t, "ResetIn", s.ResetIn)
		if s.RetryAfter != 0 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("RetryAfter %v on status %d", s.RetryAfter, resp.StatusCode)
		}
		if (s.ResetIn == 0) != (s.ResetSource == "") {
			t.Fatalf("ResetIn %v from %q", s.ResetIn, s.ResetSource)
		}
		if again := pacing.ParseSignals(resp.StatusCode, resp.Header, now); again != s {
			t.Fatalf("not deterministic: %+v then %+v", s, again)
		}
	})
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}
