package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// TestExampleReceiverAgainstAquifer runs the example receiver against a
// real Aquifer core: the handshake completes, deliveries are accepted, and
// the log shows L8-verified deliveries.
func TestExampleReceiverAgainstAquifer(t *testing.T) {
	_, aqPriv, _ := ed25519.GenerateKey(rand.Reader)
	aq := l8.NewIdentity(aqPriv)
	_, recvPriv, _ := ed25519.GenerateKey(rand.Reader)

	var mu sync.Mutex
	var lines []string
	h, err := newHandler(aq.PublicKeyBase64(), recvPriv, func(f string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(f, a...))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(h)
	defer receiver.Close()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer target.Close()

	svc, err := app.New(app.Config{Store: memory.New(nil), Doer: &http.Client{}, Logger: zap.NewNop(),
		Rates: app.RateTable{Defaults: domain.Rate{RPS: 100, MaxConcurrent: 4}},
		L8:    app.L8Config{Identity: aq}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	}()
	for i := range 2 {
		if _, err := svc.Enqueue(t.Context(), &domain.JobRequest{UserID: "u", IdempotentKey: fmt.Sprint(i),
			URL: target.URL, WebhookURL: receiver.URL + "/hook"}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "completed (verified by l8") {
				n++
			} else {
				t.Errorf("unexpected log line %q", l)
			}
		}
		mu.Unlock()
		if n == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries verified by L8: %d of 2; log %q", n, lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExampleReceiverRejectsUnsigned(t *testing.T) {
	_, aqPriv, _ := ed25519.GenerateKey(rand.Reader)
	_, recvPriv, _ := ed25519.GenerateKey(rand.Reader)
	h, err := newHandler(l8.NewIdentity(aqPriv).PublicKeyBase64(), recvPriv, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(`{"job_id":"x"}`)))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("unsigned delivery: %d, want 401", rec.Code)
	}
}
