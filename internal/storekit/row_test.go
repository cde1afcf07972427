package storekit

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// fakeRow is a row of named columns; Scan fills dest in JobColumns order
// by column name, so a Dest out of step with JobColumns fails.
type fakeRow map[string]any

func (r fakeRow) Scan(dest ...any) error {
	cols := strings.Split(JobColumns, ",")
	if len(dest) != len(cols) {
		return fmt.Errorf("%d destinations for %d columns", len(dest), len(cols))
	}
	for i, c := range cols {
		c = strings.TrimSpace(c)
		v, ok := r[c]
		if !ok {
			return fmt.Errorf("no column %q", c)
		}
		d := reflect.ValueOf(dest[i]).Elem()
		if !reflect.TypeOf(v).AssignableTo(d.Type()) {
			return fmt.Errorf("column %s: %T into %s", c, v, d.Type())
		}
		d.Set(reflect.ValueOf(v))
	}
	return nil
}

type fakeRows struct {
	rows []fakeRow
	at   int
	err  error
}

func (f *fakeRows) Next() bool             { f.at++; return f.at <= len(f.rows) }
func (f *fakeRows) Scan(dest ...any) error { return f.rows[f.at-1].Scan(dest...) }
func (f *fakeRows) Err() error             { return f.err }

func finishedRow() fakeRow {
	return fakeRow{
		"seq": int64(7), "id": "j1", "user_id": "u", "idempotent_key": "k", "url": "http://a.test/x", "pool_id": "p",
		"method": "POST", "headers": `{"A":"b"}`, "body": []byte("req"), "webhook_url": "http://h.test/", "lane": "a.test:80",
		"status": "completed", "attempts": 2, "deferrals": 1, "created_at": int64(1000), "updated_at": int64(3000),
		"dispatched_at": int64(2000), "expires_at": int64(9000), "response_status": 201, "response_body": []byte("resp"),
		"response_truncated": true, "response_content_type": "text/plain", "reason": "why", "ready_lane": "h.test:80",
		"ready_seq": int64(8), "delivery_status": "pending", "delivery_attempts": 3, "delivery_response": 503,
		"delivery_reason": "later", "history": `[{"at":1500,"dur_us":2500,"status":503,"signal":"retry-after"}]`,
		"not_before": int64(1200), "deadline": int64(60000), "priority": 1,
		"options": `{"a":3,"b":1500,"mb":60000,"t":2000,"tp":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","ts":"k=v"}`,
	}
}

func TestScanJobRebuildsTheJob(t *testing.T) {
	j, err := ScanJob(finishedRow())
	if err != nil {
		t.Fatal(err)
	}
	want := &domain.Job{
		Seq: 7, ID: "j1", UserID: "u", IdempotentKey: "k", URL: "http://a.test/x", PoolID: "p", Method: "POST",
		Headers: map[string]string{"A": "b"}, Body: []byte("req"), WebhookURL: "http://h.test/", Queue: "a.test:80",
		Status: domain.StatusCompleted, Attempts: 2, Deferrals: 1, CreatedAt: time.UnixMilli(1000), UpdatedAt: time.UnixMilli(3000),
		DispatchedAt: time.UnixMilli(2000), ExpiresAt: time.UnixMilli(9000),
		Result:     &domain.Result{ResponseStatus: 201, Body: []byte("resp"), BodyTruncated: true, ContentType: "text/plain", Reason: "why"},
		ReadyQueue: "h.test:80", ReadySeq: 8,
		Delivery: &domain.Delivery{Status: domain.DeliveryPending, Attempts: 3, ResponseStatus: 503, Reason: "later"},
		History:  []domain.Attempt{{At: time.UnixMilli(1500), Duration: 2500 * time.Microsecond, Status: 503, Signal: domain.SignalRetryAfter}},
		JobOptions: domain.JobOptions{NotBefore: time.UnixMilli(1200), Deadline: time.UnixMilli(60000), Priority: domain.PriorityHigh,
			Retry:   domain.RetryOptions{MaxAttempts: 3, Backoff: 1500 * time.Millisecond, MaxBackoff: time.Minute},
			Timeout: 2 * time.Second, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "k=v"},
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("ScanJob =\n%+v\nwant\n%+v", j, want)
	}
}

