package pebble

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// fullJob has every optional field set.
func fullJob() *domain.Job {
	at := time.UnixMilli(1_750_000_000_123)
	return &domain.Job{
		ID: "0190a1b2c3d4e5f60718293a4b5c6d7e", Seq: 42, UserID: "user:with:colons", IdempotentKey: "key\x00with\xffbytes",
		URL: "https://api.example.test/v1/x?q=1", PoolID: "readers", Method: "PATCH",
		Headers: map[string]string{"Content-Type": "application/json", "X-Empty": "", "": "empty name"},
		Body:    []byte{0, 1, 2, 0xff, 0xfe}, WebhookURL: "https://hooks.example.test/h",
		Queue: "api.example.test:443|tenant\x00x", Status: domain.StatusCompleted, Attempts: 7, Deferrals: 3,
		CreatedAt: at, UpdatedAt: at.Add(time.Second), DispatchedAt: at.Add(500 * time.Millisecond), ExpiresAt: at.Add(domain.QueuedTTL),
		Result: &domain.Result{ResponseStatus: 502, Body: []byte{0xc3, 0x28, 0}, BodyTruncated: true,
			ContentType: "application/octet-stream", Reason: "upstream returned 502"},
		ReadyQueue: "hooks.example.test:443", ReadySeq: 99,
		Delivery: &domain.Delivery{Status: domain.DeliveryPending, Attempts: 2, ResponseStatus: 503, Reason: "receiver returned 503"},
		History: []domain.Attempt{
			{At: at.Add(100 * time.Millisecond), Duration: 250 * time.Millisecond, Status: 429, Signal: domain.SignalRetryAfter},
			{At: at.Add(500 * time.Millisecond), Duration: 30 * time.Second, Error: "timeout \x00 after 30s", Member: "gpu-1"},
			{At: time.UnixMilli(-5), Duration: -time.Millisecond, Status: -1},
		},
		JobOptions: domain.JobOptions{NotBefore: at.Add(time.Minute), Deadline: at.Add(time.Hour), Priority: domain.PriorityHigh,
			Retry:   domain.RetryOptions{MaxAttempts: 9, Backoff: 1500 * time.Millisecond, MaxBackoff: 90 * time.Second},
			Timeout: 7 * time.Second, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "k=v\x00"},
	}
}

// encodeNew encodes j's record as an insert does: version 4, the request
// body to go under b/.
func encodeNew(t testing.TB, j *domain.Job) []byte {
	t.Helper()
	rec, err := encodeJob(nil, j, refOf(j.Body))
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return rec
}

// decodeWithBody decodes rec and, when the record says its body is under
// b/, takes body as that key's value, as loadJob does.
func decodeWithBody(rec, body []byte) (*domain.Job, error) {
	j, ref, err := decodeJob(rec)
	if err != nil || !ref.apart() {
		return j, err
	}
	if len(body) != ref.n {
		return nil, errCorrupt
	}
	j.Body = append([]byte(nil), body...)
	return j, nil
}

// inlineForm is the record of version v (3 or older) that holds j's body
// inline, made from rec, j's version 4 record: the body's bytes go before
// the result body's, as layout 5 and before wrote them (a version 4
// record holds a short body there already).
func inlineForm(rec []byte, j *domain.Job, v byte) []byte {
	out := append([]byte(nil), rec...)
	if !refOf(j.Body).inline {
		res := 0
		if j.Result != nil {
			res = len(j.Result.Body)
		}
		out = append(append(append([]byte(nil), rec[:len(rec)-res]...), j.Body...), rec[len(rec)-res:]...)
	}
	out[0] = v
	return out
}

// roundTrip encodes j as a new job's record and decodes it with its body,
// checking on the way that the record holds no byte of a body longer than
// maxInlineBody (which goes under b/) and that the version 3 form of the
// record, with the body inline, decodes to the same job.
func roundTrip(t *testing.T, j *domain.Job) *domain.Job {
	t.Helper()
	rec := encodeNew(t, j)
	if rec[0] != recordVersion {
		t.Fatalf("record starts with %d, want version %d", rec[0], recordVersion)
	}
	if _, ref, err := decodeJob(rec); err != nil || ref != refOf(j.Body) {
		t.Fatalf("the record's body is %+v, %v; want %+v", ref, err, refOf(j.Body))
	}
	if len(j.Body) > maxInlineBody && bytes.Contains(rec, j.Body) {
		t.Fatal("a version 4 record holds a long request body")
	}
	got, err := decodeWithBody(rec, j.Body)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	old, ref, err := decodeJob(inlineForm(rec, j, recordVersionV3))
	if err != nil || !reflect.DeepEqual(old, got) || !ref.inline {
		t.Fatalf("the version 3 form decodes to %+v (%+v), %v; want %+v", old, ref, err, got)
	}
	return got
}

