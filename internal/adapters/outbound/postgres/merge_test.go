package postgres

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// The states a lifecycle write may find its job in.
const (
	stQueued        = iota
	stInFlight      // marked in flight
	stCompleted     // finished, no webhook
	stPending       // completed, its delivery due
	stFailedPending // failed, its delivery due
	stDelivered     // completed and delivered
	stMissing       // never inserted
	states
)

// opsPerState is how many jobs of each state mergeFixture makes: one for
// each op lifecycleOps makes.
const opsPerState = 8

// mergeFixture inserts opsPerState jobs in each state into every store of
// stores, alike (the same ids, one op per commit in the same order), and
// returns their ids by state.
func mergeFixture(t *testing.T, now time.Time, stores ...*Store) [states][]domain.JobID {
	t.Helper()
	var ids [states][]domain.JobID
	for st := range states {
		for n := range opsPerState {
			j := storetest.NewJob("u", fmt.Sprintf("%d-%d", st, n), "up.test:80")
			ids[st] = append(ids[st], j.ID)
			if st == stMissing {
				continue
			}
			for _, s := range stores {
				if _, _, err := s.Insert(t.Context(), j); err != nil {
					t.Fatal(err)
				}
				var setup []*storekit.Op
				switch st {
				case stInFlight:
					setup = []*storekit.Op{{Kind: storekit.OpMarkInFlight, ID: j.ID, At: now}}
				case stCompleted:
					setup = []*storekit.Op{finishOp(j.ID, domain.StatusCompleted, "", now)}
				case stPending:
					setup = []*storekit.Op{finishOp(j.ID, domain.StatusCompleted, "hooks.test:80", now)}
				case stFailedPending:
					setup = []*storekit.Op{finishOp(j.ID, domain.StatusFailed, "hooks.test:80", now)}
				case stDelivered:
					setup = []*storekit.Op{finishOp(j.ID, domain.StatusCompleted, "hooks.test:80", now), deliveryOp(j.ID, true, now)}
				}
				for _, o := range setup {
					if r := runGroup(s, []*storekit.Op{o}); r[0].Err != nil {
						t.Fatalf("setting up state %d: %v", st, r[0].Err)
					}
				}
			}
		}
	}
	return ids
}

func finishOp(id domain.JobID, status domain.Status, deliverIn domain.QueueKey, now time.Time) *storekit.Op {
	return &storekit.Op{Kind: storekit.OpFinish, ID: id, At: now, Finish: &ports.FinishParams{ID: id, Status: status, Attempts: 2,
		Result: &domain.Result{ResponseStatus: 200, Body: []byte(`{"ok":true}`), ContentType: "application/json"}, Now: now,
		DeliverIn: deliverIn, History: []domain.Attempt{{At: now, Duration: time.Millisecond, Status: 200}}}}
}

func deliveryOp(id domain.JobID, delivered bool, now time.Time) *storekit.Op {
	return &storekit.Op{Kind: storekit.OpFinishDelivery, ID: id, At: now, Delivery: &ports.FinishDeliveryParams{ID: id,
		Delivered: delivered, Attempts: 3, Response: 204, Reason: "done", Now: now, Retention: time.Hour}}
}

func requeueOp(id domain.JobID, phase domain.Phase, now time.Time) *storekit.Op {
	p := &ports.RequeueParams{ID: id, Phase: phase, Attempts: 1, Deferrals: 1, Now: now}
	if phase == domain.PhaseDispatch {
		p.History = []domain.Attempt{{At: now, Status: 503, Signal: "retry_after"}}
	} else {
		p.Reason, p.Response = "busy", 503
	}
	return &storekit.Op{Kind: storekit.OpRequeue, ID: id, At: now, Requeue: p}
}

