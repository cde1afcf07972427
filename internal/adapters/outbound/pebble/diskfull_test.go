package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// fullFS is the real filesystem, except that while full is set every write
// and sync to a file fails with ENOSPC, as on a full disk. Reads still work.
type fullFS struct {
	vfs.FS
	full *atomic.Bool
}

func enospc(op, name string) error { return &os.PathError{Op: op, Path: name, Err: syscall.ENOSPC} }

func (f fullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.full.Load() {
		return nil, enospc("create", name)
	}
	file, err := f.FS.Create(name, c)
	return f.wrap(file, name), err
}

func (f fullFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.wrap(file, name), err
}

func (f fullFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.full.Load() {
		return nil, enospc("reuse", newname)
	}
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	return f.wrap(file, newname), err
}

func (f fullFS) wrap(file vfs.File, name string) vfs.File {
	if file == nil {
		return nil
	}
	return fullFile{File: file, name: name, full: f.full}
}

type fullFile struct {
	vfs.File
	name string
	full *atomic.Bool
}

func (f fullFile) Write(p []byte) (int, error) {
	if f.full.Load() {
		return 0, enospc("write", f.name)
	}
	return f.File.Write(p)
}

func (f fullFile) WriteAt(p []byte, off int64) (int, error) {
	if f.full.Load() {
		return 0, enospc("write", f.name)
	}
	return f.File.WriteAt(p, off)
}

func (f fullFile) Sync() error {
	if f.full.Load() {
		return enospc("sync", f.name)
	}
	return f.File.Sync()
}

func (f fullFile) SyncData() error {
	if f.full.Load() {
		return enospc("sync", f.name)
	}
	return f.File.SyncData()
}

func (f fullFile) SyncTo(n int64) (bool, error) {
	if f.full.Load() {
		return false, enospc("sync", f.name)
	}
	return f.File.SyncTo(n)
}

func (f fullFile) Preallocate(off, n int64) error {
	if f.full.Load() {
		return enospc("fallocate", f.name)
	}
	return f.File.Preallocate(off, n)
}

func openFull(t *testing.T, dir string, full *atomic.Bool) *Store {
	t.Helper()
	s, err := Open(t.Context(), Options{Dir: dir, Logger: zaptest.NewLogger(t), WriteProbeAfter: 20 * time.Millisecond,
		fs: fullFS{FS: vfs.Default, full: full}})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// On a full disk writes fail with an unavailable error, reads go on,
// CheckWrites says why; once space is freed the store reopens itself and
// takes writes again, with every acknowledged job still there — and none of
// it needs a restart, nor kills the process (Pebble calls Logger.Fatalf on
// the failed commit).
func TestDiskFullFailsWritesThenRecovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var full atomic.Bool
	s := openFull(t, dir, &full)
	defer s.Close()

	// Every other job has a body long enough for a key of its own.
	var acked []*domain.Job
	for i := range 20 {
		j := storetest.NewJob("u", fmt.Sprintf("before%d", i), "a.test:80")
		if i%2 == 0 {
			j.Body = bytes.Repeat([]byte("body "), 200)
		}
		j, fresh, err := s.Insert(t.Context(), j)
		if err != nil || !fresh {
			t.Fatalf("insert: %v", err)
		}
		acked = append(acked, j)
	}
	if _, err := s.Finish(t.Context(), &ports.FinishParams{ID: acked[0].ID, Seq: acked[0].Seq, Status: domain.StatusCompleted,
		Attempts: 1, Result: &domain.Result{ResponseStatus: 200}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckWrites(t.Context()); err != nil {
		t.Fatalf("CheckWrites on a healthy store: %v", err)
	}

	full.Store(true)
	for i := range 3 {
		j := storetest.NewJob("u", fmt.Sprintf("full%d", i), "a.test:80")
		j.Body = bytes.Repeat([]byte("lost "), 200)
		_, _, err := s.Insert(t.Context(), j)
		if domain.CodeOf(err) != domain.CodeUnavailable || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("insert on a full disk: %v, want an unavailable error saying no space left on device", err)
		}
		err = s.CheckWrites(t.Context())
		if err == nil || !strings.Contains(err.Error(), "writes failing since") || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("CheckWrites on a full disk: %v", err)
		}
		// The failed write is not readable: a retry of it must not be
		// answered "duplicate" by a job that is durable nowhere.
		if _, err := s.Lookup(t.Context(), "u", fmt.Sprintf("full%d", i)); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("a write that failed on the full disk is readable: %v", err)
		}
		if j, err := s.Get(t.Context(), acked[1].ID); err != nil || j.ID != acked[1].ID {
			t.Fatalf("read on a full disk: %v", err)
		}
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("ping on a full disk: %v", err)
		}
		time.Sleep(reopenEvery + 10*time.Millisecond) // the next write tries to reopen, and cannot yet
	}

	full.Store(false) // space freed
	time.Sleep(reopenEvery + 10*time.Millisecond)
	after, fresh, err := s.Insert(t.Context(), storetest.NewJob("u", "after", "a.test:80"))
	if err != nil || !fresh {
		t.Fatalf("insert after space was freed: %v", err)
	}
	if err := s.CheckWrites(t.Context()); err != nil {
		t.Fatalf("CheckWrites after recovery: %v", err)
	}
	for _, j := range acked {
		if after.Seq <= j.Seq {
			t.Fatalf("seq went back: new job %d after acknowledged %d", after.Seq, j.Seq)
		}
	}
	if _, err := s.Finish(t.Context(), &ports.FinishParams{ID: acked[1].ID, Seq: acked[1].Seq, Status: domain.StatusCompleted,
		Attempts: 1, Result: &domain.Result{ResponseStatus: 200}, Now: time.Now()}); err != nil {
		t.Fatalf("finish after recovery: %v", err)
	}
	check := func(s *Store) {
		t.Helper()
		for i, a := range acked {
			j, err := s.Get(t.Context(), a.ID)
			if err != nil {
				t.Fatalf("acknowledged job %d lost: %v", i, err)
			}
			if want := i < 2; j.Status.Terminal() != want {
				t.Fatalf("acknowledged job %d is %s", i, j.Status)
			}
			if !bytes.Equal(j.Body, a.Body) {
				t.Fatalf("acknowledged job %d has body %q, want %q", i, j.Body, a.Body)
			}
		}
		// No body without its record: the failed inserts wrote neither.
		checkIndexes(t, s)
		if _, err := s.Get(t.Context(), after.ID); err != nil {
			t.Fatalf("job written after recovery lost: %v", err)
		}
		for i := range 3 {
			if _, err := s.Lookup(t.Context(), "u", fmt.Sprintf("full%d", i)); !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("a write that failed on the full disk exists: %v", err)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatalf("close after recovery: %v", err)
	}
	s2, err := Open(t.Context(), Options{Dir: dir, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("open again: %v", err)
	}
	defer s2.Close()
	check(s2)
}

// With no traffic, CheckWrites probes: a disk that filled up while the
// store was idle shows, and once space is freed the probe reopens the store.
func TestIdleProbeSeesAFullDisk(t *testing.T) {
	t.Parallel()
	var full atomic.Bool
	s := openFull(t, t.TempDir(), &full)
	defer s.Close()
	j, _, err := s.Insert(t.Context(), storetest.NewJob("u", "k", "a.test:80"))
	if err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	time.Sleep(30 * time.Millisecond) // idle past WriteProbeAfter
	if err := s.CheckWrites(t.Context()); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("CheckWrites on an idle store whose disk filled up: %v", err)
	}
	full.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for s.CheckWrites(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the idle store did not recover: %v", s.CheckWrites(t.Context()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.Get(t.Context(), j.ID); err != nil {
		t.Fatalf("acknowledged job after recovery: %v", err)
	}
}