func TestCodecRoundTrip(t *testing.T) {
	cases := map[string]func(j *domain.Job){
		"everything set": func(*domain.Job) {},
		"nil headers":    func(j *domain.Job) { j.Headers = nil },
		"empty headers":  func(j *domain.Job) { j.Headers = map[string]string{} },
		"nil body":       func(j *domain.Job) { j.Body = nil },
		"empty body":     func(j *domain.Job) { j.Body = []byte{} },
		"no result, no delivery, queued": func(j *domain.Job) {
			j.Status, j.Result, j.Delivery, j.ReadyQueue = domain.StatusQueued, nil, nil, j.Queue
		},
		"in flight":           func(j *domain.Job) { j.Status, j.Result, j.Delivery = domain.StatusInFlight, nil, nil },
		"result without body": func(j *domain.Job) { j.Result.Body = nil; j.Result.BodyTruncated = false },
		"result empty body":   func(j *domain.Job) { j.Result.Body = []byte{} },
		"empty result":        func(j *domain.Job) { j.Result = &domain.Result{} },
		"failed, delivered": func(j *domain.Job) {
			j.Status, j.Delivery.Status, j.ReadyQueue = domain.StatusFailed, domain.DeliveryDelivered, ""
		},
		"delivery failed": func(j *domain.Job) { j.Delivery.Status = domain.DeliveryFailed },
		"zero times": func(j *domain.Job) {
			j.CreatedAt, j.UpdatedAt, j.DispatchedAt, j.ExpiresAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		},
		"before 1970":       func(j *domain.Job) { j.CreatedAt = time.UnixMilli(-86_400_000_123) },
		"negative counters": func(j *domain.Job) { j.Attempts, j.Deferrals, j.Result.ResponseStatus = -1, -2, -3 },
		"empty strings": func(j *domain.Job) {
			j.UserID, j.IdempotentKey, j.URL, j.PoolID, j.Method, j.WebhookURL, j.Queue, j.ReadyQueue = "", "", "", "", "", "", "", ""
		},
		"large body":               func(j *domain.Job) { j.Body = bytes.Repeat([]byte{0xab}, 1<<20) },
		"body at the inline limit": func(j *domain.Job) { j.Body = bytes.Repeat([]byte{0xcd}, maxInlineBody) },
		"body past the inline limit": func(j *domain.Job) {
			j.Body = bytes.Repeat([]byte{0xcd}, maxInlineBody+1)
		},
		"no history": func(j *domain.Job) { j.History = nil },
		"no options": func(j *domain.Job) { j.JobOptions = domain.JobOptions{} },
		"only a priority": func(j *domain.Job) {
			j.JobOptions = domain.JobOptions{Priority: domain.PriorityLow}
		},
		"only unindexed options": func(j *domain.Job) {
			j.JobOptions = domain.JobOptions{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		},
		"schedule before 1970": func(j *domain.Job) { j.NotBefore, j.Deadline = time.UnixMilli(-7), time.UnixMilli(-3) },
		"full history": func(j *domain.Job) {
			j.History = nil
			for i := range domain.MaxHistory {
				j.History = append(j.History, domain.Attempt{At: j.CreatedAt.Add(time.Duration(i) * time.Second), Status: 500 + i})
			}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			j := fullJob()
			mutate(j)
			got := roundTrip(t, j)
			if !reflect.DeepEqual(got, j) {
				t.Fatalf("round trip changed the job:\n got %+v\nwant %+v", got, j)
			}
			if (got.Headers == nil) != (j.Headers == nil) || (got.Body == nil) != (j.Body == nil) {
				t.Fatalf("nil-ness lost: headers %v/%v body %v/%v", got.Headers == nil, j.Headers == nil, got.Body == nil, j.Body == nil)
			}
		})
	}
}

