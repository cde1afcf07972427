package storekit

import (
	"reflect"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestHistoryRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_733_100_000_123)
	h := []domain.Attempt{
		{At: at, Duration: 1500 * time.Microsecond, Status: 429, Signal: domain.SignalRetryAfter},
		{At: at.Add(time.Second), Duration: 3 * time.Second, Error: "dial tcp: connect: \"refused\"\n"},
		{At: at.Add(2 * time.Second), Status: 200, Signal: domain.SignalORCA, Member: "acme\x1fgpu-1"},
	}
	s, err := EncodeHistory(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHistory(s)
	if err != nil {
		t.Fatalf("DecodeHistory(%s): %v", s, err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Fatalf("round trip of %s:\n got %+v\nwant %+v", s, got, h)
	}
}

func TestHistoryKeepsMillisecondsAndMicroseconds(t *testing.T) {
	at := time.Unix(1_733_100_000, 123_456_789)
	s, err := EncodeHistory([]domain.Attempt{{At: at, Duration: 1234567 * time.Nanosecond}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHistory(s)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].At.Equal(time.UnixMilli(at.UnixMilli())) || got[0].Duration != 1234*time.Microsecond {
		t.Fatalf("attempt read back as %+v from %s", got[0], s)
	}
}

func TestEmptyHistoryIsStoredAsNothing(t *testing.T) {
	for _, h := range [][]domain.Attempt{nil, {}} {
		s, err := EncodeHistory(h)
		if err != nil || s != "" {
			t.Fatalf("EncodeHistory(%#v) = %q, %v; want \"\"", h, s, err)
		}
	}
	for _, s := range []string{"", "[]"} {
		h, err := DecodeHistory(s)
		if err != nil || h != nil {
			t.Fatalf("DecodeHistory(%q) = %#v, %v; want nil", s, h, err)
		}
	}
	if _, err := DecodeHistory(`{"at":1}`); err == nil {
		t.Fatal("DecodeHistory of an object, not an array: no error")
	}
}
