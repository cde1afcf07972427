package storekit

import (
	"reflect"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestFilterRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_733_100_000_123)
	f := domain.JobFilter{
		Statuses: []domain.Status{domain.StatusFailed, domain.StatusCompleted}, Tenant: "acme",
		UserID: domain.Scope("acme", "alice"), Destination: "https://api.test:443", PoolID: domain.Scope("acme", "gpu"),
		CreatedAfter: at.Add(-time.Hour), CreatedBefore: at, ResponseStatus: 503, Q: `"refused" \ 100%`,
	}
	s, err := EncodeFilter(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFilter(s)
	if err != nil {
		t.Fatalf("DecodeFilter(%s): %v", s, err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip of %s:\n got %+v\nwant %+v", s, got, f)
	}
}

func TestEmptyFilterRoundTrip(t *testing.T) {
	s, err := EncodeFilter(domain.JobFilter{})
	if err != nil || s != "{}" {
		t.Fatalf("EncodeFilter(empty) = %q, %v; want {}", s, err)
	}
	got, err := DecodeFilter(s)
	if err != nil || !reflect.DeepEqual(got, domain.JobFilter{}) {
		t.Fatalf("DecodeFilter({}) = %+v, %v; want the empty filter", got, err)
	}
	if _, err := DecodeFilter("not json"); err == nil {
		t.Fatal("DecodeFilter of garbage: no error")
	}
}
