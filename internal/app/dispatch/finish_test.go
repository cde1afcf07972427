package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// A job's end, once committed, ends its attempt's claim: an operator who
// hears of the failure and retries the job at once gets a copy the lane
// may start — before, the attempt stayed "executing" until its worker
// got round to EndDispatch, and the lane dropped the retried copy as a
// second copy of a running job, which then sat queued.
func TestCommittedEndReleasesTheAttemptForARetry(t *testing.T) {
	store := memory.New(time.Now)
	t.Cleanup(func() { store.Close() })
	d := New(Config{Store: store}, Deps{})
	ctx := context.Background()
	j := storetest.NewJob("u", "k", "retry.test:80")
	j.WebhookURL = "" // finished means retryable: no delivery pending
	stored, _, err := store.Insert(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	if !d.BeginDispatch(stored) {
		t.Fatal("the first attempt could not begin")
	}
	if err := d.CommitFinish(ctx, stored, domain.StatusFailed, 2, &domain.Result{ResponseStatus: 500}); err != nil {
		t.Fatal(err)
	}
	// The operator's retry: the store queues it again under a new ReadySeq.
	again, err := store.Retry(ctx, &ports.RetryParams{ID: stored.ID, Seq: stored.Seq, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if !d.BeginDispatch(again) {
		t.Fatal("the retried copy was refused as a second copy of the finished attempt")
	}
}
