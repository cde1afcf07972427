package domain

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func fptr(v float64) *float64 { return &v }
func iptr(v int) *int         { return &v }

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestResolveDefaultsAreToday(t *testing.T) {
	now := time.Now()
	o, err := (&OptionsRequest{}).Resolve(now, OptionBounds{})
	if err != nil || o != (JobOptions{}) {
		t.Fatalf("no options = %+v, %v; want the zero options", o, err)
	}
}

func TestResolveSchedule(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	o, err := (&OptionsRequest{DelaySeconds: fptr(90)}).Resolve(now, OptionBounds{})
	if err != nil || !o.NotBefore.Equal(now.Add(90*time.Second)) {
		t.Fatalf("delay_seconds 90 = %v, %v", o.NotBefore, err)
	}
	if o, _ := (&OptionsRequest{DelaySeconds: fptr(0)}).Resolve(now, OptionBounds{}); !o.NotBefore.IsZero() {
		t.Fatalf("delay_seconds 0 scheduled the job at %v", o.NotBefore)
	}
	if o, _ := (&OptionsRequest{NotBefore: now.Add(-time.Hour)}).Resolve(now, OptionBounds{}); !o.NotBefore.IsZero() {
		t.Fatalf("a past not_before scheduled the job at %v", o.NotBefore)
	}
	// max_wait counts from when the job is due.
	o, err = (&OptionsRequest{NotBefore: now.Add(time.Hour), MaxWaitSeconds: fptr(60)}).Resolve(now, OptionBounds{})
	if err != nil || !o.Deadline.Equal(now.Add(time.Hour+time.Minute)) {
		t.Fatalf("max_wait after not_before = %v, %v", o.Deadline, err)
	}
	j := NewJob("0123456789abcdef0123456789abcdef", &JobRequest{resolved: o}, "q", now)
	if !j.Scheduled() || j.ReadyQueue != "" || !j.ExpiresAt.Equal(o.NotBefore.Add(QueuedTTL)) || !j.DueAt().Equal(o.NotBefore) {
		t.Fatalf("scheduled job: %+v", j)
	}
	if j := NewJob("0123456789abcdef0123456789abcdef", &JobRequest{}, "q", now); j.Scheduled() || j.ReadyQueue != "q" {
		t.Fatalf("plain job: %+v", j)
	}
}

