package app_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// TestTenantCapPacesOnlyThatTenant: a tenant with its own cap on a
// destination is paced at it, while another tenant's jobs to the same
// destination run at the destination's ceiling.
func TestTenantCapPacesOnlyThatTenant(t *testing.T) {
	target := newUpstream(t, nil)
	host := strings.TrimPrefix(target.URL, "http://")
	b := setup(t, func(c *app.Config) {
		c.Rates.Hosts = map[string]domain.Rate{host: {RPS: 200, MaxConcurrent: 8}}
		c.Tenants = []app.Tenant{{Name: "slow", Rates: map[string]domain.Rate{host: {RPS: 10, MaxConcurrent: 1}}}, {Name: "fast"}}
	})
	slow, fast := app.WithTenant(t.Context(), "slow"), app.WithTenant(t.Context(), "fast")
	for i := range 12 {
		if _, err := b.svc.Enqueue(slow, req(fmt.Sprint("s", i), target.URL+"/slow")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		if _, err := b.svc.Enqueue(fast, req(fmt.Sprint("f", i), target.URL+"/fast")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all 52 dispatches", func() bool { return target.count() == 52 })
	var slowAt, fastAt []time.Time
	for _, h := range target.snapshot() {
		if h.path == "/slow" {
			slowAt = append(slowAt, h.at)
		} else {
			fastAt = append(fastAt, h.at)
		}
	}
	sort.Slice(slowAt, func(i, j int) bool { return slowAt[i].Before(slowAt[j]) })
	slowRate := float64(len(slowAt)-1) / slowAt[len(slowAt)-1].Sub(slowAt[0]).Seconds()
	if math.Abs(slowRate-10) > 1e-6 {
		t.Fatalf("the capped tenant ran at %.1f rps; its cap is 10", slowRate)
	}
	sort.Slice(fastAt, func(i, j int) bool { return fastAt[i].Before(fastAt[j]) })
	if fastRate := float64(len(fastAt)-1) / fastAt[len(fastAt)-1].Sub(fastAt[0]).Seconds(); fastRate < 10*1.5 {
		t.Fatalf("the uncapped tenant ran at %.1f rps: held to the other's cap", fastRate)
	}
	if fastAt[len(fastAt)-1].After(slowAt[len(slowAt)-1]) {
		t.Fatal("the uncapped tenant's 40 jobs finished after the capped tenant's 12: it was held back by the other's cap")
	}
}

// TestTenantScoping: names are per tenant, jobs are visible only to their
// tenant, and shown under the names the tenant chose.
func TestTenantScoping(t *testing.T) {
	target := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusOK) })
	b := setup(t, func(c *app.Config) { c.Tenants = []app.Tenant{{Name: "a"}, {Name: "b", MaxQueued: 1}} })
	ca, cb := app.WithTenant(t.Context(), "a"), app.WithTenant(t.Context(), "b")
	ra, err := b.svc.Enqueue(ca, req("k", target.URL))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.svc.Enqueue(cb, req("k", target.URL))
	if err != nil || rb.Duplicate || rb.JobID == ra.JobID {
		t.Fatalf("same key in another tenant: %+v %v", rb, err)
	}
	if _, err := b.svc.Get(cb, ra.JobID); domain.CodeOf(err) != domain.CodeNotFound {
		t.Fatalf("b reading a's job: %v", err)
	}
	if _, err := b.svc.Cancel(cb, ra.JobID); domain.CodeOf(err) != domain.CodeNotFound {
		t.Fatalf("b cancelling a's job: %v", err)
	}
	if _, _, err := b.svc.Subscribe(cb, ra.JobID); domain.CodeOf(err) != domain.CodeNotFound {
		t.Fatalf("b following a's job: %v", err)
	}
	j, err := b.svc.Get(ca, ra.JobID)
	if err != nil || j.UserID != "u1" {
		t.Fatalf("a's view of its job: %+v %v", j, err)
	}
	// The operator (no tenant) sees everything.
	if _, err := b.svc.Get(t.Context(), rb.JobID); err != nil {
		t.Fatalf("operator view: %v", err)
	}
	// Pools are per tenant.
	if _, err := b.svc.RegisterMember(ca, &domain.MemberRegistration{PoolID: "p", MemberID: "m", Address: target.URL, CapacityRPS: 1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.svc.Pools(cb)["p"]; ok {
		t.Fatal("b sees a's pool")
	}
	if _, ok := b.svc.Pools(ca)["p"]; !ok {
		t.Fatal("a does not see its pool")
	}
	if err := b.svc.LeaveMember(cb, "p", "m"); domain.CodeOf(err) != domain.CodeNotFound {
		t.Fatalf("b removing a's member: %v", err)
	}
}

// TestTenantQuotaRejection: a tenant at its max_queued quota is refused
// with the limit it reached, the count and a retry delay.
func TestTenantQuotaRejection(t *testing.T) {
	release := make(chan struct{})
	target := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	b := setup(t, func(c *app.Config) { c.Tenants = []app.Tenant{{Name: "q", MaxQueued: 2}} })
	t.Cleanup(func() { close(release) }) // before the service stops: its attempts end
	ctx := app.WithTenant(t.Context(), "q")
	for i := range 2 {
		if _, err := b.svc.Enqueue(ctx, req(fmt.Sprint("held", i), target.URL)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.svc.Enqueue(ctx, req("third", target.URL))
	var rej *domain.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("third job: %v, want a rejection", err)
	}
	if rej.Limit != "tenant_quota" || rej.Max != 2 || rej.Current != 2 || rej.RetryAfter <= 0 {
		t.Fatalf("rejection %+v", rej)
	}
	if want := "admission rejected: tenant_quota reached limit 2"; err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
}
