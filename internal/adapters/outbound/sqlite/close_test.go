package sqlite_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/adapters/outbound/sqlite"
	"github.com/aquiferhq/aquifer/internal/storetest"
)

// TestCloseWhileWritesArrive closes the store while inserts are still being
// submitted, right after a commit: Close must return, and every insert that
// reported success must be there after reopening.
func TestCloseWhileWritesArrive(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "aquifer.db")
		s, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Insert(t.Context(), storetest.NewJob("u", "first", "a.test:80")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := map[string]bool{"first": true}
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprint("k", i)
				if _, fresh, err := s.Insert(t.Context(), storetest.NewJob("u", key, "a.test:80")); err == nil && fresh {
					mu.Lock()
					ok[key] = true
					mu.Unlock()
				}
			}()
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Close hung", round)
		}
		wg.Wait()

		r, err := sqlite.Open(t.Context(), sqlite.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		for key := range ok {
			if _, err := r.Lookup(t.Context(), "u", key); err != nil {
				t.Fatalf("round %d: acknowledged insert %s lost: %v", round, key, err)
			}
		}
		r.Close()
	}
}
