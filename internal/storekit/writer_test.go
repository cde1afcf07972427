package storekit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/groupcommit"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// fakeEngine is a commit function that records the groups it is given and
// answers every op with N = its Kind, or fails the whole group with fail.
type fakeEngine struct {
	mu     sync.Mutex
	groups [][]Op
	fail   error
	w      *Writer
	hold   chan struct{} // if set, each commit signals entered and waits for it
	entry  chan struct{}
}

func (e *fakeEngine) commit(group []*Op) {
	if e.hold != nil {
		e.entry <- struct{}{}
		<-e.hold
	}
	e.mu.Lock()
	g := make([]Op, len(group))
	for i, o := range group {
		g[i] = *o
	}
	e.groups = append(e.groups, g)
	fail := e.fail
	e.mu.Unlock()
	results := make([]Result, len(group))
	for i, o := range group {
		results[i] = Result{N: int64(o.Kind)}
	}
	e.w.Health.Record(fail, time.Now())
	if fail == nil {
		e.w.Committed(len(group))
	}
	Answer(group, results, fail)
}

func (e *fakeEngine) ops() []Op {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Op
	for _, g := range e.groups {
		out = append(out, g...)
	}
	return out
}

func start(t *testing.T, c Config, e *fakeEngine) *Writer {
	t.Helper()
	// The writer goroutine may call commit only once an op is sent, after
	// e.w is set below.
	e.w = Start(c, e.commit)
	t.Cleanup(e.w.Close)
	return e.w
}

func TestStartAppliesTheGroupDefaults(t *testing.T) {
	for _, tc := range []struct {
		in   Config
		want groupcommit.Options
	}{
		{Config{}, groupcommit.Options{MaxBatch: 1024, GatherYields: 2}},
		{Config{MaxBatch: 8, GatherYields: -1}, groupcommit.Options{MaxBatch: 8, GatherYields: 0}},
		{Config{MaxBatch: -3, GatherYields: 5}, groupcommit.Options{MaxBatch: 1024, GatherYields: 5}},
	} {
		w := start(t, tc.in, &fakeEngine{})
		if w.opts != tc.want || cap(w.ops) != 4*tc.want.MaxBatch {
			t.Errorf("Start(%+v): options %+v, queue of %d; want %+v, queue of %d", tc.in, w.opts, cap(w.ops),
				tc.want, 4*tc.want.MaxBatch)
		}
	}
}

