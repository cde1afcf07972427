package mcp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestToolErrorMessages checks the messages for core errors the in-memory
// service cannot easily produce: each says what happened and what to do.
func TestToolErrorMessages(t *testing.T) {
	t.Parallel()
	s := New(nil, Options{})
	cases := []struct {
		err  error
		want string
	}{
		{&domain.RejectedError{Limit: domain.LimitMemory, Max: 400, Current: 431, RetryAfter: 10 * time.Second},
			"admission rejected: memory at 431 exceeds limit 400; nothing was stored: retry in 10 seconds with the same idempotent_key"},
		{domain.Unavailable("store job failed", errors.New("disk on fire")), "store job failed: Aquifer cannot reach its job store right now"},
		{errors.New("boom: secret detail"), "internal error (details are in Aquifer's log)"},
		{context.Canceled, "the request was canceled"},
		{&domain.Error{Code: domain.CodeConflict, Message: "job already dispatched"}, "job already dispatched"},
	}
	for _, c := range cases {
		got := s.toolError("t", c.err).Error()
		if !strings.Contains(got, c.want) {
			t.Errorf("%v → %q, want it to contain %q", c.err, got, c.want)
		}
		if strings.Contains(got, "disk on fire") || strings.Contains(got, "secret detail") {
			t.Errorf("%v → %q leaks internal detail", c.err, got)
		}
	}
}
