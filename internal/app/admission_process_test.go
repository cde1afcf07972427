package app_test

import (
	"errors"
	"testing"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestMemoryLimitHoldsFromTheFirstJob: with the real memory reading (no
// test hook), a fresh service whose limit is below what any Go process
// holds sheds the very first job, before any collection has run; with a
// limit far above it admits.
func TestMemoryLimitHoldsFromTheFirstJob(t *testing.T) {
	tight := setup(t, func(c *app.Config) { c.Admission = app.AdmissionConfig{MemoryLimitMB: 1} })
	_, err := tight.svc.Enqueue(t.Context(), req("first", "http://127.0.0.1:1/x"))
	var rej *domain.RejectedError
	if !errors.As(err, &rej) || rej.Limit != domain.LimitMemory || rej.Max != 1 || rej.Current <= 1 || rej.RetryAfter <= 0 {
		t.Fatalf("first job under a 1 MiB limit: %v (%+v), want a memory rejection", err, rej)
	}
	if c, _ := tight.store.Counts(t.Context()); c.Total() != 0 {
		t.Fatalf("the rejected job left rows: %+v", c)
	}
	h := tight.svc.Health(t.Context()).Admission
	if h.MemoryMB < 1 || !h.Rejecting || h.LimitReason != domain.LimitMemory {
		t.Fatalf("admission health after the rejection: %+v", h)
	}

	generous := setup(t, func(c *app.Config) { c.Admission = app.AdmissionConfig{MemoryLimitMB: 1 << 20} })
	if _, err := generous.svc.Enqueue(t.Context(), req("first", "http://127.0.0.1:1/x")); err != nil {
		t.Fatalf("first job under a 1 TiB limit: %v", err)
	}
}
