package ui

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestNothingIsPreparedUntilTheFirstRequest: building the handler reads,
// versions and compresses nothing; the first request does it once.
func TestNothingIsPreparedUntilTheFirstRequest(t *testing.T) {
	h := Handler(Options{Version: "v1"}).(*handler)
	if h.assets != nil {
		t.Fatal("the assets were prepared before any request")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	if rec.Code != http.StatusOK || h.assets == nil || h.assets[""] == nil {
		t.Fatalf("first request: %d, assets prepared: %v", rec.Code, h.assets != nil)
	}
	first := h.assets[""]
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/ui/", nil))
	if h.assets[""] != first {
		t.Fatal("the assets were prepared twice")
	}
}