// TestCodecReadsVersion1: a record of layout 2 (version 1, no history)
// decodes to the same job with no history.
func TestCodecReadsVersion1(t *testing.T) {
	j := fullJob()
	j.History, j.JobOptions = nil, domain.JobOptions{}
	rec := inlineForm(encodeNew(t, j), j, recordVersionV3)
	// Version 1 is version 2 without the history count (0 here) before
	// the bodies.
	bodies := len(j.Body) + len(j.Result.Body)
	v1 := append(append([]byte(nil), rec[:len(rec)-bodies-1]...), rec[len(rec)-bodies:]...)
	v1[0] = recordVersionV1
	got, _, err := decodeJob(v1)
	if err != nil || !reflect.DeepEqual(got, j) {
		t.Fatalf("version 1 record decodes to %+v, %v; want %+v", got, err, j)
	}
}

// TestPlainJobsCostNoOptionBytes: a job without options is encoded exactly
// as version 2 encoded it (only the version byte differs, once the body is
// put back inline), so the record of a layout 3 store reads as the same
// job; a job with only a priority costs three bytes more. A version 2
// record claiming options is corrupt.
func TestPlainJobsCostNoOptionBytes(t *testing.T) {
	j := fullJob()
	j.JobOptions = domain.JobOptions{}
	rec := encodeNew(t, j)
	v2 := inlineForm(rec, j, recordVersionV2)
	got, _, err := decodeJob(v2)
	if err != nil || !reflect.DeepEqual(got, j) {
		t.Fatalf("the version 2 form of a plain record decodes to %+v, %v; want %+v", got, err, j)
	}
	j.Priority = domain.PriorityHigh
	withPrio := encodeNew(t, j)
	if len(withPrio) != len(rec)+3 {
		t.Fatalf("a priority costs %d bytes, want 3", len(withPrio)-len(rec))
	}
	withPrio = inlineForm(withPrio, j, recordVersionV2)
	if _, _, err := decodeJob(withPrio); err == nil {
		t.Fatal("a version 2 record with options decoded")
	}
}

// TestDecodeMeta: the meta decoding is the full one without bodies,
// headers and history.
func TestDecodeMeta(t *testing.T) {
	rec := encodeNew(t, fullJob())
	want := fullJob()
	want.Body, want.Headers, want.History, want.Result.Body = nil, nil, nil, nil
	for _, r := range [][]byte{rec, inlineForm(rec, fullJob(), recordVersionV3)} {
		got, err := decodeMeta(r)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeMeta of version %d = %+v\nwant %+v", r[0], got, want)
		}
	}
}

// TestCodecTruncatesToMilliseconds: times are stored at the sqlite store's
// precision.
func TestCodecTruncatesToMilliseconds(t *testing.T) {
	j := fullJob()
	j.CreatedAt = time.Unix(1_750_000_000, 123_456_789)
	if got := roundTrip(t, j); !got.CreatedAt.Equal(time.UnixMilli(1_750_000_000_123)) {
		t.Fatalf("CreatedAt = %v", got.CreatedAt)
	}
}

func TestCodecDoesNotAliasItsInput(t *testing.T) {
	for _, mk := range []func() *domain.Job{fullJob, longBodyJob} {
		rec := encodeNew(t, mk())
		body := append([]byte(nil), mk().Body...)
		old := inlineForm(rec, mk(), recordVersionV3)
		got, err := decodeWithBody(rec, body)
		if err != nil {
			t.Fatal(err)
		}
		gotOld, _, err := decodeJob(old)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{rec, body, old} {
			for i := range b {
				b[i] = 0xee
			}
		}
		if !reflect.DeepEqual(got, mk()) || !reflect.DeepEqual(gotOld, mk()) {
			t.Fatal("the decoded job changed with the buffer it was decoded from")
		}
	}
}

// longBodyJob is fullJob with a body too long for the record, which goes
// under b/.
func longBodyJob() *domain.Job {
	j := fullJob()
	j.Body = bytes.Repeat([]byte{1, 2, 3, 0xff}, 100)
	return j
}

func TestCodecRejectsWhatItCannotEncode(t *testing.T) {
	j := fullJob()
	j.Status = "weird"
	if _, err := encodeJob(nil, j, refOf(j.Body)); err == nil {
		t.Fatal("unknown status encoded")
	}
	j = fullJob()
	j.Delivery.Status = "weird"
	if _, err := encodeJob(nil, j, refOf(j.Body)); err == nil {
		t.Fatal("unknown delivery status encoded")
	}
	j = fullJob()
	j.Priority = 2
	if _, err := encodeJob(nil, j, refOf(j.Body)); err == nil {
		t.Fatal("unknown priority encoded")
	}
}

