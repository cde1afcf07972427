package aquifer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// TestEnqueueBatchAndJobBounds checks EnqueueBatch through the facade (one
// answer per request, in order: created, invalid, duplicate) and that
// Options.JobBounds reach the core.
func TestEnqueueBatchAndJobBounds(t *testing.T) {
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer dest.Close()
	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true,
		JobBounds: aquifer.OptionBounds{MaxAttempts: 3, MaxDelay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer aq.Stop(ctx)

	four, delay := 4, 7200.0
	notBefore, err := aquifer.ParseTime("not_before", "1900000000000")
	if err != nil || notBefore.UnixMilli() != 1900000000000 {
		t.Fatalf("ParseTime = %v, %v", notBefore, err)
	}
	job := func(key string, o aquifer.OptionsRequest) *aquifer.JobRequest {
		return &aquifer.JobRequest{UserID: "u", IdempotentKey: key, URL: dest.URL + "/" + key, Options: o}
	}
	items, err := aq.EnqueueBatch(ctx, []*aquifer.JobRequest{
		job("a", aquifer.OptionsRequest{Priority: aquifer.PriorityLow.String()}),
		job("b", aquifer.OptionsRequest{Retry: &aquifer.RetryRequest{MaxAttempts: &four}}), // over JobBounds.MaxAttempts
		job("c", aquifer.OptionsRequest{DelaySeconds: &delay}),                             // over JobBounds.MaxDelay
		job("a", aquifer.OptionsRequest{}),                                                 // duplicate of the first
	})
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	if len(items) != 4 || items[0].Err != nil || items[0].Result.Duplicate ||
		aquifer.ErrorField(items[1].Err) != "retry.max_attempts" || aquifer.ErrorField(items[2].Err) != "delay_seconds" ||
		items[3].Err != nil || !items[3].Result.Duplicate || items[3].Result.JobID != items[0].Result.JobID {
		t.Fatalf("EnqueueBatch items = %+v", items)
	}
	j, err := aq.Wait(ctx, items[0].Result.JobID)
	if err != nil || j.Priority != aquifer.PriorityLow || j.Status != aquifer.StatusCompleted {
		t.Fatalf("batch job = %+v, %v", j, err)
	}

	// More than MaxBatch is refused as a whole.
	many := make([]*aquifer.JobRequest, aquifer.MaxBatch+1)
	for i := range many {
		many[i] = job("m", aquifer.OptionsRequest{})
	}
	if _, err := aq.EnqueueBatch(ctx, many); aquifer.ErrorCode(err) != aquifer.CodeInvalid || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("EnqueueBatch of %d: %v", len(many), err)
	}
}
