package pebble_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestOperatorStateSurvivesReopen: attempt history, bulk operations, lane
// pauses, a retried job and the counts are all there after a close and a
// reopen.
func TestOperatorStateSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	at := time.UnixMilli(time.Now().UnixMilli())
	h := []domain.Attempt{
		{At: at.Add(-2 * time.Second), Duration: 120 * time.Millisecond, Status: 429, Signal: domain.SignalRetryAfter},
		{At: at.Add(-time.Second), Duration: 3 * time.Second, Error: "timeout", Member: "gpu-2"},
	}
	a := mustInsert(t, s, storetest.NewJob(domain.Scope("acme", "u"), "a", "a.test:80"))
	_, err := s.Finish(ctx, &ports.FinishParams{ID: a.ID, Status: domain.StatusFailed, Attempts: 2, History: h,
		Result: &domain.Result{Reason: "timeout"}, Retention: 48 * time.Hour, Now: at})
	check(t, err)
	b := mustInsert(t, s, storetest.NewJob("u", "b", "b.test:443"))
	_, err = s.Finish(ctx, &ports.FinishParams{ID: b.ID, Status: domain.StatusCompleted, Attempts: 1, History: h[:1],
		Result: &domain.Result{ResponseStatus: 200}, Now: at})
	check(t, err)
	retried, err := s.Retry(ctx, &ports.RetryParams{ID: b.ID, Now: at})
	check(t, err)
	op := &domain.Operation{ID: "op-1", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 99, Total: 5, Processed: 2,
		Filter:    domain.JobFilter{Statuses: []domain.Status{domain.StatusFailed}, Tenant: "acme", CreatedAfter: at.Add(-time.Hour)},
		CreatedAt: at, UpdatedAt: at}
	check(t, s.SaveOperation(ctx, op))
	check(t, s.PauseLane(ctx, domain.LanePause{Upstream: "http://a.test:80", At: at, Reason: "incident"}))
	check(t, s.PauseLane(ctx, domain.LanePause{Upstream: "http://b.test:443", At: at}))
	check(t, s.ResumeLane(ctx, "http://b.test:443"))
	check(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	got := mustGet(t, s, a.ID)
	if len(got.History) != 2 || got.History[1] != h[1] || !got.History[0].At.Equal(h[0].At) || got.History[0].Signal != h[0].Signal {
		t.Fatalf("history after reopening = %+v, want %+v", got.History, h)
	}
	if d := got.ExpiresAt.Sub(at); d != 48*time.Hour {
		t.Fatalf("retention after reopening: expires %v after finishing, want 48h", d)
	}
	if g := mustGet(t, s, b.ID); g.Status != domain.StatusQueued || g.ReadySeq != retried.ReadySeq || len(g.History) != 1 {
		t.Fatalf("retried job after reopening = %+v", g)
	}
	gotOp, err := s.GetOperation(ctx, "op-1")
	check(t, err)
	if gotOp.Processed != 2 || gotOp.Cursor != 99 || gotOp.Filter.Tenant != "acme" || !gotOp.Filter.CreatedAfter.Equal(at.Add(-time.Hour)) {
		t.Fatalf("operation after reopening = %+v", gotOp)
	}
	running, err := s.Operations(ctx, true)
	if err != nil || len(running) != 1 {
		t.Fatalf("running operations after reopening = %v, %v", running, err)
	}
	pauses, err := s.LanePauses(ctx)
	if err != nil || len(pauses) != 1 || pauses[0].Upstream != "http://a.test:80" || pauses[0].Reason != "incident" || !pauses[0].At.Equal(at) {
		t.Fatalf("pauses after reopening = %+v, %v", pauses, err)
	}
	counts, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()})
	if err != nil || counts[domain.StatusFailed] != 1 || counts[domain.StatusQueued] != 1 || len(counts) != 2 {
		t.Fatalf("counts after reopening = %v, %v", counts, err)
	}
	page, err := s.ListJobs(ctx, &ports.ListJobsParams{Filter: domain.JobFilter{Tenant: "acme"}, Limit: 10, Now: time.Now()})
	if err != nil || len(page) != 1 || page[0].ID != a.ID {
		t.Fatalf("tenant listing after reopening = %v, %v", page, err)
	}
}