// TestCodecRejectsCorruptRecords: every truncation and many random byte
// changes of a record either decode or fail cleanly, never panic; an unknown
// version fails.
func TestCodecRejectsCorruptRecords(t *testing.T) {
	short, long := encodeNew(t, fullJob()), encodeNew(t, longBodyJob())
	for _, rec := range [][]byte{short, long, inlineForm(long, longBodyJob(), recordVersionV3)} {
		for n := range len(rec) {
			if _, _, err := decodeJob(rec[:n]); err == nil {
				t.Fatalf("a record of version %d truncated to %d of %d bytes decoded", rec[0], n, len(rec))
			}
		}
		bad := append([]byte(nil), rec...)
		bad[0] = recordVersion + 1
		if _, _, err := decodeJob(bad); err == nil {
			t.Fatal("a record of an unknown version decoded")
		}
		r := rand.New(rand.NewPCG(1, 2))
		for range 20000 {
			bad := append([]byte(nil), rec...)
			for range 1 + r.IntN(3) {
				bad[r.IntN(len(bad))] = byte(r.IntN(256))
			}
			_, _, _ = decodeJob(bad) // must not panic
		}
	}
}

func TestKeys(t *testing.T) {
	if bytes.Equal(idemKey(nil, "a:b", "c"), idemKey(nil, "a", "b:c")) {
		t.Fatal(`("a:b","c") and ("a","b:c") share a key`)
	}
	if bytes.Equal(idemKey(nil, "a\x01", ""), idemKey(nil, "a", "\x01")) {
		t.Fatal("user/key boundary is ambiguous")
	}
	for _, lane := range []domain.QueueKey{"", "a", "a\x00b", "h.test:80|t", domain.QueueKey(bytes.Repeat([]byte{0xff}, 300))} {
		for _, seq := range []int64{0, 1, 1 << 40, 1<<63 - 1} {
			for _, p := range domain.Priorities {
				l, pc, s, ok := parseReadyKey(readyKey(nil, lane, p, seq))
				if !ok || string(l) != string(lane) || pc != priorityCode(p) || s != seq {
					t.Fatalf("parseReadyKey(readyKey(%q, %s, %d)) = %q, %d, %d, %v", lane, p, seq, l, pc, s, ok)
				}
			}
		}
	}
	// A lane's keys never fall inside another lane's range, nor one
	// priority's inside another's; a lane's ranges sort high first.
	lanes := []domain.QueueKey{"a", "a\x00", "a\x00b", "ab", "b"}
	for _, x := range lanes {
		lo, hi := lanePrefix(nil, x), prefixEnd(lanePrefix(nil, x))
		for _, y := range lanes {
			for _, p := range domain.Priorities {
				k := readyKey(nil, y, p, 7)
				if in := bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0; in != (x == y) {
					t.Fatalf("key of lane %q in range of lane %q: %v", y, x, in)
				}
				for _, q := range domain.Priorities {
					plo := priorityPrefix(nil, x, q)
					if in := bytes.Compare(k, plo) >= 0 && bytes.Compare(k, prefixEnd(plo)) < 0; in != (x == y && p == q) {
						t.Fatalf("key of lane %q, %s in range of lane %q, %s: %v", y, p, x, q, in)
					}
				}
			}
		}
		if !(bytes.Compare(readyKey(nil, x, domain.PriorityHigh, 9), readyKey(nil, x, domain.PriorityNormal, 1)) < 0 &&
			bytes.Compare(readyKey(nil, x, domain.PriorityNormal, 9), readyKey(nil, x, domain.PriorityLow, 1)) < 0) {
			t.Fatalf("lane %q: priority ranges out of order", x)
		}
	}
	// s/ and d/ keys sort by time, negative first, then by seq.
	for _, mk := range []func([]byte, int64, int64) []byte{schedKey, dueKey} {
		order := [][2]int64{{-5000, 9}, {-1, 1}, {0, 3}, {1000, 2}, {1000, 7}, {1 << 50, 1}}
		for i, ts := range order {
			k := mk(nil, ts[0], ts[1])
			if ms, seq, ok := parseTimeSeqKey(k); !ok || ms != ts[0] || seq != ts[1] {
				t.Fatalf("parseTimeSeqKey(%v) = %d, %d, %v", ts, ms, seq, ok)
			}
			if i > 0 && bytes.Compare(mk(nil, order[i-1][0], order[i-1][1]), k) >= 0 {
				t.Fatalf("key of %v does not sort after %v", ts, order[i-1])
			}
		}
	}
	// Expiry keys sort by time, negative times first.
	times := []int64{-5000, -1, 1, 1000, 1 << 50}
	var keys [][]byte
	for i := len(times) - 1; i >= 0; i-- {
		keys = append(keys, expiryKey(nil, times[i], "id"))
	}
	sort.Slice(keys, func(a, b int) bool { return bytes.Compare(keys[a], keys[b]) < 0 })
	for i, k := range keys {
		ms, id, ok := parseExpiryKey(k)
		if !ok || ms != times[i] || id != "id" {
			t.Fatalf("expiry key %d = %d %q %v, want %d", i, ms, id, ok, times[i])
		}
	}
	// x/ and i/ keys sort newest first and give back their seq.
	seqs := []int64{1, 2, 255, 256, 1 << 40, 1<<63 - 1}
	for i := 1; i < len(seqs); i++ {
		newer, older := statusKey(nil, stFailed, seqs[i]), statusKey(nil, stFailed, seqs[i-1])
		if bytes.Compare(newer, older) >= 0 {
			t.Fatalf("x/ key of seq %d does not sort before seq %d", seqs[i], seqs[i-1])
		}
		if got, ok := seqOfDesc(indexKey(nil, dimUser, "u", seqs[i])); !ok || got != seqs[i] {
			t.Fatalf("seqOfDesc(indexKey(%d)) = %d, %v", seqs[i], got, ok)
		}
	}
	// One dimension value's i/ range holds no other value's keys, nor
	// another dimension's; c/ keys of two values never collide.
	values := []string{"a", "a\x00", "ab", "a\x1fb", ""}
	for _, x := range values {
		lo := indexPrefix(nil, dimUser, x)
		hi := prefixEnd(lo)
		for _, y := range values {
			for _, dim := range []byte{dimUser, dimDest, dimTenant} {
				k := indexKey(nil, dim, y, 7)
				if in := bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0; in != (x == y && dim == dimUser) {
					t.Fatalf("i/ key of %c %q in the range of user %q: %v", dim, y, x, in)
				}
				if x != y && bytes.Equal(countKey(nil, dim, x, stQueued), countKey(nil, dim, y, stQueued)) {
					t.Fatalf("c/ keys of %q and %q collide", x, y)
				}
			}
		}
	}
	if got := prefixEnd([]byte{'a', 0xff, 0xff}); !bytes.Equal(got, []byte{'b'}) {
		t.Fatalf("prefixEnd = %q", got)
	}
	if got := prefixEnd([]byte{0xff}); got != nil {
		t.Fatalf("prefixEnd(ff) = %q, want nil", got)
	}
}

