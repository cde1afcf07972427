package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKill9WhileJobsAreScheduledLosesNone schedules jobs a few seconds
// ahead, kills aquiferd with SIGKILL before any is due, restarts it on the
// same storage and checks that every job reaches the target once, never
// before its not_before and close after it — on every backend.
func TestKill9WhileJobsAreScheduledLosesNone(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "pebble", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			killScheduled(t, storeEnv(t, backend))
		})
	}
}

func killScheduled(t *testing.T, storeEnv []string) {
	const n = 300
	var mu sync.Mutex
	arrived := map[string][]time.Time{} // job key → arrivals
	due := map[string]time.Time{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		mu.Lock()
		k := r.Header.Get("X-Job-Key")
		arrived[k] = append(arrived[k], at)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)
	env := append([]string{"CONFIG_PATH=" + paceConfig(t, pace{url: target.URL, rps: 5000, maxConcurrent: 32})}, storeEnv...)
	d := startDaemon(t, env)

	// Two due times, far enough ahead for the kill and the restart.
	t0 := time.Now()
	for i := range n {
		at := t0.Add(6 * time.Second)
		if i%2 == 1 {
			at = t0.Add(8 * time.Second)
		}
		due[fmt.Sprint("s", i)] = time.UnixMilli(at.UnixMilli())
	}
	ids := submitJobs(t, d.url, n, 16, func(i int) string {
		k := fmt.Sprint("s", i)
		return fmt.Sprintf(`{"user_id":"e2e","idempotent_key":%q,"url":%q,"method":"POST","headers":{"X-Job-Key":%q},`+
			`"not_before":%s,"priority":%q}`, k, target.URL+"/due", k, strconv.FormatInt(due[k].UnixMilli(), 10),
			[]string{"high", "normal", "low"}[i%3])
	})
	for i, id := range ids {
		if id == "" {
			t.Fatalf("job %d not accepted", i)
		}
	}
	if time.Since(t0) > 4*time.Second {
		t.Fatalf("submitting took %v: too slow for the test's schedule", time.Since(t0))
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	mu.Lock()
	early := len(arrived)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d jobs reached the target before they were due", early)
	}
	startDaemon(t, env)

	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		got := len(arrived)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart only %d of %d scheduled jobs reached the target", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a second delivery would show now
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	for k, ats := range arrived {
		if len(ats) != 1 {
			t.Errorf("job %s reached the target %d times", k, len(ats))
		}
		late := ats[0].Sub(due[k])
		if late < 0 {
			t.Errorf("job %s arrived %v before its not_before", k, -late)
		}
		worst = max(worst, late)
	}
	// On time: within a second of the due time (the machine is shared; the
	// due-time benchmark measures the real accuracy).
	if worst > time.Second {
		t.Errorf("the latest job arrived %v after its not_before", worst)
	}
	t.Logf("%d scheduled jobs survived the kill; the latest arrived %v after its due time", n, worst)
}
