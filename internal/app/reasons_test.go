package app_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// closedPort is a loopback address nothing listens on: dialling it is
// refused at once, without leaving the machine.
const closedPort = "127.0.0.1:1"

// TestTransportReasonNamesTheAddressNotTheURL: a transport error's reason
// names the operation and the address, never the URL with its query (which
// may carry a token): in the job, the failed event, the webhook payload and
// the log.
func TestTransportReasonNamesTheAddressNotTheURL(t *testing.T) {
	hk := newHooks(t)
	b := setup(t, func(c *app.Config) { c.Retry.Attempts = 2 })
	r := req("down", "http://"+closedPort+"/p?access_token=s3cr3t-dispatch&x=1")
	r.WebhookURL = hk.URL + "/hook?sig=s3cr3t-hook"
	id := b.enqueue(t, r)
	j, sub, err := b.svc.Subscribe(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var failed *domain.Event
	if !j.Status.Terminal() {
		for failed == nil {
			if ev := recv(t, "the failed event", sub.C); ev.Type == domain.EventFailed {
				failed = &ev
			}
		}
	}
	j = b.waitStatus(t, id, domain.StatusFailed)
	const want = "dial tcp " + closedPort + ": connect: connection refused"
	if j.Result.Reason != want {
		t.Fatalf("reason %q, want %q", j.Result.Reason, want)
	}
	if failed != nil && failed.Result.Reason != want {
		t.Fatalf("failed event reason %q, want %q", failed.Result.Reason, want)
	}
	waitFor(t, "the webhook", func() bool { return hk.count() == 1 })
	if p := hk.payloads(t)[string(id)]; p.Reason != want {
		t.Fatalf("webhook payload reason %q, want %q", p.Reason, want)
	}
	if hk.snapshot()[0].path != "/hook" {
		t.Fatalf("webhook went to %q", hk.snapshot()[0].path)
	}
	noSecretInLogs(t, b, "s3cr3t")
}

// TestTimeoutReasonStaysReadable: a timed-out attempt says so, without the
// URL.
// (The request timeout is a real context deadline: the request holds the
// test's clock until it runs out.)
func TestTimeoutReasonStaysReadable(t *testing.T) {
	up := newUpstream(t, func(_ http.ResponseWriter, r *http.Request, _ int) { <-r.Context().Done() })
	b := setup(t, func(c *app.Config) {
		c.RequestTimeout = 50 * time.Millisecond
		c.Retry.Attempts = 1
	})
	j := b.waitStatus(t, b.enqueue(t, req("slow", up.URL+"/p?token=s3cr3t-slow")), domain.StatusFailed)
	if !strings.HasPrefix(j.Result.Reason, "request timed out: ") || strings.Contains(j.Result.Reason, "http") ||
		strings.Contains(j.Result.Reason, "s3cr3t") {
		t.Fatalf("reason %q: want a timeout that names no URL", j.Result.Reason)
	}
}

// TestFailedDeliveryLogNamesNoURL: the log line of a delivery whose retries
// are spent names the reason, not the webhook URL.
func TestFailedDeliveryLogNamesNoURL(t *testing.T) {
	up := newUpstream(t, nil)
	b := setup(t, func(c *app.Config) { c.Retry.Attempts = 2 })
	r := req("hook-down", up.URL)
	r.WebhookURL = "http://" + closedPort + "/hook?sig=s3cr3t-hook&x=1"
	id := b.enqueue(t, r)
	var j *domain.Job
	waitFor(t, "the delivery to fail", func() bool {
		var err error
		j, err = b.svc.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status == domain.DeliveryFailed
	})
	if want := "dial tcp " + closedPort + ": connect: connection refused"; j.Delivery.Reason != want {
		t.Fatalf("delivery reason %q, want %q", j.Delivery.Reason, want)
	}
	logged := b.logs.FilterMessageSnippet("webhook delivery failed").All()
	if len(logged) == 0 {
		t.Fatal("the failed delivery was not logged")
	}
	noSecretInLogs(t, b, "s3cr3t")
}

func noSecretInLogs(t *testing.T, b *bundle, secret string) {
	t.Helper()
	for _, e := range b.logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		if strings.Contains(line, secret) {
			t.Errorf("log line leaks a secret: %s", line)
		}
	}
}

// dialSpy connects only to loopback addresses and records every address it
// was asked to dial.
type dialSpy struct {
	mu     sync.Mutex
	dialed []string
}

func (d *dialSpy) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	host, _, err := net.SplitHostPort(address)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("test dialer refuses non-loopback %s", address)
	}
	return (&net.Dialer{}).DialContext(ctx, network, address)
}

func (d *dialSpy) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// TestWebhookRedirectToDeniedAddressFailsDelivery: a receiver redirecting
// to the cloud metadata address gets no request there (the egress guard
// refuses the redirect before any dial) and the delivery is failed with the
// reason, not recorded as delivered.
func TestWebhookRedirectToDeniedAddressFailsDelivery(t *testing.T) {
	hk := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	up := newUpstream(t, nil)
	spy := &dialSpy{}
	b := setup(t, func(c *app.Config) { c.Doer = egress.NewClient(egress.Options{Dial: spy.Dial}) })
	r := req("redirected", up.URL)
	r.WebhookURL = hk.URL + "/hook"
	id := b.enqueue(t, r)
	var j *domain.Job
	waitFor(t, "the delivery to end", func() bool {
		var err error
		j, err = b.svc.Get(t.Context(), id)
		return err == nil && j.Delivery != nil && j.Delivery.Status != domain.DeliveryPending
	})
	if j.Delivery.Status != domain.DeliveryFailed {
		t.Fatalf("delivery %+v, want failed", j.Delivery)
	}
	if want := "destination 169.254.169.254 is denied: link-local / cloud metadata address"; j.Delivery.Reason != want {
		t.Fatalf("delivery reason %q, want %q", j.Delivery.Reason, want)
	}
	if hk.count() != 1 {
		t.Fatalf("receiver hit %d times; a denied destination is not retried", hk.count())
	}
	for _, a := range spy.addresses() {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("dialled %s; the redirect target must be refused before any dial (dialled %v)", a, spy.addresses())
		}
	}
	if len(spy.addresses()) == 0 {
		t.Fatal("nothing was dialled: the test proves nothing")
	}
}
