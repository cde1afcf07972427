package pebble_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cpebble "github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/pebble"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

func open(t *testing.T, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(t.Context(), pebble.Options{Dir: dir})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) ports.JobStore { return open(t, t.TempDir()) })
}

func TestOperatorContract(t *testing.T) {
	storetest.ExerciseOperator(t, func(t *testing.T) ports.JobStore { return open(t, t.TempDir()) })
}

// TestContractSmallGroups runs the contract with groups of one op, no
// gathering and Pebble's own WAL sync interval.
func TestContractSmallGroups(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) ports.JobStore {
		s, err := pebble.Open(t.Context(), pebble.Options{Dir: filepath.Join(t.TempDir(), "new", "dir"),
			MaxBatch: 1, GatherYields: -1, WALMinSyncInterval: time.Millisecond, CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestOperatorContractSmallGroups runs the operator contract with groups of
// one op.
func TestOperatorContractSmallGroups(t *testing.T) {
	storetest.ExerciseOperator(t, func(t *testing.T) ports.JobStore {
		s, err := pebble.Open(t.Context(), pebble.Options{Dir: t.TempDir(), MaxBatch: 1, GatherYields: -1, CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func mustInsert(t *testing.T, s ports.JobStore, j *domain.Job) *domain.Job {
	t.Helper()
	stored, fresh, err := s.Insert(t.Context(), j)
	if err != nil || !fresh {
		t.Fatalf("Insert(%s/%s): fresh=%v err=%v", j.UserID, j.IdempotentKey, fresh, err)
	}
	return stored
}

func mustGet(t *testing.T, s ports.JobStore, id domain.JobID) *domain.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return j
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot is everything a reader can see of a store.
type snapshot struct {
	Jobs      map[domain.JobID]*domain.Job
	ByKey     map[string]domain.JobID
	Ready     map[domain.QueueKey][]domain.JobID
	Positions map[domain.JobID]int
	Lanes     []domain.QueueKey
	Counts    ports.Counts
}

func take(t *testing.T, s *pebble.Store, ids []domain.JobID) *snapshot {
	t.Helper()
	ctx := t.Context()
	snap := &snapshot{Jobs: map[domain.JobID]*domain.Job{}, ByKey: map[string]domain.JobID{},
		Ready: map[domain.QueueKey][]domain.JobID{}, Positions: map[domain.JobID]int{}}
	for _, id := range ids {
		j, err := s.Get(ctx, id)
		if errors.Is(err, domain.ErrNotFound) {
			continue
		}
		check(t, err)
		snap.Jobs[id] = j
		byKey, err := s.Lookup(ctx, j.UserID, j.IdempotentKey)
		check(t, err)
		snap.ByKey[j.UserID+"\x00"+j.IdempotentKey] = byKey.ID
		if j.ReadyQueue != "" {
			n, err := s.Position(ctx, j.ReadyQueue, j.ReadySeq)
			check(t, err)
			snap.Positions[id] = n
		}
	}
	lanes, err := s.ReadyQueues(ctx)
	check(t, err)
	sort.Slice(lanes, func(a, b int) bool { return lanes[a] < lanes[b] })
	snap.Lanes = lanes
	for _, lane := range lanes {
		p := &ports.ListReadyParams{Queue: lane, Limit: 2, Now: time.Now()}
		for {
			page, err := s.ListReady(ctx, p)
			check(t, err)
			if len(page) == 0 {
				break
			}
			for _, j := range page {
				snap.Ready[lane] = append(snap.Ready[lane], j.ID)
				p.AfterSeq = j.ReadySeq
			}
		}
	}
	snap.Counts, err = s.Counts(ctx)
	check(t, err)
	return snap
}

// TestReopenKeepsEverything: a closed and reopened store shows the same jobs
// through every index, and its seq counter continues past the old maximum —
// also past a purged job that held it.
func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := t.Context()
	var ids []domain.JobID
	var jobs []*domain.Job
	for i := range 12 {
		lane := []string{"a.test:80", "b.test:80", "a.test:80|tenant"}[i%3]
		j := mustInsert(t, s, storetest.NewJob(fmt.Sprint("u", i%2), fmt.Sprint("k", i), lane))
		ids, jobs = append(ids, j.ID), append(jobs, j)
	}
	check(t, s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: jobs[0].ID, At: time.Now()}))
	_, err := s.Finish(ctx, &ports.FinishParams{ID: jobs[1].ID, Status: domain.StatusCompleted, Attempts: 1,
		Result: &domain.Result{ResponseStatus: 200, Body: []byte("ok")}, Now: time.Now(), DeliverIn: "hooks.test:80"})
	check(t, err)
	_, err = s.Finish(ctx, &ports.FinishParams{ID: jobs[2].ID, Status: domain.StatusFailed, Attempts: 3, Now: time.Now()})
	check(t, err)
	check(t, s.Requeue(ctx, &ports.RequeueParams{ID: jobs[3].ID, Phase: domain.PhaseDispatch, Attempts: 1, Deferrals: 2, Now: time.Now()}))
	check(t, s.Delete(ctx, jobs[4].ID))
	expired := storetest.NewJob("u", "expired", "a.test:80")
	expired.ExpiresAt = time.Now().Add(-time.Second)
	ids = append(ids, mustInsert(t, s, expired).ID)
	top := storetest.NewJob("u", "top", "a.test:80")
	top.ExpiresAt = time.Now().Add(-time.Second)
	topSeq := mustInsert(t, s, top).Seq
	n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now(), Limit: 100})
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want the 2 expired jobs", n, err)
	}
	before := take(t, s, ids)
	if len(before.Jobs) != 11 || len(before.Lanes) != 4 || before.Counts != (ports.Counts{Queued: 8, InFlight: 1, Deliveries: 1}) {
		t.Fatalf("before reopening: %d jobs, lanes %v, counts %+v", len(before.Jobs), before.Lanes, before.Counts)
	}
	check(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	after := take(t, s, ids)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("reopened store differs:\nbefore %+v\nafter  %+v", before, after)
	}
	next := mustInsert(t, s, storetest.NewJob("u", "next", "a.test:80"))
	if next.Seq <= topSeq || next.Seq <= before.Jobs[jobs[1].ID].ReadySeq {
		t.Fatalf("Seq after reopening = %d, want past %d (the purged top) and every ReadySeq", next.Seq, topSeq)
	}
	if _, fresh, err := s.Insert(ctx, storetest.NewJob("u0", "k0", "a.test:80")); err != nil || fresh {
		t.Fatalf("re-insert of a stored key after reopening: fresh=%v err=%v", fresh, err)
	}
}

const (
	crashEnv = "AQUIFER_PEBBLE_CRASH_DIR"
	// crashBodyEnv set: the child's jobs carry crashBody(key) as their
	// request body.
	crashBodyEnv = "AQUIFER_PEBBLE_CRASH_BODIES"
)

// TestCrashKeepsAcknowledgedWrites runs a child process that writes jobs
// from several goroutines and reports each acknowledged write on stdout, and
// kills it with SIGKILL mid-stream: every write it acknowledged must be in
// the reopened store.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir, os.Getenv(crashBodyEnv) != "")
		return
	}
	dir := t.TempDir()
	inserted, finished := crashAfter(t, "TestCrashKeepsAcknowledgedWrites", dir, nil, func(acked int) bool { return acked >= 2000 })
	s := open(t, dir)
	defer s.Close()
	checkAcknowledged(t, s, inserted, finished)
	t.Logf("%d inserts and %d finishes acknowledged before SIGKILL, all present", len(inserted), len(finished))
}

