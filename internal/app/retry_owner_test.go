package app_test

import (
	"net/http"
	"testing"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestRetryReturnsTheCallersOwnCopy: the job Retry returns is the
// caller's. The dispatcher runs the re-queued job at once and records its
// attempt on its own copy; the one returned stays as it was when it was
// re-queued (a shared one was written while an adapter rendered it).
func TestRetryReturnsTheCallersOwnCopy(t *testing.T) {
	target := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b := setup(t, func(c *app.Config) { c.Retry.Attempts = 1 })
	id := b.enqueue(t, req("own-copy", target.URL+"/x"))
	b.waitStatus(t, id, domain.StatusFailed)

	again, err := b.svc.Retry(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	done := b.waitStatus(t, id, domain.StatusCompleted)
	if len(done.History) != 2 {
		t.Fatalf("history after the retry = %+v, want two attempts", done.History)
	}
	if again.Attempts != 0 || len(again.History) != 1 || again.Result != nil {
		t.Fatalf("the job Retry returned changed after it returned: attempts %d, history %+v, result %+v",
			again.Attempts, again.History, again.Result)
	}
}