const bulkEnv = "AQUIFER_PEBBLE_BULK_DIR"

// bulkJobs is how many failed jobs the bulk crash test retries, in batches
// of bulkBatch.
const (
	bulkJobs  = 1000
	bulkBatch = 10
)

// TestBulkRetrySurvivesKill runs a bulk retry of failed jobs in a child
// process, batch by batch as the app runs one (list the next batch below
// the cursor, RunBatch it with the new progress), and kills it with
// SIGKILL part way. In the reopened store the operation's progress and the
// jobs agree: every job above the cursor is re-queued, none below it is,
// and no acknowledged batch is lost. Resumed from there, the operation
// re-queues every job exactly once.
func TestBulkRetrySurvivesKill(t *testing.T) {
	if dir := os.Getenv(bulkEnv); dir != "" {
		bulkChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBulkRetrySurvivesKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), bulkEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	check(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	check(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	var acked int64 // the highest Processed of an acknowledged batch
	batches, killed := 0, false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "batch" {
			continue
		}
		acked, _ = strconv.ParseInt(f[1], 10, 64)
		if batches++; batches == 20 && !killed {
			check(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited before it was killed: %v\n%s", err, stderr.String())
	}
	s := open(t, dir)
	defer s.Close()
	op, err := s.GetOperation(t.Context(), "bulk")
	check(t, err)
	if op.Processed < acked || op.Processed >= bulkJobs || op.State != domain.OpRunning {
		t.Fatalf("operation after the kill = %+v; acknowledged %d of %d", op, acked, bulkJobs)
	}
	jobs, err := s.ListJobs(t.Context(), &ports.ListJobsParams{Filter: domain.JobFilter{UserID: "bulk"}, Limit: 2 * bulkJobs, Now: time.Now()})
	check(t, err)
	var queued int64
	for _, j := range jobs {
		if want := j.Seq >= op.Cursor; (j.Status == domain.StatusQueued) != want {
			t.Fatalf("job seq %d is %s with the cursor at %d: the batch and its progress did not commit together", j.Seq, j.Status, op.Cursor)
		}
		if j.Status == domain.StatusQueued {
			queued++
		}
	}
	if len(jobs) != bulkJobs || queued != op.Changed || op.Changed != op.Processed {
		t.Fatalf("%d jobs, %d re-queued; operation %+v", len(jobs), queued, op)
	}
	t.Logf("killed after %d acknowledged batches: %d of %d jobs processed, cursor %d", batches, op.Processed, bulkJobs, op.Cursor)
	// Resume, as the app does after a restart.
	op = runBulk(t.Context(), s, op, func(int64) {})
	if op.State != domain.OpCompleted || op.Changed != bulkJobs || op.Skipped != 0 {
		t.Fatalf("resumed operation = %+v, want all %d re-queued, none skipped", op, bulkJobs)
	}
	c, err := s.CountJobs(t.Context(), &ports.CountJobsParams{Filter: domain.JobFilter{UserID: "bulk"}, Now: time.Now()})
	if err != nil || c[domain.StatusQueued] != bulkJobs || len(c) != 1 {
		t.Fatalf("counts after the bulk retry = %v, %v", c, err)
	}
}

// bulkChild seeds failed jobs, starts a bulk retry of them and runs it,
// printing the progress of each acknowledged batch, until it is killed.
func bulkChild(dir string) {
	ctx := context.Background()
	s, err := pebble.Open(ctx, pebble.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < bulkJobs; i += 8 {
				j, _, err := s.Insert(ctx, storetest.NewJob("bulk", fmt.Sprint(i), "a.test:80"))
				if err == nil {
					_, err = s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 3,
						Result: &domain.Result{Reason: "connection refused"}, Now: time.Now()})
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
		}()
	}
	wg.Wait()
	f := domain.JobFilter{UserID: "bulk", Statuses: []domain.Status{domain.StatusFailed}}
	newest, err := s.ListJobs(ctx, &ports.ListJobsParams{Filter: f, Limit: 1, Now: time.Now()})
	if err != nil || len(newest) != 1 {
		fmt.Fprintln(os.Stderr, "no newest job", err)
		return
	}
	now := time.Now()
	op := &domain.Operation{ID: "bulk", Kind: domain.OpKindRetry, Filter: f, State: domain.OpRunning,
		Cursor: newest[0].Seq + 1, Total: bulkJobs, CreatedAt: now, UpdatedAt: now}
	if err := s.SaveOperation(ctx, op); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	out := bufio.NewWriter(os.Stdout)
	runBulk(ctx, s, op, func(processed int64) {
		fmt.Fprintf(out, "batch %d\n", processed)
		_ = out.Flush()
	})
	time.Sleep(time.Minute) // the parent kills it long before
}

// runBulk runs op to its end in batches of bulkBatch, as internal/app/ops
// does, calling acked after each committed batch.
func runBulk(ctx context.Context, s *pebble.Store, op *domain.Operation, acked func(processed int64)) *domain.Operation {
	for op.State == domain.OpRunning {
		page, err := s.ListJobs(ctx, &ports.ListJobsParams{Filter: op.Filter, BeforeSeq: op.Cursor, Limit: bulkBatch, Now: time.Now()})
		if err != nil {
			panic(err)
		}
		next := *op
		next.UpdatedAt = time.Now()
		items := make([]ports.BatchItem, len(page))
		for i, j := range page {
			items[i] = ports.BatchItem{ID: j.ID, Seq: j.Seq}
			next.Cursor = j.Seq
		}
		next.Processed += int64(len(page))
		if len(page) == 0 {
			next.State = domain.OpCompleted
		}
		changed, err := s.RunBatch(ctx, &ports.RunBatchParams{Op: &next, PrevProcessed: op.Processed, Items: items, Now: time.Now()})
		if err != nil {
			panic(err)
		}
		// The store added the batch's counts to what it saved.
		next.Changed += int64(len(changed))
		next.Skipped += int64(len(items) - len(changed))
		op = &next
		acked(op.Processed)
	}
	return op
}

// TestListingWhileIngesting lists and counts continuously while jobs are
// inserted and finished: every page is newest first, matches its filter and
// follows the previous page, and ingest completes (reads take no lock the
// writer needs).
func TestListingWhileIngesting(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	ctx := t.Context()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				j, _, err := s.Insert(ctx, storetest.NewJob(fmt.Sprint("u", g), fmt.Sprint(i), fmt.Sprintf("h%d.test:80", i%3)))
				if err == nil && i%2 == 0 {
					_, err = s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Now: time.Now(),
						Result: &domain.Result{Reason: "x"}})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	filters := []domain.JobFilter{{}, {Statuses: []domain.Status{domain.StatusFailed}}, {UserID: "u1"}, {Destination: "h2.test:80"}}
	var reads sync.WaitGroup
	reads.Add(1)
	go func() {
		defer reads.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			f := filters[n%len(filters)]
			before := int64(0)
			for range 3 {
				page, err := s.ListJobs(ctx, &ports.ListJobsParams{Filter: f, BeforeSeq: before, Limit: 20, Now: time.Now()})
				if err != nil {
					errs <- err
					return
				}
				for i, j := range page {
					if !f.Matches(j) || (before > 0 && j.Seq >= before) || (i > 0 && j.Seq >= page[i-1].Seq) {
						errs <- fmt.Errorf("filter %+v: page out of order or not matching at %d (seq %d, before %d)", f, i, j.Seq, before)
						return
					}
				}
				if len(page) < 20 {
					break
				}
				before = page[len(page)-1].Seq
			}
			if _, err := s.CountJobs(ctx, &ports.CountJobsParams{Filter: f, Now: time.Now()}); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	reads.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()})
	if err != nil || c[domain.StatusQueued] != 600 || c[domain.StatusFailed] != 600 {
		t.Fatalf("counts after ingest = %v, %v", c, err)
	}
}
