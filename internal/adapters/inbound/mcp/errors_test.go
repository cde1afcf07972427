package mcp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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

// TestSchemaErrorFallback: a refusal of the SDK's own validator that
// checkArguments did not foresee still leads with what went wrong.
func TestSchemaErrorFallback(t *testing.T) {
	t.Parallel()
	r := &sdk.CallToolResult{}
	r.SetError(errors.New(`validating "arguments": validating root: something odd`))
	rewordSchemaError(r)
	if got := r.Content[0].(*sdk.TextContent).Text; got != "invalid arguments (they do not match the tool's input schema): something odd" {
		t.Fatalf("reworded %q", got)
	}
	r = &sdk.CallToolResult{}
	r.SetError(errors.New("job not found"))
	rewordSchemaError(r)
	if got := r.Content[0].(*sdk.TextContent).Text; got != "job not found" {
		t.Fatalf("a tool's own error was changed: %q", got)
	}
}
