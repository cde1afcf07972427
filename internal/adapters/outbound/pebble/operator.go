package pebble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/ports"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

var _ ports.OperatorStore = (*Store)(nil)

// GetOperation implements ports.OperatorStore.
func (s *Store) GetOperation(_ context.Context, id string) (*domain.Operation, error) {
	var op *domain.Operation
	err := s.read(func() error {
		v, err := get(s.db, opKey(id))
		if err != nil || v == nil {
			return err
		}
		op, err = decodeOperation(v)
		return err
	})
	switch {
	case err != nil:
		return nil, wrapRead("get operation", err)
	case op == nil:
		return nil, domain.ErrNotFound
	}
	return op, nil
}

// Operations implements ports.OperatorStore. Operations are few (one per
// bulk action an operator started), so it reads them all and sorts them.
func (s *Store) Operations(_ context.Context, running bool) ([]*domain.Operation, error) {
	var out []*domain.Operation
	err := s.read(func() error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixOp, UpperBound: prefixEnd(prefixOp)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			op, err := decodeOperation(it.Value())
			if err != nil {
				return errors.Join(err, it.Close())
			}
			if !running || op.State == domain.OpRunning {
				out = append(out, op)
			}
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return nil, wrapRead("list operations", err)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].CreatedAt.Equal(out[b].CreatedAt) {
			return out[a].CreatedAt.After(out[b].CreatedAt)
		}
		return out[a].ID > out[b].ID
	})
	return out, nil
}

// LanePauses implements ports.OperatorStore: the p/ keys, which sort in
// upstream order.
func (s *Store) LanePauses(context.Context) ([]domain.LanePause, error) {
	out := []domain.LanePause{}
	err := s.read(func() error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefixPause, UpperBound: prefixEnd(prefixPause)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			p, ok := parsePause(it.Key(), it.Value())
			if !ok {
				return errors.Join(errCorruptPause, it.Close())
			}
			out = append(out, p)
		}
		return errors.Join(it.Error(), it.Close())
	})
	if err != nil {
		return nil, wrapRead("list lane pauses", err)
	}
	return out, nil
}

var errCorruptPause = errors.New("corrupt lane pause")

// operationJSON is a bulk operation as its o/ value holds it: times in Unix
// milliseconds, the filter in the stores' shared encoding
// (storekit.EncodeFilter).
type operationJSON struct {
	ID        string                `json:"id"`
	Kind      domain.OperationKind  `json:"kind"`
	Filter    json.RawMessage       `json:"filter"`
	State     domain.OperationState `json:"state"`
	Cursor    int64                 `json:"cursor"`
	Total     int64                 `json:"total"`
	Processed int64                 `json:"processed"`
	Changed   int64                 `json:"changed"`
	Skipped   int64                 `json:"skipped"`
	Error     string                `json:"error,omitempty"`
	CreatedAt int64                 `json:"created_at"`
	UpdatedAt int64                 `json:"updated_at"`
}

func encodeOperation(op *domain.Operation) ([]byte, error) {
	f, err := storekit.EncodeFilter(op.Filter)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(operationJSON{ID: op.ID, Kind: op.Kind, Filter: json.RawMessage(f), State: op.State,
		Cursor: op.Cursor, Total: op.Total, Processed: op.Processed, Changed: op.Changed, Skipped: op.Skipped,
		Error: op.Error, CreatedAt: storekit.Millis(op.CreatedAt), UpdatedAt: storekit.Millis(op.UpdatedAt)})
	if err != nil {
		return nil, fmt.Errorf("encode operation %s: %w", op.ID, err)
	}
	return b, nil
}

func decodeOperation(v []byte) (*domain.Operation, error) {
	var o operationJSON
	if err := json.Unmarshal(v, &o); err != nil {
		return nil, fmt.Errorf("decode operation: %w", err)
	}
	f, err := storekit.DecodeFilter(string(o.Filter))
	if err != nil {
		return nil, fmt.Errorf("decode operation %s: %w", o.ID, err)
	}
	return &domain.Operation{ID: o.ID, Kind: o.Kind, Filter: f, State: o.State, Cursor: o.Cursor, Total: o.Total,
		Processed: o.Processed, Changed: o.Changed, Skipped: o.Skipped, Error: o.Error,
		CreatedAt: storekit.FromMillis(o.CreatedAt), UpdatedAt: storekit.FromMillis(o.UpdatedAt)}, nil
}

