package mcp_test

import (
	"strings"
	"testing"
	"time"
)

// TestEnqueueJobOptions checks aquifer_enqueue_job's job options: a
// scheduled high-priority job shows them in aquifer_get_job, not_before
// takes a string or Unix milliseconds, and bad options are tool errors in
// words naming the argument.
func TestEnqueueJobOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := upstream(t, nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for i, nb := range []any{at.Format(time.RFC3339Nano), at.UnixMilli()} {
		var out enqueued
		res := e.call(t, "aquifer_enqueue_job", map[string]any{
			"user_id": "agent-1", "idempotent_key": "later-" + string(rune('a'+i)), "url": up.URL + "/later",
			"not_before": nb, "priority": "high", "retry": map[string]any{"max_attempts": 2, "backoff_seconds": 1},
			"timeout_seconds": 3, "traceparent": tp,
		}, &out)
		if res.IsError || out.Status != "queued" {
			t.Fatalf("enqueue with not_before %v: %+v %+v", nb, res.Content, out)
		}
		var job map[string]any
		e.call(t, "aquifer_get_job", map[string]any{"job_id": out.JobID}, &job)
		r, _ := job["retry"].(map[string]any)
		if job["scheduled"] != true || job["not_before"] != at.Format("2006-01-02T15:04:05.000Z") || job["priority"] != "high" ||
			job["traceparent"] != tp || job["timeout_seconds"] != float64(3) || r["max_attempts"] != float64(2) {
			t.Fatalf("job view %v", job)
		}
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"priority": "urgent"}, `invalid priority: priority must be one of high, normal or low, not "urgent"`},
		{map[string]any{"not_before": true}, "invalid not_before: not_before must be a string"},
		{map[string]any{"not_before": "whenever"}, "invalid not_before: not_before must be an RFC 3339 time"},
		{map[string]any{"delay_seconds": -1}, "invalid delay_seconds: delay_seconds must be at least 0"},
		{map[string]any{"retry": map[string]any{"max_attempts": 99}}, "invalid retry.max_attempts: retry.max_attempts must be between 1 and 25"},
		{map[string]any{"traceparent": "x"}, "invalid traceparent"},
	} {
		args := map[string]any{"user_id": "agent-1", "idempotent_key": "bad", "url": up.URL}
		for k, v := range c.args {
			args[k] = v
		}
		res := e.call(t, "aquifer_enqueue_job", args, nil)
		if msg := errorText(t, res); !strings.Contains(msg, c.want) {
			t.Errorf("args %v: error %q, want it to contain %q", c.args, msg, c.want)
		}
	}
}

// TestEnqueueBatchTool checks aquifer_enqueue_batch: one result per item,
// in order (created, a bad item alone refused naming its field, a malformed
// item, a duplicate), and the whole call refused without jobs.
func TestEnqueueBatchTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	up := upstream(t, nil)
	var out struct {
		Results []struct {
			Index      int    `json:"index"`
			Outcome    string `json:"outcome"`
			StatusCode int    `json:"status_code"`
			JobID      string `json:"job_id"`
			Error      string `json:"error"`
			Field      string `json:"field"`
		} `json:"results"`
		Created, Duplicates, Errors int
	}
	res := e.call(t, "aquifer_enqueue_batch", map[string]any{"jobs": []any{
		map[string]any{"user_id": "a", "idempotent_key": "1", "url": up.URL + "/1", "priority": "low"},
		map[string]any{"user_id": "a", "idempotent_key": "2", "url": up.URL + "/2", "retry": map[string]any{"max_attempts": 0}},
		"not a job",
		map[string]any{"user_id": "a", "idempotent_key": "1", "url": up.URL + "/1"},
	}}, &out)
	if res.IsError || len(out.Results) != 4 || out.Created != 1 || out.Duplicates != 1 || out.Errors != 2 {
		t.Fatalf("batch: %+v %+v", res.Content, out)
	}
	r := out.Results
	if r[0].Outcome != "created" || r[0].StatusCode != 201 || r[1].Field != "retry.max_attempts" || r[1].StatusCode != 400 ||
		r[2].Outcome != "error" || !strings.Contains(r[2].Error, "expected a JSON object") ||
		r[3].Outcome != "duplicate" || r[3].JobID != r[0].JobID {
		t.Fatalf("batch results %+v", r)
	}
	var job map[string]any
	e.call(t, "aquifer_get_job", map[string]any{"job_id": r[0].JobID, "wait_seconds": 10}, &job)
	if job["status"] != "completed" || job["priority"] != "low" {
		t.Fatalf("batch job %v", job)
	}

	if msg := errorText(t, e.call(t, "aquifer_enqueue_batch", map[string]any{"jobs": []any{}}, nil)); !strings.Contains(msg, "jobs") {
		t.Fatalf("empty batch: %q", msg)
	}
	if msg := errorText(t, e.call(t, "aquifer_enqueue_batch", map[string]any{}, nil)); !strings.Contains(msg, "jobs is required") {
		t.Fatalf("no jobs: %q", msg)
	}
}