// TestCrashKeepsAcknowledgedBodies is the same with 1 KiB request bodies,
// killed once a flush has written bodies to a blob file (value
// separation): every acknowledged job's body must read back whole, from
// the blob files and from the WAL.
func TestCrashKeepsAcknowledgedBodies(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir, os.Getenv(crashBodyEnv) != "")
		return
	}
	dir := t.TempDir()
	blobs := func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "*.blob"))
		return len(m) > 0
	}
	inserted, finished := crashAfter(t, "TestCrashKeepsAcknowledgedBodies", dir, []string{crashBodyEnv + "=1"},
		func(acked int) bool { return acked >= 2000 && blobs() })
	if !blobs() {
		t.Fatal("no blob file was written before the kill; the test checks nothing")
	}
	s := open(t, dir)
	defer s.Close()
	checkAcknowledged(t, s, inserted, finished)
	for key, a := range inserted {
		if j := mustGet(t, s, a.id); string(j.Body) != string(crashBody(key)) {
			t.Fatalf("job %s (%s) after the crash: body of %d bytes differs from the %d acknowledged", a.id, key, len(j.Body), len(crashBody(key)))
		}
	}
	t.Logf("%d inserts with bodies and %d finishes acknowledged before SIGKILL, all present", len(inserted), len(finished))
}