func TestDiskFullContract(t *testing.T) {
	storetest.ExerciseWriteFaults(t, func(t *testing.T) storetest.Faulty {
		full := new(atomic.Bool)
		s, err := Open(t.Context(), Options{Dir: t.TempDir(), Logger: zaptest.NewLogger(t), fs: fullFS{FS: vfs.Default, full: full}})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Faulty{Store: s, Break: func(*testing.T) { full.Store(true) }, Heal: func(*testing.T) { full.Store(false) }}
	})
}

// A bulk batch whose commit fails on a full disk changes no job and leaves
// the operation's progress as it was: after space is freed the same batch
// runs, once.
func TestRunBatchOnAFullDiskChangesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var full atomic.Bool
	s := openFull(t, dir, &full)
	defer s.Close()
	ctx := t.Context()
	var items []ports.BatchItem
	for i := range 5 {
		j, _, err := s.Insert(ctx, storetest.NewJob("u", fmt.Sprint(i), "a.test:80"))
		if err == nil {
			_, err = s.Finish(ctx, &ports.FinishParams{ID: j.ID, Status: domain.StatusFailed, Attempts: 1,
				Result: &domain.Result{Reason: "x"}, Now: time.Now()})
		}
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, ports.BatchItem{ID: j.ID, Seq: j.Seq})
	}
	op := &domain.Operation{ID: "op", Kind: domain.OpKindRetry, State: domain.OpRunning, Cursor: 1 << 40,
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := s.SaveOperation(ctx, op); err != nil {
		t.Fatal(err)
	}
	next := *op
	next.Processed = 5
	batch := &ports.RunBatchParams{Op: &next, Items: items, Now: time.Now()}
	full.Store(true)
	if _, err := s.RunBatch(ctx, batch); domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("RunBatch on a full disk = %v, want unavailable", err)
	}
	unchanged := func() {
		t.Helper()
		for _, it := range items {
			if j, err := s.Get(ctx, it.ID); err != nil || j.Status != domain.StatusFailed {
				t.Fatalf("job after a failed batch: %+v, %v", j, err)
			}
		}
		if got, err := s.GetOperation(ctx, "op"); err != nil || got.Processed != 0 || got.Changed != 0 {
			t.Fatalf("operation after a failed batch: %+v, %v", got, err)
		}
		c, err := s.CountJobs(ctx, &ports.CountJobsParams{Now: time.Now()})
		if err != nil || c[domain.StatusFailed] != 5 || len(c) != 1 {
			t.Fatalf("counts after a failed batch: %v, %v", c, err)
		}
	}
	unchanged()
	full.Store(false)
	time.Sleep(reopenEvery + 10*time.Millisecond)
	unchanged() // still, after the reopen from disk
	changed, err := s.RunBatch(ctx, batch)
	if err != nil || len(changed) != 5 {
		t.Fatalf("RunBatch once space is freed = %v, %v", changed, err)
	}
	if got, err := s.GetOperation(ctx, "op"); err != nil || got.Processed != 5 || got.Changed != 5 {
		t.Fatalf("operation after the batch: %+v, %v", got, err)
	}
	if _, err := s.RunBatch(ctx, batch); !errors.Is(err, ports.ErrOperationConflict) {
		t.Fatalf("the same batch again = %v, want ErrOperationConflict", err)
	}
	checkIndexes(t, s)
}
