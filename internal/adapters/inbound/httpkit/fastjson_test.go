package httpkit

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

var typicalJobJSON = []byte(`{"user_id":"bench","method":"POST","headers":{"Content-Type":"application/json"},` +
	`"url":"http://127.0.0.1:40000/t","body":"{\"payload\":\"xxxxxxxx\"}","webhook_url":"http://127.0.0.1:40001/h",` +
	`"idempotent_key":"e2e-1733150000000-12345"}`)

var fastJSONSeeds = []string{
	string(typicalJobJSON),
	`{}`, ` { } `, `{"headers":{}}`, `{"headers":{"A":"1","a":"2"}}`,
	`{"user_id":"u","url":"https://x.test/","priority":"high","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}`,
	"{\"body\":\"line\\nnext\\t\\\"q\\\" \\\\ \\/ \\b\\f\\r\"}",
	`{"body":"\u00e9"}`, `{"body":"\ud800"}`, `{"user_id":null}`, `{"user_id":1}`, `{"user_id":"a","user_id":"b"}`,
	`{"USER_ID":"x"}`, `{"user_id":"x","extra":1}`, `{"user_id":"x"} {}`, `{"user_id":"x",}`, `{"headers":{"A":1}}`,
	`{"headers":null}`, `{"headers":{"A":"1","A":"2"}}`, `{"delay_seconds":5}`, `{"retry":{"max_attempts":2}}`,
	"{\"body\":\"raw\ttab\"}", `{"body":"\x"}`, `{"user_id":"é"}`, `{"user_id" : "x" , "url" : "y" }`, `{"user_id":"x"`,
}

// FuzzDecodeFastMatchesEncodingJSON: whenever the fast decoder accepts an
// input, encoding/json accepts it too and decodes exactly the same request.
func FuzzDecodeFastMatchesEncodingJSON(f *testing.F) {
	for _, s := range fastJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !utf8.Valid(raw) {
			return // decodeJSON refuses it before any decoder runs
		}
		var fast JobRequestJSON
		if !fast.decodeFast(raw) {
			if !reflect.DeepEqual(fast, JobRequestJSON{}) {
				t.Fatalf("declined %q but changed the request: %+v", raw, fast)
			}
			return
		}
		var slow JobRequestJSON
		if err := json.Unmarshal(raw, &slow); err != nil {
			t.Fatalf("fast decoder accepted %q, encoding/json refuses it: %v", raw, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("decoding %q:\n fast %+v\n json %+v", raw, fast, slow)
		}
	})
}

func TestDecodeFastTakesTheCommonShape(t *testing.T) {
	for _, s := range []string{string(typicalJobJSON), `{}`, fastJSONSeeds[5], fastJSONSeeds[6], `{"user_id" : "x" , "url" : "y" }`} {
		var in JobRequestJSON
		if !in.decodeFast([]byte(s)) {
			t.Errorf("the fast decoder declined %s", s)
		}
	}
	var in JobRequestJSON
	in.decodeFast(typicalJobJSON)
	if in.Body != `{"payload":"xxxxxxxx"}` || in.Headers["Content-Type"] != "application/json" || in.IdempotentKey != "e2e-1733150000000-12345" {
		t.Fatalf("decoded %+v", in)
	}
	for _, s := range []string{`{"body":"\u00e9"}`, `{"user_id":null}`, `{"USER_ID":"x"}`, `{"user_id":"a","user_id":"b"}`, `{"delay_seconds":5}`} {
		var in JobRequestJSON
		if in.decodeFast([]byte(s)) {
			t.Errorf("the fast decoder took %s, which it leaves to encoding/json", s)
		}
	}
}

func TestDecodeJSONErrorsAreUnchangedByTheFastPath(t *testing.T) {
	// Inputs the fast decoder declines still get encoding/json's answer.
	for raw, want := range map[string]string{
		`{"user_id":1}`:          "user_id",
		`{"headers":{"A":1}}`:    "headers",
		`{"user_id":"x"} {}`:     "",
		`{"delay_seconds":"x"}`:  "delay_seconds",
		`{"user_id":"x","url":}`: "",
	} {
		var in JobRequestJSON
		msg, field := decodeJSON([]byte(raw), &in)
		if msg == "" || field != want {
			t.Errorf("decodeJSON(%s) = %q, field %q; want an error on field %q", raw, msg, field, want)
		}
	}
}

// plainJobRequestJSON has JobRequestJSON's fields but not its methods: it
// is decoded by encoding/json.
type plainJobRequestJSON JobRequestJSON

func BenchmarkDecodeJobRequest(b *testing.B) {
	for _, bc := range []struct {
		name string
		dst  func() any
	}{
		{"fast", func() any { return &JobRequestJSON{} }},
		{"encoding-json", func() any { return &plainJobRequestJSON{} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if msg, _ := decodeJSON(typicalJobJSON, bc.dst()); msg != "" {
					b.Fatal(msg)
				}
			}
		})
	}
}