// crashAck is a write the crash child acknowledged.
type crashAck struct {
	id       domain.JobID
	seq      int64
	readySeq int64 // for "fin": the delivery's ReadySeq
}

// crashAfter runs test's crash child on dir (with env added), kills it
// with SIGKILL once enough reports whether the inserts acknowledged so
// far are enough, and returns every insert (by idempotency key) and
// finish (job → delivery ReadySeq) it acknowledged.
func crashAfter(t *testing.T, test, dir string, env []string, enough func(acked int) bool) (map[string]crashAck, map[domain.JobID]int64) {
	t.Helper()
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), crashEnv+"="+dir), env...)
	stdout, err := cmd.StdoutPipe()
	check(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	check(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // in case the test stops early
	inserted := map[string]crashAck{}
	finished := map[domain.JobID]int64{}
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "ins":
			seq, _ := strconv.ParseInt(f[3], 10, 64)
			inserted[f[1]] = crashAck{id: domain.JobID(f[2]), seq: seq}
		case len(f) == 3 && f[0] == "fin":
			rs, _ := strconv.ParseInt(f[2], 10, 64)
			finished[domain.JobID(f[1])] = rs
		}
		if !killed && enough(len(inserted)) {
			check(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true // lines already written still count: read them all
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited before it was killed: %v\n%s", err, stderr.String())
	}
	if len(finished) == 0 {
		t.Fatal("child acknowledged no Finish")
	}
	return inserted, finished
}

// checkAcknowledged fails t unless every acknowledged insert and finish is
// in s, and a new insert's Seq is past every Seq and ReadySeq in it.
func checkAcknowledged(t *testing.T, s *pebble.Store, inserted map[string]crashAck, finished map[domain.JobID]int64) {
	t.Helper()
	var maxSeq int64
	for key, a := range inserted {
		j, err := s.Lookup(t.Context(), "crash", key)
		if err != nil || j.ID != a.id || j.Seq != a.seq {
			t.Fatalf("acknowledged insert %s (%s, seq %d) after the crash: %+v, %v", key, a.id, a.seq, j, err)
		}
		maxSeq = max(maxSeq, j.Seq, j.ReadySeq)
	}
	for id, rs := range finished {
		j := mustGet(t, s, id)
		if j.Status != domain.StatusCompleted || j.ReadySeq != rs || j.Phase() != domain.PhaseDeliver {
			t.Fatalf("acknowledged Finish of %s lost: status %s ready seq %d (want %d)", id, j.Status, j.ReadySeq, rs)
		}
	}
	next := mustInsert(t, s, storetest.NewJob("crash", "after", "a.test:80"))
	if next.Seq <= maxSeq {
		t.Fatalf("Seq %d after the crash, want past %d", next.Seq, maxSeq)
	}
}

// crashBody is the request body of the job with idempotency key key in
// the bodies crash test: 1 KiB, different for every key.
func crashBody(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return []byte(strings.Repeat(hex.EncodeToString(sum[:]), 16))
}

// crashChild writes until it is killed, printing each acknowledged write;
// with bodies, every job carries crashBody of its key.
func crashChild(dir string, bodies bool) {
	s, err := pebble.Open(context.Background(), pebble.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, args...)
		_ = out.Flush()
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute) // the parent kills it long before
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("g%d-%d", g, i)
				j := storetest.NewJob("crash", key, "a.test:80")
				if bodies {
					j.Body = crashBody(key)
				}
				j, _, err := s.Insert(context.Background(), j)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				say("ins %s %s %d\n", key, j.ID, j.Seq)
				if i%3 == 0 {
					rs, err := s.Finish(context.Background(), &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted,
						Attempts: 1, Now: time.Now(), DeliverIn: "hooks.test:80"})
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						return
					}
					say("fin %s %d\n", j.ID, rs)
				}
			}
		}()
	}
	wg.Wait()
}

