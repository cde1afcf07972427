package sqlite

import (
	"github.com/aquiferhq/aquifer/internal/domain"
	"github.com/aquiferhq/aquifer/internal/storekit"
)

// encodedOp is what encode makes of an op for the writer: the values its
// statements bind that take work to compute (JSON, a parsed URL). Made on
// the caller's goroutine (storekit.Config.Encode), they cost the single
// writer nothing.
type encodedOp struct {
	job     encodedJob   // OpInsert
	batch   []encodedJob // OpInsertBatch: one a job, in order
	history any          // OpFinish, OpRequeue of a dispatch: historyArg
}

// encodedJob is what an insert binds besides the job's own fields.
type encodedJob struct {
	headers, history, options string // storekit's JSON
	derived
}

// encode is the store's storekit.Config.Encode.
func encode(o *storekit.Op) error {
	e := &encodedOp{}
	switch o.Kind {
	case storekit.OpInsert:
		if err := encodeJob(&e.job, o.Job); err != nil {
			return err
		}
	case storekit.OpInsertBatch:
		e.batch = make([]encodedJob, len(o.Inserts))
		for i, j := range o.Inserts {
			if err := encodeJob(&e.batch[i], j); err != nil {
				return err
			}
		}
	case storekit.OpFinish:
		var err error
		if e.history, err = historyArg(o.Finish.History); err != nil {
			return err
		}
	case storekit.OpRequeue:
		if o.Requeue.Phase != domain.PhaseDispatch {
			return nil
		}
		var err error
		if e.history, err = historyArg(o.Requeue.History); err != nil {
			return err
		}
	default:
		return nil
	}
	o.Encoded = e
	return nil
}

func encodeJob(e *encodedJob, j *domain.Job) error {
	var err error
	if e.headers, err = storekit.EncodeHeaders(j.Headers); err != nil {
		return err
	}
	if e.history, err = storekit.EncodeHistory(j.History); err != nil {
		return err
	}
	if e.options, err = storekit.EncodeOptions(&j.JobOptions); err != nil {
		return err
	}
	e.derived = derive(j.Queue, j.UserID, j.URL)
	return nil
}

// encoded returns o's encodedOp, encoding it now if it was not (an op
// always goes through Send, which encodes it; this keeps the writer right
// without that).
func encoded(o *storekit.Op) (*encodedOp, error) {
	if e, ok := o.Encoded.(*encodedOp); ok {
		return e, nil
	}
	if err := encode(o); err != nil {
		return nil, err
	}
	e, _ := o.Encoded.(*encodedOp)
	return e, nil
}

// historyArg is the argument of "history = coalesce(?, history)": NULL keeps
// the stored history (h is nil), anything else replaces it.
func historyArg(h []domain.Attempt) (any, error) {
	if h == nil {
		return nil, nil
	}
	return storekit.EncodeHistory(h)
}