func TestScanJobOfAWaitingJob(t *testing.T) {
	r := finishedRow()
	r["status"], r["headers"], r["body"], r["dispatched_at"], r["delivery_status"], r["history"] = "queued", "{}", []byte{}, int64(0), "", ""
	r["not_before"], r["deadline"], r["priority"], r["options"] = int64(0), int64(0), 0, ""
	j, err := ScanJob(r)
	if err != nil {
		t.Fatal(err)
	}
	if j.Result != nil || j.Delivery != nil || j.Headers != nil || j.Body != nil || !j.DispatchedAt.IsZero() || j.History != nil ||
		j.JobOptions != (domain.JobOptions{}) {
		t.Fatalf("a queued job without extras: %+v", j)
	}
	r["headers"] = "{not json"
	if _, err := ScanJob(r); err == nil || !strings.Contains(err.Error(), "j1") {
		t.Fatalf("bad headers: %v", err)
	}
}

func TestCollectJobs(t *testing.T) {
	second := finishedRow()
	second["id"] = "j2"
	jobs, err := CollectJobs(&fakeRows{rows: []fakeRow{finishedRow(), second}})
	if err != nil || len(jobs) != 2 || jobs[0].ID != "j1" || jobs[1].ID != "j2" {
		t.Fatalf("CollectJobs = %v, %v", jobs, err)
	}
	broken := errors.New("connection reset")
	if _, err := CollectJobs(&fakeRows{rows: []fakeRow{finishedRow()}, err: broken}); !errors.Is(err, broken) {
		t.Fatalf("the rows' error was lost: %v", err)
	}
	bad := finishedRow()
	delete(bad, "reason")
	if _, err := CollectJobs(&fakeRows{rows: []fakeRow{bad}}); err == nil {
		t.Fatal("a row that does not scan was collected")
	}
}

func TestEncodeHeaders(t *testing.T) {
	for _, h := range []map[string]string{nil, {"Content-Type": "application/json"}, {"Content-Type": "text/plain", "X": "y"}} {
		got, err := EncodeHeaders(h)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]string
		if err := json.Unmarshal([]byte(got), &back); err != nil || len(back) != len(h) {
			t.Fatalf("EncodeHeaders(%v) = %s", h, got)
		}
		for k, v := range h {
			if back[k] != v {
				t.Fatalf("EncodeHeaders(%v) = %s", h, got)
			}
		}
	}
}

func TestOptionsRoundTrip(t *testing.T) {
	for _, o := range []domain.JobOptions{{}, {Timeout: time.Second}, {TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{Retry: domain.RetryOptions{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Hour}, TraceState: "a=b"}} {
		s, err := EncodeOptions(&o)
		if err != nil {
			t.Fatal(err)
		}
		if (s == "") != o.Plain() {
			t.Fatalf("EncodeOptions(%+v) = %q", o, s)
		}
		var back domain.JobOptions
		if err := DecodeOptions(s, &back); err != nil || back != o {
			t.Fatalf("round trip of %+v = %+v, %v", o, back, err)
		}
	}
	if err := DecodeOptions("{", &domain.JobOptions{}); err == nil {
		t.Fatal("bad options decoded")
	}
}

func TestMillis(t *testing.T) {
	if Millis(time.Time{}) != 0 || !FromMillis(0).IsZero() {
		t.Fatal("the zero time is not 0")
	}
	now := time.UnixMilli(time.Now().UnixMilli())
	if got := FromMillis(Millis(now)); !got.Equal(now) {
		t.Fatalf("round trip of %v = %v", now, got)
	}
}
