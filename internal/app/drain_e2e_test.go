package app_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestDrainFlushesThenClears(t *testing.T) {
	target := newUpstream(t, nil)
	var mu sync.Mutex
	var pages []app.DrainPayload
	failures := 2 // the first two POSTs fail: nothing may be cleared meanwhile
	var b *bundle
	var ids []domain.JobID
	var receiver *upstream
	receiver = newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path != "/drain" {
			w.WriteHeader(http.StatusNotFound) // no L8 here
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			// Still here: every job, before any delivery was confirmed.
			for _, id := range ids {
				if _, err := b.svc.Get(r.Context(), id); err != nil {
					t.Errorf("job %s gone before the flush was confirmed: %v", id, err)
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var p app.DrainPayload
		if err := json.Unmarshal([]byte(receiver.snapshot()[n-1].body), &p); err != nil {
			t.Errorf("drain payload: %v", err)
		}
		if r.Header.Get("webhook-signature") == "" {
			t.Error("drain payload is not signed")
		}
		pages = append(pages, p)
		w.WriteHeader(http.StatusNoContent)
	})
	b = setup(t, func(c *app.Config) {
		c.L8 = app.L8Config{Identity: newTestIdentity(t), MissTTL: time.Hour}
		// The default timing: idle for 45 s, checked every 5 s, a failed
		// flush retried after 5 s, doubling.
		c.Drain = app.DrainConfig{Enabled: true, WebhookURL: receiver.URL + "/drain", PageSize: 2}
	})
	for i := range 5 {
		id := b.enqueue(t, req(fmt.Sprint("d", i), target.URL+"/x"))
		ids = append(ids, id)
	}
	for _, id := range ids {
		b.waitStatus(t, id, domain.StatusCompleted)
	}
	lastWork := now(t)
	waitFor(t, "the drain state to be unassigned", func() bool {
		return b.svc.Health(t.Context()).Drain.State == app.DrainUnassigned
	})
	// The flush starts once the instance has been idle for 45 s (seen at a
	// 5 s tick), and a failed one is tried again 5 s, then 10 s later; the
	// pages of the flush that works follow at once.
	var posts []time.Duration
	for _, h := range receiver.snapshot() {
		if h.path == "/drain" {
			posts = append(posts, h.at.Sub(lastWork))
		}
	}
	if len(posts) != 5 || posts[0] < 45*time.Second || posts[0] > 50*time.Second ||
		posts[1]-posts[0] != 5*time.Second || posts[2]-posts[1] != 10*time.Second || posts[4] != posts[2] {
		t.Fatalf("drain POSTs at %v after the last work; want the first 45-50 s after it, then 5 s and 10 s later, then two more pages at once", posts)
	}
	mu.Lock()
	got := append([]app.DrainPayload(nil), pages...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d pages delivered, want 3 (5 entries, 2 per page)", len(got))
	}
	seen := map[string]bool{}
	for i, p := range got {
		if p.Event != "instance_idle" || p.Page != i+1 || p.Last != (i == 2) || p.FlushID != got[0].FlushID {
			t.Fatalf("page %d: %+v", i+1, p)
		}
		if _, err := time.Parse(time.RFC3339, p.FlushedAt); err != nil {
			t.Fatalf("flushed_at %q: %v", p.FlushedAt, err)
		}
		for _, e := range p.Ledger {
			seen[e.JobID] = true
			if e.Status != "completed" {
				t.Fatalf("entry %+v", e)
			}
		}
	}
	for i, id := range ids {
		if !seen[string(id)] {
			t.Fatalf("job %s missing from the ledger", id)
		}
		sum := sha256.Sum256([]byte("u1:" + fmt.Sprint("d", i)))
		want := hex.EncodeToString(sum[:])
		found := false
		for _, p := range got {
			for _, e := range p.Ledger {
				if e.JobID == string(id) && e.IdempotentKeyHash == want {
					found = true
				}
			}
		}
		if !found {
			t.Fatalf("job %s: no entry with hash sha256(user_id:idempotent_key)", id)
		}
		if _, err := b.svc.Get(t.Context(), id); err == nil {
			t.Fatalf("job %s still there after the confirmed flush", id)
		}
	}
	// The keys are free again, and new work makes the instance active.
	again := b.enqueue(t, req("d0", target.URL+"/x"))
	if again == ids[0] {
		t.Fatal("a cleared key returned the old job")
	}
	if s := b.svc.Health(t.Context()).Drain.State; s != app.DrainActive {
		t.Fatalf("state %s after new work, want active", s)
	}
}
