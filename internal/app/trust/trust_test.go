package trust

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/clocktest"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// countingTrust is a trust store that counts its reads.
type countingTrust struct {
	mu    sync.Mutex
	gets  int
	trust map[string]*l8.Trust
}

func (c *countingTrust) Get(d string) (*l8.Trust, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets++
	if t, ok := c.trust[d]; ok {
		return t, nil
	}
	return nil, l8.ErrNoTrust
}

func (c *countingTrust) Put(t *l8.Trust) error { return nil }

// refusingDoer fails every handshake request.
type refusingDoer struct{}

func (refusingDoer) Do(*http.Request) (*http.Response, error) { return nil, errors.New("refused") }

func TestTrustedRemembersANoForASecondAndNeverAYes(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	store := &countingTrust{trust: map[string]*l8.Trust{"http://yes.test": {Domain: "http://yes.test"}}}
	tm := newTrustManager(Config{Trust: store, MissTTL: time.Hour}, refusingDoer{}, clock, zap.NewNop())
	ctx := context.Background()

	for range 100 {
		if tm.trusted(ctx, "http://no.test/hooks/a") {
			t.Fatal("a receiver whose handshake failed is trusted")
		}
	}
	if store.gets != 1 {
		t.Fatalf("%d trust reads for 100 deliveries within a second, want 1", store.gets)
	}
	clock.Advance(trustRecheck)
	tm.trusted(ctx, "http://no.test/hooks/b")
	if store.gets != 2 {
		t.Fatalf("%d trust reads after the recheck interval, want 2", store.gets)
	}

	store.gets = 0
	for range 10 {
		if !tm.trusted(ctx, "http://yes.test/hooks") {
			t.Fatal("a trusted receiver is not trusted")
		}
	}
	if store.gets != 10 {
		t.Fatalf("%d trust reads for 10 deliveries to a trusted receiver, want 10 (revocation is immediate)", store.gets)
	}
}

func TestTrustedNoEndsWithTheMissWindow(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	store := &countingTrust{}
	tm := newTrustManager(Config{Trust: store, MissTTL: 300 * time.Millisecond}, refusingDoer{}, clock, zap.NewNop())
	tm.trusted(context.Background(), "http://no.test/")
	clock.Advance(300 * time.Millisecond) // the miss window is over before trustRecheck
	store.gets = 0
	tm.trusted(context.Background(), "http://no.test/")
	if store.gets == 0 {
		t.Fatal("the remembered no outlived the miss window")
	}
}