// TestOneGroupSeesItsOwnWrites applies ops as one group: the second insert of
// a key finds the first, and a MarkInFlight followed by a Finish of the same
// job is skipped.
func TestOneGroupSeesItsOwnWrites(t *testing.T) {
	s := openTemp(t)
	now := time.Now()
	mk := func() *domain.Job {
		return domain.NewJob(domain.NewIDGenerator(nil).New(), &domain.JobRequest{UserID: "u", IdempotentKey: "k",
			URL: "http://a.test/x", Method: "GET"}, "a.test:80", now)
	}
	a, b := mk(), mk()
	ops := []*storekit.Op{
		{Kind: storekit.OpInsert, Job: a},
		{Kind: storekit.OpInsert, Job: b},
		{Kind: storekit.OpMarkInFlight, ID: a.ID, At: now},
		{Kind: storekit.OpFinish, ID: a.ID, Finish: &ports.FinishParams{ID: a.ID, Status: domain.StatusCompleted, Attempts: 1, Now: now}},
	}
	results := make([]storekit.Result, len(ops))
	// The writer is idle: nothing was submitted, so this goroutine may act
	// as the writer.
	if _, err := s.apply(ops, results); err != nil {
		t.Fatal(err)
	}
	if !results[0].Fresh || results[1].Fresh || results[1].Job.ID != a.ID {
		t.Fatalf("inserts in one group: first fresh=%v, second fresh=%v id %s (want %s)",
			results[0].Fresh, results[1].Fresh, results[1].Job.ID, a.ID)
	}
	got, err := s.Get(t.Context(), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.StatusCompleted || !got.DispatchedAt.IsZero() {
		t.Fatalf("job = %s dispatched %v; want completed and the superseded mark skipped", got.Status, got.DispatchedAt)
	}
	if c, _ := s.Counts(t.Context()); c.Total() != 0 {
		t.Fatalf("counts %+v", c)
	}
}

func FuzzDecodeJob(f *testing.F) {
	for _, j := range []*domain.Job{fullJob(), longBodyJob(), {ID: "x", Status: domain.StatusQueued}} {
		rec := encodeNew(f, j)
		f.Add(rec)
		f.Add(inlineForm(rec, j, recordVersionV3))
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		j, ref, err := decodeJob(rec)
		if err != nil {
			return
		}
		// Whatever decodes encodes back (as a rewrite does: version 4, a
		// long body apart) to a record that decodes the same.
		if ref.n > maxInlineBody {
			j.Body, ref.inline = nil, false // under b/ now, or already
		}
		again, err := encodeJob(nil, j, ref)
		if err != nil {
			t.Fatalf("decoded job does not encode: %v", err)
		}
		j2, ref2, err := decodeJob(again)
		if err != nil || !reflect.DeepEqual(j, j2) || ref2 != ref {
			t.Fatalf("re-encoded record decodes to %+v (%+v), %v; want %+v (%+v)", j2, ref2, err, j, ref)
		}
	})
}