// lifecycleOps makes opsPerState ops of every mergeable kind (and a
// requeue in no phase, which needs no statement), each on a job of its own:
// the nth op of each state's list goes to the nth of its jobs.
func lifecycleOps(ids [states][]domain.JobID, now time.Time) []*storekit.Op {
	var ops []*storekit.Op
	for st := range states {
		j := ids[st]
		ops = append(ops,
			&storekit.Op{Kind: storekit.OpMarkInFlight, ID: j[0], At: now},
			requeueOp(j[1], domain.PhaseDispatch, now),
			requeueOp(j[2], domain.PhaseDeliver, now),
			finishOp(j[3], domain.StatusCompleted, "hooks.test:80", now),
			finishOp(j[4], domain.StatusFailed, "", now),
			deliveryOp(j[5], true, now),
			deliveryOp(j[6], false, now),
			requeueOp(j[7], domain.PhaseNone, now),
		)
	}
	return ops
}

// outcome is what a caller can tell of a result: its error, and whether a
// delivery became due.
func outcome(r storekit.Result) string {
	switch {
	case errors.Is(r.Err, domain.ErrNotFound):
		return "not found"
	case r.Err != nil:
		return "error: " + r.Err.Error()
	case r.N > 0:
		return "delivery due"
	}
	return "ok"
}

// stored is job id as s holds it, with its ReadySeq reduced to whether it
// has one (stores draw them in their own order), or nil if s has none.
func stored(t *testing.T, s *Store, id domain.JobID) *domain.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	if errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	j.ReadySeq = min(j.ReadySeq, 1)
	return j
}

// writes counts the statements of b that write jobs, or returns -1 unless
// the merged ones among them, and only those, are planned by id
// (sqlPlanByID before them, sqlPlanAsUsual after).
func writes(b *pgx.Batch) int {
	n, byID := 0, false
	for _, q := range b.QueuedQueries {
		switch q.SQL {
		case sqlPlanByID:
			byID = true
		case sqlPlanAsUsual:
			byID = false
		case sqlMarks, sqlRequeuesDispatch, sqlRequeuesDeliver, sqlFinishes, sqlDeliveries:
			if !byID {
				return -1
			}
			n++
		default:
			if byID {
				return -1 // only merged statements are planned by id
			}
			n++
		}
	}
	if byID {
		return -1
	}
	return n
}

// TestMergedGroupAnswersAsOneByOne: a group of many marks, requeues,
// finishes and deliveries, on jobs in every state (missing, terminal,
// delivery done), merged into one statement per kind, tells each caller
// what the op's own statement tells it and leaves every job as those
// statements do.
func TestMergedGroupAnswersAsOneByOne(t *testing.T) {
	t.Parallel()
	merged, single := openStore(t, newSchema(t), "a:1", nil), openStore(t, newSchema(t), "a:1", nil)
	now := time.Now().Truncate(time.Millisecond)
	ids := mergeFixture(t, now, merged, single)

	ops := lifecycleOps(ids, now.Add(time.Second))
	b := &pgx.Batch{}
	merged.queueJobOps(b, ops, make([]storekit.Result, len(ops)))
	if n := writes(b); n != int(mergeKinds) {
		t.Fatalf("the group is %d statements, want one per merged kind (%d)", n, mergeKinds)
	}
	got := runGroup(merged, ops)
	for i, o := range lifecycleOps(ids, now.Add(time.Second)) {
		want := runGroup(single, []*storekit.Op{o})[0]
		if outcome(got[i]) != outcome(want) {
			t.Errorf("op %d (kind %d, state %d): merged %q, alone %q", i, o.Kind, i/opsPerState, outcome(got[i]), outcome(want))
		}
		if got[i].N > 0 {
			if j, err := merged.Get(t.Context(), o.ID); err != nil || j.ReadySeq != got[i].N {
				t.Errorf("op %d: ready_seq %d returned, job holds %+v (%v)", i, got[i].N, j, err)
			}
		}
	}
	for st, list := range ids {
		for n, id := range list {
			if a, b := stored(t, merged, id), stored(t, single, id); !reflect.DeepEqual(a, b) {
				t.Errorf("job %d of state %d: merged %+v, alone %+v", n, st, a, b)
			}
		}
	}
}