// Every submitted op is committed once and its caller gets its own result.
func TestSubmitWaitsForItsOwnResult(t *testing.T) {
	e := &fakeEngine{}
	w := start(t, Config{MaxBatch: 16}, e)
	var wg sync.WaitGroup
	const callers = 64
	errs := make(chan error, callers)
	for i := range callers {
		k := Kind(i % int(OpProbe+1))
		wg.Go(func() {
			if r := w.Submit(t.Context(), &Op{Kind: k}); r.Err != nil || r.N != int64(k) {
				errs <- errors.New("wrong result")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	commits, ops := w.Stats()
	if ops != callers || commits < 1 || commits > callers || len(e.ops()) != callers {
		t.Fatalf("stats %d commits, %d ops; %d ops committed; want %d ops", commits, ops, len(e.ops()), callers)
	}
}

func TestAFailedGroupFailsEveryWaitingCaller(t *testing.T) {
	full := errors.New("no space left on device")
	e := &fakeEngine{fail: full}
	w := start(t, Config{}, e)
	if r := w.Submit(t.Context(), &Op{Kind: OpDelete}); !errors.Is(r.Err, full) {
		t.Fatalf("Submit = %+v, want the group's error", r)
	}
	if _, ops := w.Stats(); ops != 0 {
		t.Fatalf("a failed group was counted: %d ops", ops)
	}
	var fe *groupcommit.FailingError
	if err := w.Health.Err(); !errors.As(err, &fe) {
		t.Fatalf("Health.Err = %v", err)
	}
}

func TestAnswerTellsWaitersOnly(t *testing.T) {
	a, b, c := &Op{}, &Op{}, &Op{}
	a.Await()
	c.Await()
	Answer([]*Op{a, b, c}, []Result{{N: 1}, {N: 2}, {N: 3}}, nil) // b waits for nothing: no panic, no block
	if a.Result().N != 1 || c.Result().N != 3 {
		t.Fatal("results went to the wrong callers")
	}
	boom := errors.New("boom")
	a.Await()
	Answer([]*Op{a}, []Result{{N: 1}}, boom)
	if r := a.Result(); !errors.Is(r.Err, boom) || r.N != 0 {
		t.Fatalf("after a failed group: %+v", r)
	}
}

func TestSupersededMarks(t *testing.T) {
	mark := func(id domain.JobID) *Op { return &Op{Kind: OpMarkInFlight, ID: id} }
	finish := func(id domain.JobID) *Op { return &Op{Kind: OpFinish, ID: id} }
	group := []*Op{
		finish("d"),                // 0
		mark("a"),                  // 1: finished later: superseded
		mark("b"),                  // 2: not finished in this group
		{Kind: OpRequeue, ID: "c"}, // 3
		mark("c"),                  // 4: finished later: superseded
		finish("a"),                // 5
		finish("c"),                // 6
		mark("d"),                  // 7: finished before, not after: kept
		finish("b2"),               // 8
	}
	got := Superseded(group)
	if len(got) != 2 || !got[1] || !got[4] {
		t.Fatalf("Superseded = %v, want ops 1 and 4", got)
	}
	if Superseded([]*Op{mark("x"), {Kind: OpFinishDelivery, ID: "x"}}) != nil {
		t.Fatal("a delivery's finish does not supersede a mark")
	}
}

// Send does not wait for the commit; Submit does, and once the writer took
// the op, a caller whose context ends is still told the commit's outcome.
func TestSendDoesNotWaitAndSubmitOutlivesItsContext(t *testing.T) {
	e := &fakeEngine{hold: make(chan struct{}), entry: make(chan struct{})}
	w := start(t, Config{MaxBatch: 1}, e)
	if err := w.Send(t.Context(), &Op{Kind: OpMarkInFlight, ID: "a"}); err != nil {
		t.Fatal(err)
	}
	<-e.entry // the commit holding the mark is running, not finished
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan Result, 1)
	go func() { res <- w.Submit(ctx, &Op{Kind: OpFinish, ID: "a"}) }()
	e.hold <- struct{}{} // the mark's commit ends
	<-e.entry            // the writer took the Finish
	cancel()
	e.hold <- struct{}{}
	if r := <-res; r.Err != nil || r.N != int64(OpFinish) {
		t.Fatalf("Submit after its context ended = %+v, want the commit's result", r)
	}
}

// A caller whose context ends before the writer takes its op gets the
// context's error, through Config.CtxErr.
func TestContextEndsBeforeTheWriterTakesTheOp(t *testing.T) {
	e := &fakeEngine{hold: make(chan struct{}), entry: make(chan struct{})}
	w := start(t, Config{MaxBatch: 1, CtxErr: func(err error) error { return domain.Unavailable("submit", err) }}, e)
	if err := w.Send(t.Context(), &Op{}); err != nil {
		t.Fatal(err)
	}
	<-e.entry
	for range cap(w.ops) { // fill the queue while the writer is busy
		if err := w.Send(t.Context(), &Op{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := w.Submit(ctx, &Op{Kind: OpDelete})
	if !errors.Is(r.Err, context.Canceled) || domain.CodeOf(r.Err) != domain.CodeUnavailable {
		t.Fatalf("Submit with an ended context = %v, want it through CtxErr", r.Err)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range e.entry {
		}
	}()
	close(e.hold)
	w.Close() // commits the queued ops
	close(e.entry)
	<-drained
}

func TestCloseCommitsWhatWasSentThenRefuses(t *testing.T) {
	e := &fakeEngine{}
	w := Start(Config{}, e.commit)
	e.w = w
	for range 10 {
		if err := w.Send(t.Context(), &Op{Kind: OpMarkInFlight}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	w.Close() // twice is fine
	if n := len(e.ops()); n != 10 {
		t.Fatalf("%d of 10 ops sent before Close were committed", n)
	}
	if !w.Closed() {
		t.Fatal("not Closed after Close")
	}
	select {
	case <-w.Closing():
	default:
		t.Fatal("Closing is open after Close")
	}
	if err := w.Send(t.Context(), &Op{}); !errors.Is(err, domain.ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	if r := w.Submit(t.Context(), &Op{}); !errors.Is(r.Err, domain.ErrClosed) {
		t.Fatalf("Submit after Close = %v", r.Err)
	}
	if err := w.Enter(); !errors.Is(err, domain.ErrClosed) {
		t.Fatalf("Enter after Close = %v", err)
	}
}

// Close waits for a use admitted by Enter to Exit.
func TestCloseWaitsForExit(t *testing.T) {
	w := Start(Config{}, (&fakeEngine{}).commit)
	if err := w.Enter(); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		w.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a use was admitted")
	case <-time.After(20 * time.Millisecond):
	}
	w.Exit()
	<-closed
}

func TestCheckWritesProbesOnlyWhenIdle(t *testing.T) {
	full := errors.New("no space left on device")
	e := &fakeEngine{fail: full}
	w := start(t, Config{}, e)
	var fe *groupcommit.FailingError
	if err := w.CheckWrites(t.Context(), time.Hour); !errors.As(err, &fe) || !errors.Is(err, full) {
		t.Fatalf("CheckWrites of a writer that never tried = %v, want the probe's failure", err)
	}
	if ops := e.ops(); len(ops) != 1 || ops[0].Kind != OpProbe || ops[0].At.IsZero() {
		t.Fatalf("committed %+v, want one probe with its time", ops)
	}
	e.mu.Lock()
	e.fail = nil
	e.mu.Unlock()
	if err := w.CheckWrites(t.Context(), time.Hour); err == nil {
		t.Fatal("a probe ran though a commit was tried a moment ago")
	}
	if err := w.CheckWrites(t.Context(), 0); err != nil {
		t.Fatalf("after a successful probe: %v", err)
	}
	if n := len(e.ops()); n != 2 {
		t.Fatalf("%d probes, want 2", n)
	}
	w.Close()
	if err := w.CheckWrites(t.Context(), 0); !errors.Is(err, domain.ErrClosed) {
		t.Fatalf("CheckWrites after Close = %v", err)
	}
}

func TestSweepsSubmitOnlyWhatWasFound(t *testing.T) {
	e := &fakeEngine{}
	w := start(t, Config{}, e)
	if n, err := w.Sweep(t.Context(), &Op{Kind: OpPurge}); n != 0 || err != nil || len(e.ops()) != 0 {
		t.Fatalf("a sweep of nothing: %d, %v, %d ops committed", n, err, len(e.ops()))
	}
	for _, f := range []Found{{IDs: []domain.JobID{"a"}}, {Seqs: []int64{1}}, {Keys: [][]byte{{1}}}, {Jobs: []*domain.Job{{}}}} {
		if n, err := w.Sweep(t.Context(), &Op{Kind: OpPurge, Found: f}); n != int(OpPurge) || err != nil {
			t.Fatalf("Sweep(%+v) = %d, %v", f, n, err)
		}
	}
	p := &ports.ResetStaleParams{Exclude: map[domain.JobID]bool{"a": true}, Now: time.Now()}
	if jobs, err := w.ResetStale(t.Context(), []*domain.Job{{ID: "a"}}, p); jobs != nil || err != nil || len(e.ops()) != 4 {
		t.Fatalf("ResetStale of excluded jobs only: %v, %v, %d ops committed", jobs, err, len(e.ops()))
	}
	if _, err := w.ResetStale(t.Context(), []*domain.Job{{ID: "a"}, {ID: "b"}}, p); err != nil {
		t.Fatal(err)
	}
	ops := e.ops()
	if o := ops[len(ops)-1]; o.Kind != OpResetStale || len(o.Jobs) != 1 || o.Jobs[0].ID != "b" || o.Stale != p || !o.At.Equal(p.Now) {
		t.Fatalf("ResetStale submitted %+v, want job b alone with its params", o)
	}
}

func TestJobWritesBuildTheirOps(t *testing.T) {
	e := &fakeEngine{}
	j := start(t, Config{}, e).JobWrites()
	ctx, now := t.Context(), time.Now()
	if _, _, err := j.Insert(ctx, nil); err == nil {
		t.Fatal("Insert of a nil job succeeded")
	}
	job := &domain.Job{ID: "a"}
	rq := &ports.RequeueParams{ID: "a", Seq: 3, Now: now}
	fin := &ports.FinishParams{ID: "a", Seq: 3, Now: now}
	del := &ports.FinishDeliveryParams{ID: "a", Seq: 3, Now: now}
	if _, _, err := j.Insert(ctx, job); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Delete(ctx, "a"))
	must(j.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: "a", Seq: 3, At: now}))
	must(j.Requeue(ctx, rq))
	n, err := j.Finish(ctx, fin)
	must(err)
	if n != int64(OpFinish) {
		t.Fatalf("Finish = %d, want the result's N", n)
	}
	must(j.FinishDelivery(ctx, del))
	if n, err := j.RecoverInFlight(ctx); err != nil || n != int(OpRecover) {
		t.Fatalf("RecoverInFlight = %d, %v", n, err)
	}
	want := []Op{
		{Kind: OpInsert, Job: job},
		{Kind: OpDelete, ID: "a"},
		{Kind: OpMarkInFlight, ID: "a", Seq: 3, At: now},
		{Kind: OpRequeue, ID: "a", Seq: 3, At: now, Requeue: rq},
		{Kind: OpFinish, ID: "a", Seq: 3, At: now, Finish: fin},
		{Kind: OpFinishDelivery, ID: "a", Seq: 3, At: now, Delivery: del},
		{Kind: OpRecover},
	}
	got := e.ops() // the mark was sent before the Requeue was submitted, so it is committed first
	if len(got) != len(want) {
		t.Fatalf("%d ops committed, want %d", len(got), len(want))
	}
	for i := range want {
		g := got[i]
		g.done = nil
		if want[i].Kind == OpRecover {
			if g.Kind != OpRecover || g.At.IsZero() {
				t.Errorf("op %d = %+v, want a Recover with its time", i, g)
			}
			continue
		}
		if g.Kind != want[i].Kind || g.Job != want[i].Job || g.ID != want[i].ID || g.Seq != want[i].Seq ||
			!g.At.Equal(want[i].At) || g.Requeue != want[i].Requeue || g.Finish != want[i].Finish || g.Delivery != want[i].Delivery {
			t.Errorf("op %d = %+v, want %+v", i, g, want[i])
		}
	}
}

// TestEncodeRunsBeforeTheOpIsSent checks that Config.Encode runs on the
// caller's goroutine, before the op reaches the commit (which sees what it
// encoded), and that an op it fails is never sent.
func TestEncodeRunsBeforeTheOpIsSent(t *testing.T) {
	bad := errors.New("cannot encode")
	caller := make(chan string, 2)
	e := &fakeEngine{}
	w := start(t, Config{Encode: func(o *Op) error {
		caller <- o.ID.String()
		if o.ID == "bad" {
			return bad
		}
		o.Encoded = "encoded " + o.ID.String()
		return nil
	}}, e)
	if r := w.Submit(t.Context(), &Op{Kind: OpDelete, ID: "good"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := w.Submit(t.Context(), &Op{Kind: OpDelete, ID: "bad"}); !errors.Is(r.Err, bad) {
		t.Fatalf("op whose encoding fails: %v, want %v", r.Err, bad)
	}
	if got := []string{<-caller, <-caller}; got[0] != "good" || got[1] != "bad" {
		t.Fatalf("encoded %v, want good then bad", got)
	}
	ops := e.ops()
	if len(ops) != 1 || ops[0].ID != "good" || ops[0].Encoded != "encoded good" {
		t.Fatalf("committed %+v, want the good op with its encoding", ops)
	}
}

// TestSubmitAllocatesOnlyItsWait holds the cost of waiting for an op to
// one allocation (the channel Answer closes): three ops of every e2e job
// wait, so each allocation here is three per job. The engine answers
// from a results slice it keeps, so every allocation counted is the
// writer's or Submit's.
func TestSubmitAllocatesOnlyItsWait(t *testing.T) {
	results := make([]Result, 1024)
	var w *Writer
	w = Start(Config{}, func(group []*Op) {
		w.Committed(len(group))
		Answer(group, results[:len(group)], nil)
	})
	t.Cleanup(w.Close)
	ops := make([]Op, 1001) // AllocsPerRun runs the function once more to warm up
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		o := &ops[i]
		i++
		if r := w.Submit(context.Background(), o); r.Err != nil {
			t.Fatal(r.Err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Submit made %.1f allocations per op, want at most 1", allocs)
	}
}