// TestCorruptRecordFailsItsOpsOnly: a record that cannot be read makes the
// ops on that job fail as unavailable (not "not found"), and nothing else.
func TestCorruptRecordFailsItsOpsOnly(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	ids := domain.NewIDGenerator(nil)
	mk := func(key string) *domain.Job {
		return domain.NewJob(ids.New(), &domain.JobRequest{UserID: "u", IdempotentKey: key, URL: "http://a.test/x", Method: "GET"},
			"a.test:80", time.Now())
	}
	bad, _, err := s.Insert(ctx, mk("bad"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(jobKey(nil, bad.ID), []byte{recordVersion, 0xff}, nil); err != nil {
		t.Fatal(err)
	}
	unavailable := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, domain.ErrNotFound) || domain.CodeOf(err) != domain.CodeUnavailable {
			t.Fatalf("%s of a corrupt record = %v, want an unavailable error", what, err)
		}
	}
	_, err = s.Get(ctx, bad.ID)
	unavailable("Get", err)
	_, err = s.Lookup(ctx, "u", "bad")
	unavailable("Lookup", err)
	_, err = s.Finish(ctx, &ports.FinishParams{ID: bad.ID, Status: domain.StatusCompleted, Now: time.Now()})
	unavailable("Finish", err)
	_, _, err = s.Insert(ctx, mk("bad"))
	unavailable("Insert of its key", err)
	if _, fresh, err := s.Insert(ctx, mk("good")); err != nil || !fresh {
		t.Fatalf("Insert of another job: fresh=%v err=%v", fresh, err)
	}
}

// TestFailedCommitStopsWritesUntilReopened: once a commit failed, later
// writes fail as unavailable (Pebble cannot take more) while reads go on,
// until the writer has reopened the database, at most every reopenEvery.
func TestFailedCommitStopsWritesUntilReopened(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	j := domain.NewJob(domain.NewIDGenerator(nil).New(), &domain.JobRequest{UserID: "u", IdempotentKey: "k",
		URL: "http://a.test/x", Method: "GET"}, "a.test:80", time.Now())
	if _, _, err := s.Insert(ctx, j); err != nil {
		t.Fatal(err)
	}
	s.fail(errors.New("injected WAL failure"))
	s.lastReopen = time.Now() // the writer is idle; the submit below orders this before its read
	_, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Now: time.Now()})
	if domain.CodeOf(err) != domain.CodeUnavailable || !strings.Contains(err.Error(), "injected WAL failure") {
		t.Fatalf("Finish after a failed commit = %v, want unavailable", err)
	}
	if got, err := s.Get(ctx, j.ID); err != nil || got.Status != domain.StatusQueued {
		t.Fatalf("Get after a failed commit = %+v, %v", got, err)
	}
	time.Sleep(reopenEvery)
	if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Now: time.Now()}); err != nil {
		t.Fatalf("Finish once the store could reopen = %v", err)
	}
	if got, err := s.Get(ctx, j.ID); err != nil || got.Status != domain.StatusCompleted {
		t.Fatalf("Get after the reopen = %+v, %v", got, err)
	}
}
