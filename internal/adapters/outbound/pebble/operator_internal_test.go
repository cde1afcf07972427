package pebble

import (
	"reflect"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func TestOperationRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_750_000_000_123)
	for _, op := range []*domain.Operation{
		{ID: "op-1", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 1 << 40, Total: 9, Processed: 4, Changed: 3,
			Skipped: 1, Error: "store unavailable", CreatedAt: at, UpdatedAt: at.Add(time.Second),
			Filter: domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed, domain.StatusCompleted}, Tenant: "acme",
				UserID: domain.Scope("acme", "u"), Destination: "https://a.test:443", PoolID: "acme\x1fp",
				CreatedAfter: at.Add(-time.Hour), CreatedBefore: at, ResponseStatus: 503, Q: "Refused \"quoted\""}},
		{ID: "op-2", Kind: domain.OpKindCancel, State: domain.OpCompleted},
	} {
		b, err := encodeOperation(op)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeOperation(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, op) {
			t.Fatalf("operation round trip:\n got %+v\nwant %+v", got, op)
		}
	}
	if _, err := decodeOperation([]byte("{")); err == nil {
		t.Fatal("a broken operation decoded")
	}
}

func TestRetriedAndCancelParams(t *testing.T) {
	now := time.UnixMilli(1_750_000_000_000)
	j := &domain.Job{ID: "j", Seq: 7, Queue: "a.test:80", Status: domain.StatusFailed, Attempts: 3, Deferrals: 2,
		Result: &domain.Result{Reason: "x"}, Delivery: &domain.Delivery{Status: domain.DeliveryFailed},
		History: []domain.Attempt{{Status: 500}}, ReadySeq: 9,
		JobOptions: domain.JobOptions{NotBefore: now.Add(-time.Hour), Deadline: now.Add(-time.Minute), Priority: domain.PriorityLow,
			Timeout: time.Second, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	r := retried(j, 12, now)
	if want := (domain.JobOptions{Priority: domain.PriorityLow, Timeout: time.Second, TraceParent: j.TraceParent}); r.JobOptions != want {
		t.Fatalf("retried options = %+v, want %+v (no schedule, no deadline, the rest kept)", r.JobOptions, want)
	}
	if r.Status != domain.StatusQueued || r.Attempts != 0 || r.Deferrals != 0 || r.Result != nil || r.Delivery != nil ||
		r.ReadyQueue != "a.test:80" || r.ReadySeq != 12 || r.Seq != 7 || len(r.History) != 1 ||
		!r.ExpiresAt.Equal(now.Add(domain.QueuedTTL)) || !r.UpdatedAt.Equal(now) {
		t.Fatalf("retried = %+v", r)
	}
	if j.Status != domain.StatusFailed || j.ReadySeq != 9 {
		t.Fatal("retried changed the job it copied")
	}
	p := cancelParams(j, ports.BatchItem{ID: "j", DeliverIn: "hooks.test:80"}, &ports.RunBatchParams{Retention: time.Hour, Now: now})
	if p.Status != domain.StatusFailed || p.Result.Reason != domain.ReasonCanceled || p.Attempts != 3 ||
		p.DeliverIn != "hooks.test:80" || p.Retention != time.Hour || !p.Now.Equal(now) {
		t.Fatalf("cancelParams = %+v", p)
	}
}