func TestResolveErrorsNameTheField(t *testing.T) {
	now := time.Now()
	cases := []struct {
		field string
		req   OptionsRequest
	}{
		{"delay_seconds", OptionsRequest{NotBefore: now.Add(time.Hour), DelaySeconds: fptr(1)}},
		{"delay_seconds", OptionsRequest{DelaySeconds: fptr(-1)}},
		{"delay_seconds", OptionsRequest{DelaySeconds: fptr(40 * 24 * 3600)}},
		{"not_before", OptionsRequest{NotBefore: now.Add(40 * 24 * time.Hour)}},
		{"max_wait_seconds", OptionsRequest{Deadline: now.Add(time.Hour), MaxWaitSeconds: fptr(1)}},
		{"max_wait_seconds", OptionsRequest{MaxWaitSeconds: fptr(0)}},
		{"deadline", OptionsRequest{Deadline: now.Add(-time.Second)}},
		{"deadline", OptionsRequest{NotBefore: now.Add(time.Hour), Deadline: now.Add(time.Minute)}},
		{"priority", OptionsRequest{Priority: "urgent"}},
		{"retry.max_attempts", OptionsRequest{Retry: &RetryRequest{MaxAttempts: iptr(0)}}},
		{"retry.max_attempts", OptionsRequest{Retry: &RetryRequest{MaxAttempts: iptr(26)}}},
		{"retry.backoff_seconds", OptionsRequest{Retry: &RetryRequest{BackoffSeconds: fptr(0)}}},
		{"retry.max_backoff_seconds", OptionsRequest{Retry: &RetryRequest{MaxBackoffSeconds: fptr(10)}}},
		{"retry.max_backoff_seconds", OptionsRequest{Retry: &RetryRequest{BackoffSeconds: fptr(10), MaxBackoffSeconds: fptr(5)}}},
		{"timeout_seconds", OptionsRequest{TimeoutSeconds: fptr(601)}},
		{"timeout_seconds", OptionsRequest{TimeoutSeconds: fptr(0)}},
		{"traceparent", OptionsRequest{TraceParent: "00-xyz"}},
		{"traceparent", OptionsRequest{TraceParent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
		{"traceparent", OptionsRequest{TraceParent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"tracestate", OptionsRequest{TraceParent: validTP, TraceState: "novalue"}},
		{"tracestate", OptionsRequest{TraceParent: validTP, TraceState: strings.Repeat("a=b,", 200)}},
	}
	for _, c := range cases {
		_, err := c.req.Resolve(now, OptionBounds{})
		var e *Error
		if !errors.As(err, &e) || e.Field != c.field || e.Code != CodeInvalid {
			t.Errorf("%+v: err %v, want an invalid-%s error", c.req, err, c.field)
		}
	}
}

func TestResolveRetryAndTrace(t *testing.T) {
	o, err := (&OptionsRequest{Priority: "high", TimeoutSeconds: fptr(2.5),
		Retry:       &RetryRequest{MaxAttempts: iptr(3), BackoffSeconds: fptr(0.5)},
		TraceParent: strings.ToUpper(validTP[:3]) + validTP[3:], TraceState: "k=v"}).Resolve(time.Now(), OptionBounds{})
	if err != nil {
		t.Fatal(err)
	}
	want := RetryOptions{MaxAttempts: 3, Backoff: 500 * time.Millisecond, MaxBackoff: 5 * time.Minute}
	if o.Priority != PriorityHigh || o.Timeout != 2500*time.Millisecond || o.Retry != want || o.TraceParent != validTP || o.TraceState != "k=v" {
		t.Fatalf("options = %+v", o)
	}
	// Bounds are the operator's.
	if _, err := (&OptionsRequest{Retry: &RetryRequest{MaxAttempts: iptr(4)}}).Resolve(time.Now(), OptionBounds{MaxAttempts: 3}); err == nil {
		t.Fatal("max_attempts above the server's bound was accepted")
	}
}

func TestRetryDelayDoublesUpToTheCap(t *testing.T) {
	r := RetryOptions{Backoff: time.Second, MaxBackoff: 5 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 30: 5 * time.Second} {
		if got := r.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestPriorityClassesAndNames(t *testing.T) {
	for i, p := range Priorities {
		if p.Class() != i {
			t.Errorf("%s: class %d, want %d", p, p.Class(), i)
		}
		back, err := ParsePriority("priority", p.String())
		if err != nil || back != p {
			t.Errorf("ParsePriority(%q) = %v, %v", p.String(), back, err)
		}
	}
	if p, err := ParsePriority("priority", ""); err != nil || p != PriorityNormal {
		t.Fatalf("empty priority = %v, %v", p, err)
	}
}

func TestParseTime(t *testing.T) {
	if got, err := ParseTime("not_before", "1800000000123"); err != nil || got.UnixMilli() != 1800000000123 {
		t.Fatalf("unix ms = %v, %v", got, err)
	}
	if got, err := ParseTime("not_before", "2027-01-02T03:04:05.5+01:00"); err != nil || got.UnixMilli() != time.Date(2027, 1, 2, 2, 4, 5, 5e8, time.UTC).UnixMilli() {
		t.Fatalf("RFC 3339 = %v, %v", got, err)
	}
	for _, bad := range []string{"", "tomorrow", "0", "1e9", "2027-01-02", "9999999999999999"} {
		var e *Error
		if _, err := ParseTime("deadline", bad); !errors.As(err, &e) || e.Field != "deadline" {
			t.Errorf("ParseTime(%q) = %v, want an error naming deadline", bad, err)
		}
	}
}

func TestPastDeadline(t *testing.T) {
	now := time.Now()
	j := &Job{Status: StatusQueued, JobOptions: JobOptions{Deadline: now}}
	if !j.PastDeadline(now) || j.PastDeadline(now.Add(-time.Millisecond)) {
		t.Fatal("PastDeadline is wrong around the deadline")
	}
	j.Status = StatusFailed
	if j.PastDeadline(now.Add(time.Hour)) {
		t.Fatal("a finished job is past its deadline")
	}
}
