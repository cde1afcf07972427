package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// tinyDisk mounts a 4 MiB tmpfs for the test and unmounts it at the end.
// Mounting needs root (CI runs as root); elsewhere the test is skipped,
// saying why.
func tinyDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill up (needs root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill takes every free byte of the filesystem holding dir with a filler
// file, and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	for n := len(chunk) / 2; n > 0; n /= 2 { // the last scraps
		_, _ = f.Write(chunk[:n])
	}
	return name
}

// SQLite on a disk that fills up: writes fail as unavailable and
// CheckWrites says so, reads go on, and once space is freed writes succeed
// again with no reopen and nothing acknowledged lost.
func TestDiskFullContract(t *testing.T) {
	storetest.ExerciseWriteFaults(t, func(t *testing.T) storetest.Faulty {
		dir := tinyDisk(t)
		s, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(dir, "aquifer.db")})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		var filler string
		return storetest.Faulty{Store: s,
			Break: func(t *testing.T) { filler = fill(t, dir) },
			Heal: func(t *testing.T) {
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
			}}
	})
}

// After the disk filled up and was freed, the store reopened from its file
// holds every acknowledged job.
func TestDiskFullLosesNothingAcknowledged(t *testing.T) {
	dir := tinyDisk(t)
	path := filepath.Join(dir, "aquifer.db")
	s, err := sqlite.Open(t.Context(), sqlite.Options{Path: path, WriteProbeAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var ids []domain.JobID
	for i := range 10 {
		stored, _, err := s.Insert(t.Context(), storetest.NewJob("u", fmt.Sprintf("before%d", i), "a.test:80"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, stored.ID)
	}
	filler := fill(t, dir)
	var failed error
	for i := 0; i < 400 && failed == nil; i++ {
		j := storetest.NewJob("u", fmt.Sprintf("k%d", i), "a.test:80")
		j.Body = make([]byte, 64<<10)
		stored, _, err := s.Insert(t.Context(), j)
		if err != nil {
			failed = err
			continue
		}
		ids = append(ids, stored.ID)
	}
	if failed == nil || !strings.Contains(failed.Error(), "full") {
		t.Fatalf("inserts on a full disk: %v, want SQLite's \"database or disk is full\"", failed)
	}
	if err := s.CheckWrites(t.Context()); err == nil || !strings.Contains(err.Error(), "full") {
		t.Logf("CheckWrites on the full disk: %v", err) // a small probe may still fit in the WAL's old frames
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Insert(t.Context(), storetest.NewJob("u", "after", "a.test:80")); err != nil {
		t.Fatalf("insert after space was freed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(t.Context(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range ids {
		if _, err := s.Get(t.Context(), id); err != nil {
			t.Fatalf("acknowledged job %s lost: %v", id, err)
		}
	}
	t.Logf("%d jobs acknowledged; all kept (the insert that failed: %v)", len(ids), failed)
}
