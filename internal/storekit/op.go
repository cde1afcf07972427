// Package storekit is what the durable job stores (sqlite, pebble, postgres)
// share around their single writer: the vocabulary of write operations, the
// op and result types, submitting an op to the writer and waiting for its
// result, the rule that skips superseded marks, the JobStore methods that
// only build an op and submit it (JobWrites), and the job row of the SQL
// stores. The gathering loop itself is internal/groupcommit.
//
// What a store keeps for itself is what truly differs between engines: how
// it applies a group of ops (one SQL transaction, one Pebble batch, one
// pipelined pgx batch), its reads, and its schema.
package storekit

import (
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
)

// Kind is what an op does.
type Kind int

const (
	OpInsert         Kind = iota // insert-if-absent of Job on its idempotency key
	OpDelete                     // delete job ID
	OpMarkInFlight               // job ID is in flight since At (not waited for)
	OpRequeue                    // Requeue
	OpFinish                     // Finish
	OpFinishDelivery             // Delivery
	OpRecover                    // every in-flight job back to queued (RecoverInFlight), at At
	OpResetStale                 // the stale in-flight Jobs back to queued (Stale)
	OpRecoverLane                // a dead process's in-flight jobs of Upstream back to queued, at At (postgres)
	OpPurge                      // delete the expired jobs found, if still expired at At
	OpDeleteFinished             // delete the finished jobs found, if still finished with Seq at most Seq
	OpProbe                      // a small write to see whether commits succeed (CheckWrites)
	OpInsertBatch                // insert-if-absent of each of Inserts, in order (InsertBatch)
	OpPromote                    // make up to Limit scheduled jobs due at At ready (PromoteDue)

	// The operator's writes (ports.OperatorStore; OperatorWrites submits them).
	OpRetry         // re-queue finished job ID as a new attempt cycle (Retry)
	OpRunBatch      // one batch of a bulk operation, with its progress (Batch)
	OpSaveOperation // store Operation, overwriting one with its id
	OpPauseLane     // store Pause, replacing the upstream's pause
	OpResumeLane    // remove the pause of Upstream
)

// Op is one write waiting for the writer.
type Op struct {
	Kind Kind
	Job  *domain.Job // OpInsert
	// Inserts are the jobs of an OpInsertBatch, inserted in order: a later
	// one whose key an earlier one took is a duplicate of it.
	Inserts []*domain.Job
	Limit   int          // OpPromote: how many jobs at most
	ID      domain.JobID // the job of an op on one job
	// Seq is the job's Seq when the caller knows it (0 if not), for engines
	// that find a row faster by it; for OpDeleteFinished, the highest Seq
	// to delete.
	Seq      int64
	At       time.Time
	Requeue  *ports.RequeueParams
	Finish   *ports.FinishParams
	Delivery *ports.FinishDeliveryParams
	Stale    *ports.ResetStaleParams
	Upstream domain.UpstreamKey // OpRecoverLane, OpResumeLane
	Found                       // OpResetStale, OpPurge, OpDeleteFinished: what a read found

	Retry     *ports.RetryParams    // OpRetry
	Batch     *ports.RunBatchParams // OpRunBatch
	Operation *domain.Operation     // OpSaveOperation
	Pause     *domain.LanePause     // OpPauseLane

	// Encoded is what the store's Config.Encode made of the op on the
	// caller's goroutine, for its commit; nil without an Encode.
	Encoded any

	// done is closed once result is set: nil when nobody waits for the
	// result (Send). A channel of Result would cost the waiter two
	// allocations per op (the channel and, as Result holds pointers, its
	// buffer); an empty channel is one.
	done   chan struct{}
	result Result
}

// Found names the jobs a read found for an op to act on. Each engine names
// them in its own way; the writer re-checks every one, since the read did
// not hold it.
type Found struct {
	Jobs []*domain.Job  // whole jobs (OpResetStale)
	IDs  []domain.JobID // job ids
	Seqs []int64        // SQLite row ids
	Keys [][]byte       // Pebble expiry-index keys
}

func (f *Found) empty() bool {
	return len(f.Jobs) == 0 && len(f.IDs) == 0 && len(f.Seqs) == 0 && len(f.Keys) == 0
}

// Result is what an op's caller is told.
type Result struct {
	Job   *domain.Job           // OpInsert: the job stored, or the live one holding its key
	Fresh bool                  // OpInsert: Job was inserted by this op
	N     int64                 // how many jobs changed; OpFinish: the ready_seq of a delivery made due
	Jobs  []*domain.Job         // OpPromote: the jobs made ready, in order
	IDs   []domain.JobID        // OpRunBatch: the jobs it changed
	Batch []ports.InsertOutcome // OpInsertBatch: one per job of Inserts
	Err   error
}

// Await makes o an op whose result is awaited, for code that commits a
// group itself rather than through Submit (tests); Result then returns it
// once Answer has run.
func (o *Op) Await() { o.done = make(chan struct{}) }

// Result waits for the result of an op made with Await.
func (o *Op) Result() Result {
	<-o.done
	return o.result
}

// Answer tells each caller waiting in group its result: err for every op if
// the group failed, otherwise its own.
func Answer(group []*Op, results []Result, err error) {
	for i, o := range group {
		if o.done == nil {
			continue
		}
		if err != nil {
			o.result = Result{Err: err}
		} else {
			o.result = results[i]
		}
		close(o.done) // the waiter reads result after this
	}
}

// Superseded finds the OpMarkInFlight ops of group whose job is finished
// later in the same group: the in-flight state would never be visible, so
// writing it is wasted work. An engine skips them; their result is empty.
func Superseded(group []*Op) map[int]bool {
	var marks map[domain.JobID]int
	var out map[int]bool
	for i, o := range group {
		switch o.Kind {
		case OpMarkInFlight:
			if marks == nil {
				marks = make(map[domain.JobID]int)
			}
			marks[o.ID] = i
		case OpFinish:
			if j, ok := marks[o.ID]; ok {
				if out == nil {
					out = make(map[int]bool)
				}
				out[j] = true
			}
		}
	}
	return out
}