// TestPurgeInBatches: Purge deletes up to its limit per call, oldest expiry
// first, and leaves live jobs, including one whose expiry moved later.
func TestPurgeInBatches(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	ctx := t.Context()
	const expired = 2500
	var wg sync.WaitGroup
	errs := make(chan error, expired)
	for i := range expired {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := storetest.NewJob("u", fmt.Sprint("e", i), "a.test:80")
			j.ExpiresAt = time.Now().Add(-time.Minute)
			if _, _, err := s.Insert(ctx, j); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	keep := mustInsert(t, s, storetest.NewJob("u", "keep", "a.test:80"))
	revived := storetest.NewJob("u", "revived", "a.test:80")
	revived.ExpiresAt = time.Now().Add(-time.Minute)
	revived = mustInsert(t, s, revived)
	// A retry restarts the expiry clock: the job must not be purged.
	check(t, s.Requeue(ctx, &ports.RequeueParams{ID: revived.ID, Phase: domain.PhaseDispatch, Attempts: 1, Now: time.Now()}))
	size, err := s.SizeBytes(ctx)
	if err != nil || size <= 0 {
		t.Fatalf("SizeBytes = %d, %v", size, err)
	}
	var got []int
	for {
		n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now(), Limit: 1000})
		check(t, err)
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	if fmt.Sprint(got) != "[1000 1000 500 0]" {
		t.Fatalf("purge batches = %v, want [1000 1000 500 0]", got)
	}
	mustGet(t, s, keep.ID)
	if j := mustGet(t, s, revived.ID); j.Status != domain.StatusQueued {
		t.Fatalf("revived job status %s", j.Status)
	}
	if c, _ := s.Counts(ctx); c != (ports.Counts{Queued: 2}) {
		t.Fatalf("Counts after purging = %+v, want 2 queued", c)
	}
	mustInsert(t, s, storetest.NewJob("u", "e7", "a.test:80")) // purged keys are free again
	if n, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now(), Limit: 0}); n != 0 || err != nil {
		t.Fatalf("Purge(limit 0) = %d, %v", n, err)
	}
}

// TestResetStaleInBatches resets many stale jobs across lanes in one call,
// in ReadySeq order, and leaves excluded and recent ones alone.
func TestResetStaleInBatches(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	ctx := t.Context()
	long := time.Now().Add(-10 * time.Minute)
	exclude := map[domain.JobID]bool{}
	var stale []domain.JobID
	for i := range 300 {
		j := mustInsert(t, s, storetest.NewJob("u", fmt.Sprint("s", i), fmt.Sprintf("l%d.test:80", i%3)))
		at := long
		switch {
		case i%10 == 0:
			exclude[j.ID] = true
		case i%10 == 1:
			at = time.Now()
		default:
			stale = append(stale, j.ID)
		}
		check(t, s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: j.ID, Seq: j.Seq, At: at}))
	}
	mustInsert(t, s, storetest.NewJob("flush", "1", "a.test:80")) // the marks are committed
	if c, _ := s.Counts(ctx); c.InFlight != 300 {
		t.Fatalf("Counts = %+v, want 300 in flight", c)
	}
	p := &ports.ResetStaleParams{DispatchedBefore: time.Now().Add(-5 * time.Minute), Exclude: exclude, Now: time.Now()}
	reset, err := s.ResetStale(ctx, p)
	check(t, err)
	if len(reset) != len(stale) {
		t.Fatalf("ResetStale reset %d jobs, want %d", len(reset), len(stale))
	}
	want := map[domain.JobID]bool{}
	for _, id := range stale {
		want[id] = true
	}
	for i, j := range reset {
		if !want[j.ID] || j.Status != domain.StatusQueued || j.ExpiresAt.Before(time.Now().Add(domain.QueuedTTL-time.Minute)) {
			t.Fatalf("reset job %s: status %s expires %v", j.ID, j.Status, j.ExpiresAt)
		}
		if i > 0 && j.ReadySeq <= reset[i-1].ReadySeq {
			t.Fatal("ResetStale result is not in ReadySeq order")
		}
		if got := mustGet(t, s, j.ID); got.Status != domain.StatusQueued {
			t.Fatalf("stored status of reset job %s = %s", j.ID, got.Status)
		}
	}
	if c, _ := s.Counts(ctx); c.InFlight != 60 || c.Queued != int64(len(stale))+1 {
		t.Fatalf("Counts after ResetStale = %+v", c)
	}
	again, err := s.ResetStale(ctx, p)
	if err != nil || len(again) != 0 {
		t.Fatalf("second ResetStale = %d jobs, %v; want none", len(again), err)
	}
	// Ready paging now returns the reset jobs.
	page, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "l2.test:80", Limit: 1000, Now: time.Now()})
	check(t, err)
	if len(page) != 80 {
		t.Fatalf("lane l2 lists %d ready jobs, want 80", len(page))
	}
}

