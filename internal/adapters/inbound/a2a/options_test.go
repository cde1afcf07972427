package a2aagent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestJobOptionsInDataPart checks that the data part takes POST /jobs's job
// options: the job behind the task is scheduled, prioritised and traced as
// asked (the target sees a child of the given traceparent), and an invalid
// option is invalid params naming its field.
func TestJobOptionsInDataPart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	seen := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Get("Traceparent"):
		default:
		}
	}))
	t.Cleanup(up.Close)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	res, err := e.client.SendMessage(ctxT(t), jobMessage(map[string]any{
		"user_id": "agent-1", "idempotent_key": "opts", "url": up.URL + "/later",
		"delay_seconds": 0.2, "priority": "high", "retry": map[string]any{"max_attempts": 3},
		"timeout_seconds": 5, "traceparent": tp, "tracestate": "k=v",
	}))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("result is %T", res)
	}
	job, err := e.svc.Get(context.Background(), jobIDOfTask(t, task.ID))
	if err != nil {
		t.Fatal(err)
	}
	if job.NotBefore.IsZero() || job.Priority != domain.PriorityHigh || job.Retry.MaxAttempts != 3 ||
		job.Timeout.Seconds() != 5 || job.TraceParent != tp || job.TraceState != "k=v" {
		t.Fatalf("job behind the task has options %+v", job.JobOptions)
	}
	select {
	case got := <-seen:
		if !domain.ValidTraceParent(got) || got[3:35] != tp[3:35] || got[36:52] == tp[36:52] {
			t.Fatalf("target got traceparent %q, want a child of %s", got, tp)
		}
	case <-ctxT(t).Done():
		t.Fatal("the scheduled job never reached its target")
	}

	for _, c := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"retry": map[string]any{"max_attempts": 0}}, "retry.max_attempts must be between 1 and"},
		{map[string]any{"not_before": "next week"}, "not_before must be an RFC 3339 time"},
		{map[string]any{"priority": []any{"high"}}, "priority must be a string"},
		{map[string]any{"traceparent": "nope"}, "traceparent is not a valid W3C traceparent"},
	} {
		data := map[string]any{"user_id": "u", "idempotent_key": "bad", "url": up.URL}
		for k, v := range c.opts {
			data[k] = v
		}
		_, err := e.client.SendMessage(ctxT(t), jobMessage(data))
		if !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("options %v: error %v, want invalid params mentioning %q", c.opts, err, c.want)
		}
	}
}