// TestGroupKeepsOrderOnOneJob: ops of one group on the same job take
// effect in group order, as before merging, while the ops around them are
// merged.
func TestGroupKeepsOrderOnOneJob(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	now := time.Now().Truncate(time.Millisecond)
	ids := mergeFixture(t, now, s)
	q, fl := ids[stQueued], ids[stInFlight]
	later := now.Add(time.Second)
	ops := []*storekit.Op{
		requeueOp(fl[0], domain.PhaseDispatch, later), // then finished: completed
		finishOp(q[0], domain.StatusCompleted, "hooks.test:80", later),
		finishOp(fl[0], domain.StatusCompleted, "", later),
		deliveryOp(q[0], true, later),       // after its finish: delivered
		{Kind: storekit.OpDelete, ID: q[1]}, // then finished: not found
		finishOp(q[1], domain.StatusFailed, "", later),
		finishOp(q[2], domain.StatusFailed, "", later), // then deleted
		{Kind: storekit.OpDelete, ID: q[2]},
		{Kind: storekit.OpMarkInFlight, ID: q[3], At: later}, // then requeued: queued
		requeueOp(q[3], domain.PhaseDispatch, later),
		finishOp(fl[3], domain.StatusCompleted, "", later), // then requeued: not found
		requeueOp(fl[3], domain.PhaseDispatch, later),
		deliveryOp(fl[4], true, later), // before its finish: not found
		finishOp(fl[4], domain.StatusCompleted, "hooks.test:80", later),
		requeueOp(fl[5], domain.PhaseDispatch, later), // then marked: in flight
		{Kind: storekit.OpMarkInFlight, ID: fl[5], At: later},
		// Ops on jobs named once, merged around the others.
		finishOp(q[4], domain.StatusCompleted, "hooks.test:80", later),
		finishOp(q[5], domain.StatusCompleted, "", later),
		{Kind: storekit.OpMarkInFlight, ID: q[6], At: later},
		{Kind: storekit.OpMarkInFlight, ID: q[7], At: later},
		requeueOp(fl[1], domain.PhaseDispatch, later),
		requeueOp(fl[2], domain.PhaseDispatch, later),
		deliveryOp(ids[stPending][0], true, later),
		deliveryOp(ids[stPending][1], false, later),
	}
	want := []string{"ok", "delivery due", "ok", "ok", "ok", "not found", "ok", "ok", "ok", "ok",
		"ok", "not found", "not found", "delivery due", "ok", "ok",
		"delivery due", "ok", "ok", "ok", "ok", "ok", "ok", "ok"}
	r := runGroup(s, ops)
	for i := range ops {
		if outcome(r[i]) != want[i] {
			t.Errorf("op %d (kind %d): %q, want %q", i, ops[i].Kind, outcome(r[i]), want[i])
		}
	}
	for _, c := range []struct {
		id             domain.JobID
		status         domain.Status
		delivery       domain.DeliveryStatus
		gone, noResult bool
	}{
		{id: fl[0], status: domain.StatusCompleted},
		{id: q[0], status: domain.StatusCompleted, delivery: domain.DeliveryDelivered},
		{id: q[1], gone: true},
		{id: q[2], gone: true},
		{id: q[3], status: domain.StatusQueued, noResult: true},
		{id: fl[3], status: domain.StatusCompleted},
		{id: fl[4], status: domain.StatusCompleted, delivery: domain.DeliveryPending},
		{id: fl[5], status: domain.StatusInFlight, noResult: true},
		{id: q[6], status: domain.StatusInFlight, noResult: true},
		{id: fl[1], status: domain.StatusQueued, noResult: true},
		{id: ids[stPending][1], status: domain.StatusCompleted, delivery: domain.DeliveryFailed},
	} {
		j, err := s.Get(t.Context(), c.id)
		if c.gone {
			if !errors.Is(err, domain.ErrNotFound) {
				t.Errorf("job %s: %+v, %v, want it deleted", c.id, j, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var delivery domain.DeliveryStatus
		if j.Delivery != nil {
			delivery = j.Delivery.Status
		}
		if j.Status != c.status || delivery != c.delivery || (j.Result == nil) != c.noResult {
			t.Errorf("job %s: status %s, delivery %q, result %+v; want %s, %q", c.id, j.Status, delivery, j.Result, c.status, c.delivery)
		}
	}
}

// TestGroupMergesNotAcrossABarrier: an op that acts on jobs it does not
// name one by one (here RecoverInFlight) sees the ops before it applied
// and none after it, as before merging: marks before it are recovered,
// marks after it stay.
func TestGroupMergesNotAcrossABarrier(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	now := time.Now().Truncate(time.Millisecond)
	var q []domain.JobID
	for i := range 6 {
		j, _, err := s.Insert(t.Context(), storetest.NewJob("u", fmt.Sprint(i), "up.test:80"))
		if err != nil {
			t.Fatal(err)
		}
		q = append(q, j.ID)
	}
	var ops []*storekit.Op
	for i := range 6 {
		if i == 3 {
			ops = append(ops, &storekit.Op{Kind: storekit.OpRecover, At: now})
		}
		ops = append(ops, &storekit.Op{Kind: storekit.OpMarkInFlight, ID: q[i], At: now})
	}
	b := &pgx.Batch{}
	s.queueJobOps(b, ops, make([]storekit.Result, len(ops)))
	if n := writes(b); n != 3 {
		t.Fatalf("%d statements, want 3 (the marks before the barrier, the barrier, the marks after)", n)
	}
	r := runGroup(s, ops)
	if r[3].Err != nil || r[3].N != 3 {
		t.Fatalf("RecoverInFlight: %+v, want the 3 jobs marked before it", r[3])
	}
	for i := range 6 {
		want := domain.StatusQueued
		if i >= 3 {
			want = domain.StatusInFlight
		}
		if j, err := s.Get(t.Context(), q[i]); err != nil || j.Status != want {
			t.Errorf("job %d: %+v, %v, want %s", i, j, err, want)
		}
	}
}

// TestGroupMergesEachKindIntoOneStatement counts the statements a group
// queues: one per kind of lifecycle write however many ops it holds, one
// more for each op on a job another op of the group names.
func TestGroupMergesEachKindIntoOneStatement(t *testing.T) {
	t.Parallel()
	s := &Store{opts: Options{Owner: "a:1"}} // queueing needs no database
	now := time.Now()
	count := func(ops []*storekit.Op) int {
		b := &pgx.Batch{}
		s.queueJobOps(b, ops, make([]storekit.Result, len(ops)))
		return writes(b)
	}
	var finishes, all []*storekit.Op
	for i := range 50 {
		id := domain.JobID(fmt.Sprintf("j%03d", i))
		finishes = append(finishes, finishOp(id, domain.StatusCompleted, "hooks.test:80", now))
		switch i % 5 {
		case 0:
			all = append(all, &storekit.Op{Kind: storekit.OpMarkInFlight, ID: id, At: now})
		case 1:
			all = append(all, requeueOp(id, domain.PhaseDispatch, now))
		case 2:
			all = append(all, requeueOp(id, domain.PhaseDeliver, now))
		case 3:
			all = append(all, finishOp(id, domain.StatusFailed, "", now))
		case 4:
			all = append(all, deliveryOp(id, true, now))
		}
	}
	if n := count(finishes); n != 1 {
		t.Errorf("50 finishes are %d statements, want 1", n)
	}
	if n := count(append(finishes[:10:10], deliveryOp("other", true, now))); n != 2 {
		t.Errorf("10 finishes and a delivery are %d statements, want 2 (the delivery planned as usual)", n)
	}
	if n := count(all); n != int(mergeKinds) {
		t.Errorf("50 ops of %d kinds are %d statements, want %d", mergeKinds, n, mergeKinds)
	}
	twice := append(all, deliveryOp(all[3].ID, true, now), &storekit.Op{Kind: storekit.OpDelete, ID: all[0].ID})
	if n := count(twice); n != int(mergeKinds)+4 {
		t.Errorf("with two jobs named twice, %d statements, want %d", n, mergeKinds+4)
	}
}

// TestGroupIsolatesARefusedMergedOp: a value PostgreSQL refuses in a
// merged statement fails its own caller only; the ops merged with it are
// applied.
func TestGroupIsolatesARefusedMergedOp(t *testing.T) {
	t.Parallel()
	s := openStore(t, newSchema(t), "a:1", nil)
	now := time.Now().Truncate(time.Millisecond)
	ids := mergeFixture(t, now, s)
	q, pending := ids[stQueued], ids[stPending]
	ops := []*storekit.Op{
		finishOp(q[0], domain.StatusCompleted, "", now),
		finishOp(q[1], "completed\x00", "", now), // refused: text holding a NUL
		finishOp(q[2], domain.StatusCompleted, "hooks.test:80", now),
		deliveryOp(pending[0], true, now),
		deliveryOp("missing\x00", true, now), // refused likewise
		deliveryOp(pending[1], true, now),
	}
	r := runGroup(s, ops)
	for i, want := range []string{"ok", "unavailable", "delivery due", "ok", "unavailable", "ok"} {
		got := outcome(r[i])
		if want == "unavailable" {
			if r[i].Err == nil || domain.CodeOf(r[i].Err) != domain.CodeUnavailable {
				t.Errorf("op %d: %+v, want an unavailable error", i, r[i])
			}
			continue
		}
		if got != want {
			t.Errorf("op %d: %q, want %q", i, got, want)
		}
	}
	if j, err := s.Get(t.Context(), q[1]); err != nil || j.Status != domain.StatusQueued {
		t.Errorf("the refused finish's job: %+v, %v, want it still queued", j, err)
	}
	for _, id := range []domain.JobID{q[0], q[2], pending[0], pending[1]} {
		if j, err := s.Get(t.Context(), id); err != nil || j.Status != domain.StatusCompleted {
			t.Errorf("job %s: %+v, %v, want it completed", id, j, err)
		}
	}
}

// TestPlanSettingsRestoreWhatTheyFound checks that the planner settings a
// group turns off around its merged statements come back as they were,
// not simply on: a server or role configured with one of them off keeps
// it off for the rest of the group.
func TestPlanSettingsRestoreWhatTheyFound(t *testing.T) {
	query(t, newSchema(t), func(tx pgx.Tx) error {
		ctx := t.Context()
		if _, err := tx.Exec(ctx, "SET LOCAL enable_hashjoin = off"); err != nil {
			return err
		}
		settings := func() (out [4]string) {
			t.Helper()
			if err := tx.QueryRow(ctx, `SELECT current_setting('enable_seqscan'), current_setting('enable_bitmapscan'),
				current_setting('enable_hashjoin'), current_setting('enable_mergejoin')`).Scan(&out[0], &out[1], &out[2], &out[3]); err != nil {
				t.Fatal(err)
			}
			return out
		}
		if _, err := tx.Exec(ctx, sqlPlanByID); err != nil {
			return err
		}
		if got := settings(); got != [4]string{"off", "off", "off", "off"} {
			t.Errorf("after sqlPlanByID: %v, want all off", got)
		}
		if _, err := tx.Exec(ctx, sqlPlanAsUsual); err != nil {
			return err
		}
		if got := settings(); got != [4]string{"on", "on", "off", "on"} {
			t.Errorf("after sqlPlanAsUsual: %v, want enable_hashjoin off as it was, the rest on", got)
		}
		return nil
	})
}
