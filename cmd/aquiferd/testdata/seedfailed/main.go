// Command seedfailed writes failed jobs into a new SQLite job store, as
// aquiferd would have left them after a destination outage. The bulk-retry
// end-to-end test builds and runs it (outside the race detector, which
// makes seeding 100,000 jobs in the test process itself take minutes).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

func main() {
	path := flag.String("db", "", "SQLite database file to create")
	n := flag.Int("n", 1000, "jobs to write")
	url := flag.String("url", "", "the jobs' URL")
	flag.Parse()
	if err := seed(*path, *n, *url); err != nil {
		fmt.Fprintln(os.Stderr, "seedfailed:", err)
		os.Exit(1)
	}
}

func seed(path string, n int, url string) error {
	ctx := context.Background()
	upstream, ok := domain.UpstreamOf(url)
	if !ok {
		return fmt.Errorf("bad url %q", url)
	}
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path, Sync: sqlite.SyncNormal})
	if err != nil {
		return err
	}
	ids := domain.NewIDGenerator(nil)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int, 1024)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				now := time.Now()
				key := fmt.Sprint("k", i)
				j := domain.NewJob(ids.New(), &domain.JobRequest{UserID: "ops", IdempotentKey: key, URL: url, Method: "POST",
					Headers: map[string]string{"X-Job-Key": key}, Body: "{}"}, domain.SharedQueue(upstream), now)
				stored, _, err := st.Insert(ctx, j)
				if err == nil {
					_, err = st.Finish(ctx, &ports.FinishParams{ID: stored.ID, Seq: stored.Seq, Status: domain.StatusFailed,
						Attempts: 5, Result: &domain.Result{Reason: "dial tcp 127.0.0.1:9: connect: connection refused"}, Now: now})
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := st.Close(); err != nil && first == nil {
		first = err
	}
	return first
}