// TestExpiredJobsAreNotWaiting: expired jobs are left out of ListReady,
// Position and Counts.
func TestExpiredJobsAreNotWaiting(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	ctx := t.Context()
	old := storetest.NewJob("u", "old", "a.test:80")
	old.ExpiresAt = time.Now().Add(-time.Second)
	mustInsert(t, s, old)
	live := mustInsert(t, s, storetest.NewJob("u", "live", "a.test:80"))
	page, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Limit: 10, Now: time.Now()})
	if err != nil || len(page) != 1 || page[0].ID != live.ID {
		t.Fatalf("ListReady = %v, %v; want only the live job", page, err)
	}
	if n, _ := s.Position(ctx, "a.test:80", live.ReadySeq); n != 0 {
		t.Fatalf("Position = %d, want 0", n)
	}
	if c, _ := s.Counts(ctx); c.Total() != 1 {
		t.Fatalf("Counts = %+v, want 1", c)
	}
}

// TestLanesThatShareAPrefix: lanes whose names extend one another, or hold
// a NUL byte, stay apart in the ready index.
func TestLanesThatShareAPrefix(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	ctx := t.Context()
	lanes := []string{"a", "a\x00b", "ab", "a|t", ""}
	for i, lane := range lanes {
		for k := range 2 {
			j := storetest.NewJob("u", fmt.Sprint(i, "-", k), "x.test:80")
			j.Queue, j.ReadyQueue = domain.QueueKey(lane), domain.QueueKey(lane)
			mustInsert(t, s, j)
		}
	}
	got, err := s.ReadyQueues(ctx)
	check(t, err)
	sort.Slice(got, func(a, b int) bool { return got[a] < got[b] })
	if fmt.Sprintf("%q", got) != `["a" "a\x00b" "ab" "a|t"]` {
		t.Fatalf("ReadyQueues = %q", got)
	}
	for _, lane := range lanes[:4] {
		page, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: domain.QueueKey(lane), Limit: 10, Now: time.Now()})
		check(t, err)
		if len(page) != 2 || page[0].ReadyQueue != domain.QueueKey(lane) || page[1].ReadyQueue != domain.QueueKey(lane) {
			t.Fatalf("lane %q lists %d jobs", lane, len(page))
		}
		if n, _ := s.Position(ctx, domain.QueueKey(lane), page[1].ReadySeq); n != 1 {
			t.Fatalf("Position in lane %q = %d, want 1", lane, n)
		}
	}
}

