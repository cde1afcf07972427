package a2aagent

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
)

// Seed corpus: testdata/fuzz/FuzzDecodeRequest. Plain `go test` replays it;
// explore with
//
//	go test -run '^$' -fuzz FuzzDecodeRequest -fuzztime 60s ./internal/adapters/inbound/a2a/

// FuzzDecodeRequest turns arbitrary JSON into a message's data part (once,
// twice, or next to a text part) and decodes the job from it. It never
// panics; a refusal is an invalid-params error; an accepted job is exactly
// the data part read as POST /jobs, within the body limit, and valid.
func FuzzDecodeRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, parts uint8, maxBody int64) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return // the SDK refuses a data part that is not a JSON object
		}
		msg := &a2a.Message{ID: "m", Role: a2a.MessageRoleUser}
		switch parts % 4 {
		case 0:
			msg.Parts = []a2a.Part{a2a.DataPart{Data: m}}
		case 1:
			msg.Parts = []a2a.Part{a2a.TextPart{Text: "please"}, &a2a.DataPart{Data: m}}
		case 2:
			msg.Parts = []a2a.Part{a2a.DataPart{Data: m}, a2a.DataPart{Data: m}}
		case 3:
			msg.Parts = []a2a.Part{a2a.TextPart{Text: string(data)}}
		}
		req, err := decodeRequest(msg, maxBody)
		if err != nil {
			if req != nil || !errors.Is(err, a2a.ErrInvalidParams) || err.Error() == "" {
				t.Fatalf("decodeRequest = %+v, %v: want nil and an invalid-params error", req, err)
			}
			return
		}
		if parts%4 >= 2 {
			t.Fatalf("accepted a message with %d data parts", map[uint8]int{2: 2, 3: 0}[parts%4])
		}
		if maxBody > 0 && int64(len(req.Body)) > maxBody {
			t.Fatalf("accepted a %d-byte body over the limit %d", len(req.Body), maxBody)
		}
		raw, _ := json.Marshal(m)
		var ref httpkit.JobRequestJSON
		if err := json.Unmarshal(raw, &ref); err != nil {
			t.Fatalf("accepted a data part POST /jobs refuses: %v", err)
		}
		want, err := ref.Request(nil)
		if err != nil {
			t.Fatalf("accepted job options POST /jobs refuses: %v", err)
		}
		if err := want.Validate(); err != nil {
			t.Fatalf("accepted a job POST /jobs refuses: %v", err)
		}
		if !reflect.DeepEqual(req, want) {
			t.Fatalf("decoded %+v, POST /jobs would make %+v", req, want)
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded job does not validate again: %v", err)
		}
	})
}
