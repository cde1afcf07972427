package sqlite_test

import (
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// crashCopy copies the database files of an open store as they are on disk
// now, the way kill -9 leaves them: the main file and the WAL, with no
// checkpoint and no clean close (the shared-memory index is left behind
// too, so opening the copy rebuilds it from the WAL). It returns the copy's
// path.
func crashCopy(t *testing.T, s *sqlite.Store) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "crashed.db")
	for _, suffix := range []string{"", "-wal"} {
		in, err := os.Open(s.Path() + suffix)
		if errors.Is(err, os.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(dst + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// operatorState is what an operator left in a store: a failed job with its
// attempt history, a running bulk retry one batch in, and a lane pause.
type operatorState struct {
	failed, retried *domain.Job
	history         []domain.Attempt
	op              domain.Operation
	pause           domain.LanePause
}

func leaveOperatorState(t *testing.T, s *sqlite.Store) operatorState {
	t.Helper()
	ctx := t.Context()
	now := time.UnixMilli(time.Now().UnixMilli())
	var st operatorState
	st.history = []domain.Attempt{
		{At: now.Add(-2 * time.Second), Duration: 120 * time.Millisecond, Status: 429, Signal: domain.SignalRetryAfter},
		{At: now.Add(-time.Second), Duration: 3 * time.Second, Error: "context deadline exceeded"},
	}
	insertFailed := func(key string) *domain.Job {
		j, _, err := s.Insert(ctx, storetest.NewJob("u", key, "a.test:80"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 2,
			Result: &domain.Result{Reason: "timeout"}, History: st.history, Retention: 48 * time.Hour, Now: now}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	st.failed, st.retried = insertFailed("stays-failed"), insertFailed("retried")
	st.op = domain.Operation{ID: "op-1", Kind: domain.OpKindRetry, State: domain.OpRunning,
		Filter: domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed}, Q: "timeout"}, Cursor: st.retried.Seq + 1,
		Total: 2, CreatedAt: now, UpdatedAt: now}
	if err := s.SaveOperation(ctx, &st.op); err != nil {
		t.Fatal(err)
	}
	next := st.op
	next.Processed, next.Cursor, next.UpdatedAt = 1, st.retried.Seq, now.Add(time.Second)
	if _, err := s.RunBatch(ctx, &ports.RunBatchParams{Op: &next, Items: []ports.BatchItem{{ID: st.retried.ID, Seq: st.retried.Seq}},
		Now: now}); err != nil {
		t.Fatal(err)
	}
	st.op = next
	st.pause = domain.LanePause{Upstream: "http://a.test:80", At: now, Reason: "incident 7"}
	if err := s.PauseLane(ctx, st.pause); err != nil {
		t.Fatal(err)
	}
	return st
}

func checkOperatorState(t *testing.T, path string, st operatorState) {
	t.Helper()
	ctx := t.Context()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	failed, err := s.Get(ctx, st.failed.ID)
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status != domain.StatusFailed || len(failed.History) != 2 || failed.History[1].Error != st.history[1].Error ||
		!failed.History[0].At.Equal(st.history[0].At) || failed.ExpiresAt.Sub(time.Now()) < 47*time.Hour {
		t.Fatalf("failed job after reopening: %+v, history %+v", failed, failed.History)
	}
	retried, err := s.Get(ctx, st.retried.ID)
	if err != nil {
		t.Fatal(err)
	}
	if retried.Status != domain.StatusQueued || len(retried.History) != 2 {
		t.Fatalf("retried job after reopening: %+v", retried)
	}
	op, err := s.GetOperation(ctx, st.op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if op.Processed != 1 || op.Changed != 1 || op.Cursor != st.retried.Seq || op.State != domain.OpRunning ||
		op.Filter.Q != "timeout" || len(op.Filter.Statuses) != 1 || !op.UpdatedAt.Equal(st.op.UpdatedAt) {
		t.Fatalf("operation after reopening: %+v", op)
	}
	running, err := s.Operations(ctx, true)
	if err != nil || len(running) != 1 || running[0].ID != st.op.ID {
		t.Fatalf("running operations after reopening: %v, %v", running, err)
	}
	pauses, err := s.LanePauses(ctx)
	if err != nil || len(pauses) != 1 || pauses[0].Upstream != st.pause.Upstream || pauses[0].Reason != st.pause.Reason ||
		!pauses[0].At.Equal(st.pause.At) {
		t.Fatalf("lane pauses after reopening: %+v, %v", pauses, err)
	}
	// The writer's counter continues past what was committed: a new job
	// comes after the retried one in its lane.
	j, _, err := s.Insert(ctx, storetest.NewJob("u", "after", "a.test:80"))
	if err != nil {
		t.Fatal(err)
	}
	if j.ReadySeq <= retried.ReadySeq {
		t.Fatalf("new job ready_seq %d, not after the retried job's %d", j.ReadySeq, retried.ReadySeq)
	}
}

func TestOperatorStateSurvivesReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "aquifer.db")
	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	st := leaveOperatorState(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkOperatorState(t, path, st)
}

func TestOperatorStateSurvivesACrash(t *testing.T) {
	t.Parallel()
	s := open(t, sqlite.SyncFull)
	defer s.Close()
	st := leaveOperatorState(t, s)
	checkOperatorState(t, crashCopy(t, s), st)
}

// TestRunBatchIsAtomic makes saving a batch's progress fail after the
// batch's jobs were re-queued in the same transaction, and checks that
// nothing of the batch is left: not the jobs' changes, not the progress.
// Then the same batch, run again, commits whole.
func TestRunBatchIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, sqlite.SyncFull)
	defer s.Close()
	var items []ports.BatchItem
	for _, key := range []string{"a", "b", "c"} {
		j, _, err := s.Insert(ctx, storetest.NewJob("u", key, "a.test:80"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: 1,
			Result: &domain.Result{Reason: "x"}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		items = append(items, ports.BatchItem{ID: j.ID, Seq: j.Seq})
	}
	op := &domain.Operation{ID: "op-atomic", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 1 << 40, Total: 3,
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := s.SaveOperation(ctx, op); err != nil {
		t.Fatal(err)
	}

	// Another connection adds a trigger that refuses any update of the
	// operation: the batch's last statement.
	db, err := sql.Open("sqlite", "file:"+s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER refuse_progress BEFORE UPDATE ON operations
		BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed, next.State = 3, domain.OpCompleted
	batch := &ports.RunBatchParams{Op: &next, Items: items, Now: time.Now()}
	if _, err := s.RunBatch(ctx, batch); err == nil || domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("RunBatch with the progress refused = %v, want unavailable", err)
	}
	for _, it := range items {
		if j, err := s.Get(ctx, it.ID); err != nil || j.Status != domain.StatusFailed {
			t.Fatalf("job %s after the failed batch: %+v, %v; want it still failed", it.ID, j, err)
		}
	}
	if got, err := s.GetOperation(ctx, op.ID); err != nil || got.Processed != 0 || got.Changed != 0 || got.State != domain.OpRunning {
		t.Fatalf("operation after the failed batch: %+v, %v; want no progress", got, err)
	}

	if _, err := db.Exec("DROP TRIGGER refuse_progress"); err != nil {
		t.Fatal(err)
	}
	changed, err := s.RunBatch(ctx, batch)
	if err != nil || len(changed) != 3 {
		t.Fatalf("RunBatch again = %v, %v; want the 3 jobs", changed, err)
	}
	for _, it := range items {
		if j, err := s.Get(ctx, it.ID); err != nil || j.Status != domain.StatusQueued {
			t.Fatalf("job %s after the batch: %+v, %v; want it queued", it.ID, j, err)
		}
	}
	if got, err := s.GetOperation(ctx, op.ID); err != nil || got.Processed != 3 || got.Changed != 3 || got.State != domain.OpCompleted {
		t.Fatalf("operation after the batch: %+v, %v", got, err)
	}
}