// TestClosedStoreFailsEverything: after Close every method returns
// ErrClosed (Pebble itself would panic).
func TestClosedStoreFailsEverything(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := t.Context()
	j := mustInsert(t, s, storetest.NewJob("u", "k", "a.test:80"))
	check(t, s.Close())
	check(t, s.Close())
	calls := map[string]func() error{
		"Insert": func() error { _, _, err := s.Insert(ctx, storetest.NewJob("u", "late", "a.test:80")); return err },
		"Get":    func() error { _, err := s.Get(ctx, j.ID); return err },
		"Lookup": func() error { _, err := s.Lookup(ctx, "u", "k"); return err },
		"Position": func() error {
			_, err := s.Position(ctx, "a.test:80", 5)
			return err
		},
		"Delete":       func() error { return s.Delete(ctx, j.ID) },
		"MarkInFlight": func() error { return s.MarkInFlight(ctx, &ports.MarkInFlightParams{ID: j.ID, At: time.Now()}) },
		"Requeue": func() error {
			return s.Requeue(ctx, &ports.RequeueParams{ID: j.ID, Phase: domain.PhaseDispatch, Now: time.Now()})
		},
		"Finish": func() error {
			_, err := s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusCompleted, Now: time.Now()})
			return err
		},
		"FinishDelivery": func() error { return s.FinishDelivery(ctx, &ports.FinishDeliveryParams{ID: j.ID, Now: time.Now()}) },
		"ListReady": func() error {
			_, err := s.ListReady(ctx, &ports.ListReadyParams{Queue: "a.test:80", Limit: 1, Now: time.Now()})
			return err
		},
		"ReadyQueues":     func() error { _, err := s.ReadyQueues(ctx); return err },
		"RecoverInFlight": func() error { _, err := s.RecoverInFlight(ctx); return err },
		"ResetStale": func() error {
			_, err := s.ResetStale(ctx, &ports.ResetStaleParams{DispatchedBefore: time.Now(), Now: time.Now()})
			return err
		},
		"Purge":  func() error { _, err := s.Purge(ctx, &ports.PurgeParams{Now: time.Now(), Limit: 10}); return err },
		"Counts": func() error { _, err := s.Counts(ctx); return err },
		"Ping":   func() error { return s.Ping(ctx) },
		"ListJobs": func() error {
			_, err := s.ListJobs(ctx, &ports.ListJobsParams{Limit: 1, Now: time.Now()})
			return err
		},
		"CountJobs":     func() error { _, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()}); return err },
		"Retry":         func() error { _, err := s.Retry(ctx, &ports.RetryParams{ID: j.ID, Now: time.Now()}); return err },
		"SaveOperation": func() error { return s.SaveOperation(ctx, &domain.Operation{ID: "op"}) },
		"GetOperation":  func() error { _, err := s.GetOperation(ctx, "op"); return err },
		"Operations":    func() error { _, err := s.Operations(ctx, false); return err },
		"RunBatch": func() error {
			_, err := s.RunBatch(ctx, &ports.RunBatchParams{Op: &domain.Operation{ID: "op"}, Now: time.Now()})
			return err
		},
		"PauseLane":  func() error { return s.PauseLane(ctx, domain.LanePause{Upstream: "http://a.test:80"}) },
		"ResumeLane": func() error { return s.ResumeLane(ctx, "http://a.test:80") },
		"LanePauses": func() error { _, err := s.LanePauses(ctx); return err },
		"SizeBytes":  func() error { _, err := s.SizeBytes(ctx); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, domain.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// TestCloseCommitsPendingWrites: a fire-and-forget write submitted before
// Close is in the store after reopening.
func TestCloseCommitsPendingWrites(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	j := mustInsert(t, s, storetest.NewJob("u", "k", "a.test:80"))
	check(t, s.MarkInFlight(t.Context(), &ports.MarkInFlightParams{ID: j.ID, At: time.Now()}))
	check(t, s.Close())
	s = open(t, dir)
	defer s.Close()
	if got := mustGet(t, s, j.ID); got.Status != domain.StatusInFlight {
		t.Fatalf("status after Close and reopen = %s, want in_flight", got.Status)
	}
	if n, err := s.RecoverInFlight(t.Context()); n != 1 || err != nil {
		t.Fatalf("RecoverInFlight = %d, %v", n, err)
	}
}

func TestOpenRefusals(t *testing.T) {
	if _, err := pebble.Open(t.Context(), pebble.Options{}); err == nil {
		t.Fatal("Open without a directory succeeded")
	}
	// Only one process (or store) may hold the directory.
	dir := t.TempDir()
	s := open(t, dir)
	if other, err := pebble.Open(t.Context(), pebble.Options{Dir: dir}); err == nil {
		other.Close()
		t.Fatal("a second Open of a held directory succeeded")
	}
	check(t, s.Close())
	// A Pebble database that is not a job store is left alone.
	foreign := t.TempDir()
	db, err := cpebble.Open(foreign, &cpebble.Options{Logger: quietLogger{}})
	check(t, err)
	check(t, db.Set([]byte("hello"), []byte("world"), cpebble.Sync))
	check(t, db.Close())
	if s, err := pebble.Open(t.Context(), pebble.Options{Dir: foreign}); err == nil {
		s.Close()
		t.Fatal("Open accepted a foreign Pebble database")
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}

// TestPebbleLogsGoToZap: Pebble's messages (here, WAL replay on reopening)
// reach the zap logger, and nothing is written to stdout, stderr or the
// standard logger.
func TestPebbleLogsGoToZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	var stdlog bytes.Buffer
	log.SetOutput(&stdlog)
	defer log.SetOutput(os.Stderr)
	outR, outW, err := os.Pipe()
	check(t, err)
	errR, errW, err := os.Pipe()
	check(t, err)
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outW, errW
	func() {
		defer func() { os.Stdout, os.Stderr = stdout, stderr }()
		dir := t.TempDir()
		for range 2 {
			s, err := pebble.Open(t.Context(), pebble.Options{Dir: dir, Logger: zap.New(core)})
			check(t, err)
			mustInsert(t, s, storetest.NewJob("u", fmt.Sprint(time.Now().UnixNano()), "a.test:80"))
			check(t, s.Close())
		}
	}()
	outW.Close()
	errW.Close()
	out, _ := io.ReadAll(outR)
	errOut, _ := io.ReadAll(errR)
	if len(out)+len(errOut)+stdlog.Len() > 0 {
		t.Fatalf("written outside zap: stdout %q stderr %q log %q", out, errOut, stdlog.String())
	}
	if logs.Len() == 0 {
		t.Fatal("Pebble logged nothing through zap while reopening a store")
	}
	t.Logf("first pebble message: %q", logs.All()[0].Message)
}
