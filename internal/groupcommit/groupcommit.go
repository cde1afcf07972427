// Package groupcommit is the single-writer loop the durable job stores
// share. Callers hand operations to one goroutine over a channel; the
// goroutine takes every operation waiting (up to a cap), commits them as one
// group — one transaction, one fsync — and answers their callers. Under load
// that turns N fsyncs into one; alone, an operation waits for nothing.
//
// The package owns the gathering only. What an operation is, how a group is
// committed and how callers are answered belong to the store.
package groupcommit

import "runtime"

// Options shape the groups.
type Options struct {
	// MaxBatch caps how many operations share one commit (at least 1).
	MaxBatch int
	// GatherYields is how many times the loop yields the processor, once the
	// channel is empty, to let goroutines that are about to submit do so
	// before it commits. Fuller groups cost fewer commits per operation, for
	// microseconds of latency; 0 commits as soon as the channel is empty.
	GatherYields int
}

// Run commits what arrives on ops in groups until closing is closed; then it
// commits everything already submitted and returns. commit must not keep
// the slice: Run reuses it (after clearing it, so that committed operations
// can be collected).
//
// Callers must stop sending before closing is closed (the stores hold a
// lock for that), so that nothing is sent once Run has returned.
func Run[T any](ops <-chan T, closing <-chan struct{}, o Options, commit func([]T)) {
	if o.MaxBatch < 1 {
		o.MaxBatch = 1
	}
	batch := make([]T, 0, o.MaxBatch)
	flush := func() {
		commit(batch)
		// Forget the committed ops: they must not be committed (and their
		// callers answered) a second time, nor kept alive.
		clear(batch)
		batch = batch[:0]
	}
	for {
		select {
		case first := <-ops:
			batch = gather(append(batch, first), ops, o)
			flush()
		case <-closing:
			// Commit what was submitted before Close, then stop.
			for {
				select {
				case op := <-ops:
					batch = append(batch, op)
					if len(batch) == o.MaxBatch {
						flush()
					}
				default:
					if len(batch) > 0 {
						flush()
					}
					return
				}
			}
		}
	}
}

// gather adds every operation already waiting to batch. While that finds
// more, it yields the processor (up to o.GatherYields times in a row) so
// goroutines about to submit get to do so.
func gather[T any](batch []T, ops <-chan T, o Options) []T {
	for yields := 0; len(batch) < o.MaxBatch; {
		select {
		case op := <-ops:
			batch = append(batch, op)
			continue
		default:
		}
		if yields == o.GatherYields {
			return batch
		}
		yields++
		runtime.Gosched()
	}
	return batch
}