// retried returns a copy of j re-queued as a new attempt cycle, as
// ports.OperatorStore.Retry defines it: queued in its own queue with
// readySeq, no attempts, deferrals, result or delivery, expiring QueuedTTL
// after now, with no NotBefore and no Deadline (an operator's retry runs
// now); id, request, Seq, History and the other options kept. The caller
// has checked j.Retryable().
func retried(j *domain.Job, readySeq int64, now time.Time) *domain.Job {
	c := *j
	c.Status, c.Attempts, c.Deferrals, c.Result, c.Delivery = domain.StatusQueued, 0, 0, nil, nil
	c.ReadyQueue, c.ReadySeq = j.Queue, readySeq
	c.UpdatedAt, c.ExpiresAt = now, now.Add(domain.QueuedTTL)
	c.NotBefore, c.Deadline = time.Time{}, time.Time{}
	return &c
}

// cancelParams are the Finish parameters that cancel queued job j as one
// item of a bulk cancel: failed with reason "canceled", its attempts kept,
// its delivery due in the item's DeliverIn.
func cancelParams(j *domain.Job, it ports.BatchItem, p *ports.RunBatchParams) *ports.FinishParams {
	return &ports.FinishParams{ID: j.ID, Seq: j.Seq, Status: domain.StatusFailed, Attempts: j.Attempts,
		Result: &domain.Result{Reason: domain.ReasonCanceled}, Now: p.Now, DeliverIn: it.DeliverIn, Retention: p.Retention}
}

// pauseValue is the p/ value of a pause: when (Unix ms, varint), then the
// reason's bytes.
func pauseValue(p *domain.LanePause) []byte {
	return append(binary.AppendVarint(nil, storekit.Millis(p.At)), p.Reason...)
}

func parsePause(k, v []byte) (domain.LanePause, bool) {
	at, n := binary.Varint(v)
	if n <= 0 {
		return domain.LanePause{}, false
	}
	return domain.LanePause{Upstream: domain.UpstreamKey(k[len(prefixPause):]), At: storekit.FromMillis(at),
		Reason: string(v[n:])}, true
}

// retry re-queues a finished job as a new attempt cycle (retried)
// with a fresh ReadySeq.
func (s *Store) retry(w *wbatch, p *ports.RetryParams) (storekit.Result, error) {
	j, ref, err := w.load(p.ID)
	if err != nil || j == nil || j.Expired(p.Now) {
		return notFound, err
	}
	if !j.Retryable() {
		return storekit.Result{Err: domain.ErrNotFinished}, nil
	}
	upd := retried(j, s.seq+1, p.Now)
	if err := w.update(j, ref, upd); err != nil {
		return storekit.Result{}, err
	}
	s.seq++
	if err := w.withBody(upd, ref); err != nil {
		w.fail(err) // the retry is written
		return storekit.Result{}, nil
	}
	return storekit.Result{Job: upd}, nil
}

// runBatch applies one batch of a bulk operation and saves the operation's
// new state, with the batch's changed and skipped counts added, in the same
// batch, so both commit together or not at all. It checks the stored
// progress, reads every job and decides what to do with each before it
// writes anything, so a refusal or a failed read leaves the batch untouched.
func (s *Store) runBatch(w *wbatch, p *ports.RunBatchParams) (storekit.Result, error) {
	v, err := get(w.b, opKey(p.Op.ID))
	if err != nil || v == nil {
		return notFound, err
	}
	stored, err := decodeOperation(v)
	if err != nil {
		return storekit.Result{}, err
	}
	if stored.Processed != p.PrevProcessed {
		return storekit.Result{Err: ports.ErrOperationConflict}, nil
	}
	type change struct {
		loaded
		item ports.BatchItem
	}
	var todo []change
	seen := make(map[domain.JobID]bool, len(p.Items))
	for _, it := range p.Items {
		if seen[it.ID] {
			continue // a repeat finds the job moved on, or as it was left
		}
		seen[it.ID] = true
		j, ref, err := w.load(it.ID)
		if err != nil {
			return storekit.Result{}, err
		}
		if j == nil || j.Expired(p.Now) {
			continue
		}
		if (p.Op.Kind == domain.OpKindRetry && j.Retryable()) || (p.Op.Kind == domain.OpKindCancel && j.Status == domain.StatusQueued) {
			todo = append(todo, change{loaded{j, ref}, it})
		}
	}
	saved := *p.Op
	saved.Changed += int64(len(todo))
	saved.Skipped += int64(len(p.Items) - len(todo))
	rec, err := encodeOperation(&saved)
	if err != nil {
		return storekit.Result{}, err
	}
	changed := make([]domain.JobID, 0, len(todo))
	for _, c := range todo {
		if p.Op.Kind == domain.OpKindRetry {
			err = w.update(c.job, c.ref, retried(c.job, s.seq+1, p.Now))
			s.seq++
		} else {
			_, err = s.finish(w, cancelParams(c.job, c.item, p))
		}
		if err != nil {
			w.fail(err) // earlier jobs of the batch are written: fail the group, not half the batch
			return storekit.Result{}, nil
		}
		changed = append(changed, c.job.ID)
	}
	w.set(opKey(p.Op.ID), rec)
	return storekit.Result{IDs: changed}, nil
}
