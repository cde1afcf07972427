package dispatch

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func FuzzAppendWebhookPayloadIsMarshal(f *testing.F) {
	f.Add("job1", "completed", []byte(`{"ok":true}`), "", 200, false, true)
	f.Add("job2", "failed", []byte("<b>&amp;\u2028\u2029\x00\x1f\x7f\"\\\b\f\n\r\t</b>"), "upstream returned 503 <x>", 503, true, true)
	f.Add("j\xff", "failed", []byte{0xff, 0xfe, 0}, "bad \xc3", 0, false, true)
	f.Add("job4", "completed", []byte("é日本\xed\xa0\x80"), "", 204, false, false)
	f.Fuzz(func(t *testing.T, id, status string, body []byte, reason string, code int, truncated, withResult bool) {
		var res *domain.Result
		if withResult {
			res = &domain.Result{Body: body, Reason: reason, ResponseStatus: code, BodyTruncated: truncated}
		}
		want, err := json.Marshal(NewWebhookPayload(domain.JobID(id), domain.Status(status), res))
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendWebhookPayload(nil, domain.JobID(id), domain.Status(status), res); !bytes.Equal(got, want) {
			t.Fatalf("AppendWebhookPayload:\n got %s\nwant %s", got, want)
		}
	})
}

func BenchmarkWebhookPayload(b *testing.B) {
	res := &domain.Result{Body: []byte(`{"id":"cmpl-123","choices":[{"text":"hello <world> & more"}]}`), ResponseStatus: 200}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			AppendWebhookPayload(make([]byte, 0, len(res.Body)+webhookOverhead), "0192e0c4f3a87b6c", domain.StatusCompleted, res)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(NewWebhookPayload("0192e0c4f3a87b6c", domain.StatusCompleted, res))
		}
	})
}
