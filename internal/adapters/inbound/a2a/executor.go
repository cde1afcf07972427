package a2aagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// executor turns a message into a job and the job's life into task events.
type executor struct{ a *Agent }

var _ a2asrv.AgentExecutor = executor{}

// errClosing ends executions and watches when the agent shuts down. The
// tasks' jobs go on; their state is read from the store afterwards.
var errClosing = errors.New("aquifer A2A agent is shutting down")

// Execute enqueues the job the message's data part describes, under the
// task's id, then reports the job's progress until it ends. Bad input and
// admission rejections are errors before any task exists; a duplicate
// (user_id, idempotent_key) is answered with a message naming the task that
// already holds the key.
func (e executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a := e.a
	id, ok := jobIDOf(rc.TaskID)
	if !ok {
		return fmt.Errorf("task id %q is not a UUID: %w", rc.TaskID, a2a.ErrInvalidParams)
	}
	if rc.StoredTask != nil {
		return fmt.Errorf("task %s already has its job; Aquifer tasks take no follow-up messages: %w", rc.TaskID, a2a.ErrInvalidParams)
	}
	req, err := decodeRequest(rc.Message, a.opts.MaxBodyBytes)
	if err != nil {
		a.dropPushConfigs(ctx, rc.TaskID)
		return err
	}
	req.ID = id
	res, err := a.core.Enqueue(ctx, req)
	if err != nil {
		a.dropPushConfigs(ctx, rc.TaskID)
		return a.enqueueError(err)
	}
	if res.Duplicate {
		a.dropPushConfigs(ctx, rc.TaskID)
		return q.Write(ctx, duplicateMessage(rc, res.JobID, res.Status))
	}

	if !a.track(rc.TaskID) {
		return fmt.Errorf("task %s is already being followed: %w", rc.TaskID, a2a.ErrInvalidParams)
	}
	defer a.untrack(rc.TaskID)
	meta := taskMeta{contextID: rc.ContextID, messageID: rc.Message.ID}
	a.meta.put(rc.TaskID, meta)
	j, err := a.core.Get(ctx, id)
	if err != nil {
		// The job is stored; describe it from the request rather than fail a
		// submission that succeeded. The watch below reports its real state.
		a.log.Warn("read back new job failed", zap.String("job_id", string(id)), zap.Error(err))
		j = domain.NewJob(id, req, "", time.Now())
	}
	if err := q.Write(ctx, taskFromJob(j, a2a.TaskStateSubmitted, meta)); err != nil {
		return err
	}
	info := meta.info(rc.TaskID)
	return a.watch(ctx, id, a2a.TaskStateSubmitted, func(state a2a.TaskState, j *domain.Job) error {
		for _, ev := range eventsFor(j, state, info) {
			if err := q.Write(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	})
}

// eventsFor are the events announcing that the task reached state: a status
// update, preceded by the response artifact when the job has one, and final
// when the state is terminal.
func eventsFor(j *domain.Job, state a2a.TaskState, info a2a.TaskInfo) []a2a.Event {
	var evs []a2a.Event
	if state.Terminal() {
		if art := responseArtifact(j); art != nil {
			evs = append(evs, &a2a.TaskArtifactUpdateEvent{TaskID: info.TaskID, ContextID: info.ContextID, Artifact: art, LastChunk: true})
		}
	}
	return append(evs, &a2a.TaskStatusUpdateEvent{TaskID: info.TaskID, ContextID: info.ContextID,
		Status: statusFor(j, state, info), Final: state.Terminal()})
}

// Cancel cancels the task's job if it has not been dispatched yet.
func (e executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a := e.a
	id, ok := jobIDOf(rc.TaskID)
	if !ok {
		return a2a.ErrTaskNotFound
	}
	j, err := a.core.Cancel(ctx, id)
	if err != nil {
		switch domain.CodeOf(err) {
		case domain.CodeNotFound:
			return a2a.ErrTaskNotFound
		case domain.CodeConflict:
			return fmt.Errorf("%s: %w", domain.PublicMessage(err), a2a.ErrTaskNotCancelable)
		}
		a.log.Error("cancel failed", zap.String("job_id", string(id)), zap.Error(err))
		return fmt.Errorf("cancel job %s: %s: %w", id, domain.PublicMessage(err), a2a.ErrInternalError)
	}
	info := a.meta.get(rc.TaskID).info(rc.TaskID)
	if rc.StoredTask != nil {
		info.ContextID = rc.StoredTask.ContextID
	}
	ev := &a2a.TaskStatusUpdateEvent{TaskID: info.TaskID, ContextID: info.ContextID,
		Status: statusFor(j, a2a.TaskStateCanceled, info), Final: true}
	if err := q.Write(ctx, ev); err != nil && !errors.Is(err, eventqueue.ErrQueueClosed) {
		return err
	}
	// A closed queue means the task's live execution already saw the job end
	// and reported it canceled itself.
	return nil
}

// duplicateMessage answers a submission whose (user_id, idempotent_key)
// already has a job: no new task, a pointer to the existing one.
func duplicateMessage(rc *a2asrv.RequestContext, existing domain.JobID, status domain.Status) *a2a.Message {
	tid := taskIDOf(existing)
	msg := a2a.NewMessage(a2a.MessageRoleAgent,
		a2a.TextPart{Text: fmt.Sprintf("Duplicate: this user_id and idempotent_key already belong to task %s (job %s, now %s). "+
			"No new task was created; follow the existing one with tasks/get or tasks/resubscribe.", tid, existing, status)},
		a2a.DataPart{Data: map[string]any{"duplicate": true, "task_id": string(tid), "job_id": string(existing), "status": string(status)}},
	)
	msg.ContextID = rc.ContextID
	return msg
}

// decodeRequest reads the job request from the message's one data part. It
// has the field names of POST /jobs, job options included (traceparent and
// tracestate as fields: A2A has no request headers of its own); text parts
// are ignored. The options' values are checked when the job is enqueued.
func decodeRequest(m *a2a.Message, maxBody int64) (*domain.JobRequest, error) {
	var data map[string]any
	n := 0
	for _, p := range m.Parts {
		switch dp := p.(type) {
		case a2a.DataPart:
			data, n = dp.Data, n+1
		case *a2a.DataPart:
			data, n = dp.Data, n+1
		}
	}
	switch {
	case n == 0:
		return nil, fmt.Errorf(`send one data part shaped like POST /jobs, e.g. {"user_id":"…","idempotent_key":"…","url":"https://…","method":"POST"}: %w`, a2a.ErrInvalidParams)
	case n > 1:
		return nil, fmt.Errorf("send exactly one data part (one job per message), not %d: %w", n, a2a.ErrInvalidParams)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("data part is not JSON: %w", a2a.ErrInvalidParams)
	}
	var in httpkit.JobRequestJSON
	if err := json.Unmarshal(raw, &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("data part: %s: %w", httpkit.TypeErrorMessage(&in, te), a2a.ErrInvalidParams)
		}
		return nil, fmt.Errorf("data part: %v: %w", err, a2a.ErrInvalidParams)
	}
	if maxBody > 0 && int64(len(in.Body)) > maxBody {
		return nil, fmt.Errorf("body is %d bytes, more than the limit of %d bytes: %w", len(in.Body), maxBody, a2a.ErrInvalidParams)
	}
	req, err := in.Request(nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", domain.PublicMessage(err), a2a.ErrInvalidParams)
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", domain.PublicMessage(err), a2a.ErrInvalidParams)
	}
	return req, nil
}

// enqueueError maps a failed Enqueue to an A2A error. Nothing was stored, so
// there is no task.
func (a *Agent) enqueueError(err error) error {
	var rej *domain.RejectedError
	if errors.As(err, &rej) {
		return fmt.Errorf("%s; nothing was stored: retry in %d seconds with the same idempotent_key: %w",
			rej.Error(), int64(math.Ceil(rej.RetryAfter.Seconds())), a2a.ErrServerError)
	}
	switch domain.CodeOf(err) {
	case domain.CodeInvalid, domain.CodeTooLarge:
		return fmt.Errorf("%s: %w", domain.PublicMessage(err), a2a.ErrInvalidParams)
	case domain.CodeUnavailable:
		return fmt.Errorf("%s; nothing was stored: retry shortly with the same idempotent_key: %w", domain.PublicMessage(err), a2a.ErrServerError)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	a.log.Error("enqueue failed", zap.Error(err))
	return fmt.Errorf("internal error: %w", a2a.ErrInternalError)
}

// watch follows job id from task state `from` and calls emit with every
// later state the task reaches, in order, until a terminal one. It listens
// to the job's events; it never polls. A task never goes back to submitted,
// and one that was dispatched passes through working before it ends.
func (a *Agent) watch(ctx context.Context, id domain.JobID, from a2a.TaskState, emit func(a2a.TaskState, *domain.Job) error) error {
	j, sub, err := a.core.Subscribe(ctx, id)
	if err != nil {
		return err
	}
	defer func() { sub.Close() }()
	last := from
	step := func(j *domain.Job, state a2a.TaskState) (bool, error) {
		if state.Terminal() && last == a2a.TaskStateSubmitted && j.Attempts > 0 {
			if err := emit(a2a.TaskStateWorking, j); err != nil {
				return true, err
			}
			last = a2a.TaskStateWorking
		}
		if state != last && state != a2a.TaskStateSubmitted {
			if err := emit(state, j); err != nil {
				return true, err
			}
			last = state
		}
		return last.Terminal(), nil
	}
	if done, err := step(j, stateOf(j)); done || err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.closing:
			return errClosing
		case ev, ok := <-sub.C:
			if !ok {
				// We fell behind and were dropped: reload and resubscribe.
				sub.Close()
				if j, sub, err = a.core.Subscribe(ctx, id); err != nil {
					return err
				}
				if done, err := step(j, stateOf(j)); done || err != nil {
					return err
				}
				continue
			}
			switch {
			case ev.Type == domain.EventDispatching:
				if _, err := step(j, a2a.TaskStateWorking); err != nil {
					return err
				}
			case ev.Type.Terminal():
				// The store holds the result before the event is published.
				if j, err = a.core.Get(ctx, id); err != nil {
					return err
				}
				if done, err := step(j, stateOf(j)); done || err != nil {
					return err
				}
			}
		}
	}
}
