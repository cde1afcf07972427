package a2aagent

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// requestHandler wraps the SDK's handler where Aquifer's tasks differ from
// a chat agent's: a task takes no follow-up messages, resubscription follows
// the job (so it works for any task, also after a restart), and push configs
// can only be attached to tasks that exist.
type requestHandler struct {
	a    *Agent
	next a2asrv.RequestHandler
}

var _ a2asrv.RequestHandler = (*requestHandler)(nil)

func (h *requestHandler) OnGetTask(ctx context.Context, q *a2a.TaskQueryParams) (*a2a.Task, error) {
	return h.next.OnGetTask(ctx, q)
}

func (h *requestHandler) OnCancelTask(ctx context.Context, p *a2a.TaskIDParams) (*a2a.Task, error) {
	if p == nil || p.ID == "" {
		return nil, fmt.Errorf("task id is required: %w", a2a.ErrInvalidParams)
	}
	return h.next.OnCancelTask(ctx, p)
}

func (h *requestHandler) OnSendMessage(ctx context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	if err := checkNewMessage(p); err != nil {
		return nil, err
	}
	return h.next.OnSendMessage(ctx, p)
}

func (h *requestHandler) OnSendMessageStream(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	if err := checkNewMessage(p); err != nil {
		return func(yield func(a2a.Event, error) bool) { yield(nil, err) }
	}
	return h.next.OnSendMessageStream(ctx, p)
}

// checkNewMessage refuses messages addressed to an existing task: each
// message submits one job.
func checkNewMessage(p *a2a.MessageSendParams) error {
	if p == nil || p.Message == nil {
		return fmt.Errorf("message is required: %w", a2a.ErrInvalidParams)
	}
	if p.Message.TaskID != "" {
		return fmt.Errorf("Aquifer tasks take no follow-up messages: each message without a taskId submits one job; "+
			"follow task %s with tasks/get or tasks/resubscribe: %w", p.Message.TaskID, a2a.ErrInvalidParams)
	}
	return nil
}

// OnResubscribeToTask streams the task as it is now, then every later state
// until it ends, from its job's events.
func (h *requestHandler) OnResubscribeToTask(ctx context.Context, p *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if p == nil {
			yield(nil, fmt.Errorf("task id is required: %w", a2a.ErrInvalidParams))
			return
		}
		id, ok := jobIDOf(p.ID)
		if !ok {
			yield(nil, a2a.ErrTaskNotFound)
			return
		}
		a := h.a
		j, err := a.core.Get(ctx, id)
		if err != nil {
			yield(nil, taskReadError(err))
			return
		}
		meta := a.meta.get(p.ID)
		state := stateOf(j)
		if !yield(taskFromJob(j, state, meta), nil) || state.Terminal() {
			return
		}
		info := meta.info(p.ID)
		errStop := errors.New("subscriber left")
		err = a.watch(ctx, id, state, func(state a2a.TaskState, j *domain.Job) error {
			for _, ev := range eventsFor(j, state, info) {
				if !yield(ev, nil) {
					return errStop
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) && ctx.Err() == nil {
			yield(nil, err)
		}
	}
}

func (h *requestHandler) OnGetTaskPushConfig(ctx context.Context, p *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	if err := h.taskExists(ctx, p.TaskID); err != nil {
		return nil, err
	}
	return h.next.OnGetTaskPushConfig(ctx, p)
}

func (h *requestHandler) OnListTaskPushConfig(ctx context.Context, p *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	if err := h.taskExists(ctx, p.TaskID); err != nil {
		return nil, err
	}
	return h.next.OnListTaskPushConfig(ctx, p)
}

// OnSetTaskPushConfig attaches a config to an existing task; if no live
// execution follows the task (it was submitted before a restart), a watcher
// starts so the config gets the task's next states.
func (h *requestHandler) OnSetTaskPushConfig(ctx context.Context, p *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	if p == nil {
		return nil, fmt.Errorf("push notification config is required: %w", a2a.ErrInvalidParams)
	}
	if err := h.taskExists(ctx, p.TaskID); err != nil {
		return nil, err
	}
	saved, err := h.next.OnSetTaskPushConfig(ctx, p)
	if err != nil {
		return nil, err
	}
	if id, _ := jobIDOf(p.TaskID); id != "" {
		if j, err := h.a.core.Get(ctx, id); err == nil && !j.Status.Terminal() {
			h.a.startPushWatch(p.TaskID)
		}
	}
	return saved, nil
}

func (h *requestHandler) OnDeleteTaskPushConfig(ctx context.Context, p *a2a.DeleteTaskPushConfigParams) error {
	if err := h.taskExists(ctx, p.TaskID); err != nil {
		return err
	}
	return h.next.OnDeleteTaskPushConfig(ctx, p)
}

func (h *requestHandler) OnGetExtendedAgentCard(ctx context.Context) (*a2a.AgentCard, error) {
	return h.next.OnGetExtendedAgentCard(ctx)
}

func (h *requestHandler) taskExists(ctx context.Context, tid a2a.TaskID) error {
	id, ok := jobIDOf(tid)
	if !ok {
		return a2a.ErrTaskNotFound
	}
	if _, err := h.a.core.Get(ctx, id); err != nil {
		return taskReadError(err)
	}
	return nil
}

func taskReadError(err error) error {
	if domain.CodeOf(err) == domain.CodeNotFound {
		return a2a.ErrTaskNotFound
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%s: %w", domain.PublicMessage(err), a2a.ErrInternalError)
}
