package a2aagent

import (
	"fmt"
	"sync"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// A task is a view of its job. stateOf, statusFor, responseArtifact and
// taskFromJob are the one mapping from job to task, used alike by live
// executions, resubscriptions, push notifications and tasks read back after
// a restart, so they all agree.

// stateOf maps a job to its task state: submitted while it waits for its
// first attempt, working from the first attempt until it ends, then
// completed, failed or (cancelled before dispatch) canceled.
func stateOf(j *domain.Job) a2a.TaskState {
	switch {
	case j.Canceled():
		return a2a.TaskStateCanceled
	case j.Status == domain.StatusCompleted:
		return a2a.TaskStateCompleted
	case j.Status == domain.StatusFailed:
		return a2a.TaskStateFailed
	case j.Status == domain.StatusInFlight || j.Attempts > 0:
		return a2a.TaskStateWorking
	default:
		return a2a.TaskStateSubmitted
	}
}

// taskMeta is what a task has beyond its job: the A2A context id and the id
// of the message that created it. It is kept in memory only; a task read
// after a restart has its task id as context id.
type taskMeta struct {
	contextID string
	messageID string
}

func (m taskMeta) info(tid a2a.TaskID) a2a.TaskInfo {
	ctx := m.contextID
	if ctx == "" {
		ctx = string(tid)
	}
	return a2a.TaskInfo{TaskID: tid, ContextID: ctx}
}

// taskFromJob builds the task of job j in the given state.
func taskFromJob(j *domain.Job, state a2a.TaskState, meta taskMeta) *a2a.Task {
	tid := taskIDOf(j.ID)
	info := meta.info(tid)
	t := &a2a.Task{
		ID:        tid,
		ContextID: info.ContextID,
		Status:    statusFor(j, state, info),
		History:   []*a2a.Message{requestMessage(j, info, meta.messageID)},
		Metadata:  map[string]any{"job_id": string(j.ID)},
	}
	// As live, earlier statuses' messages move into the history.
	for _, earlier := range pathTo(j, state) {
		t.History = append(t.History, statusFor(j, earlier, info).Message)
	}
	if state.Terminal() {
		if art := responseArtifact(j); art != nil {
			t.Artifacts = []*a2a.Artifact{art}
		}
	}
	return t
}

// pathTo lists the states a task passed through before state: submitted,
// then working if the job was dispatched.
func pathTo(j *domain.Job, state a2a.TaskState) []a2a.TaskState {
	switch {
	case state == a2a.TaskStateSubmitted:
		return nil
	case state == a2a.TaskStateWorking || j.Attempts == 0:
		return []a2a.TaskState{a2a.TaskStateSubmitted}
	default:
		return []a2a.TaskState{a2a.TaskStateSubmitted, a2a.TaskStateWorking}
	}
}

// statusFor is the task status for state, with an agent message explaining
// it. Message ids derive from the job and state, so a status rebuilt from the
// store equals the one sent live.
func statusFor(j *domain.Job, state a2a.TaskState, info a2a.TaskInfo) a2a.TaskStatus {
	ts := j.UpdatedAt
	var parts []a2a.Part
	switch state {
	case a2a.TaskStateSubmitted:
		parts = append(parts, a2a.TextPart{Text: fmt.Sprintf("Job %s is stored and queued; Aquifer sends it to %s at the pace that destination allows.", j.ID, target(j))})
	case a2a.TaskStateWorking:
		parts = append(parts, a2a.TextPart{Text: fmt.Sprintf("Aquifer is sending job %s to %s, retrying transient failures.", j.ID, target(j))})
	case a2a.TaskStateCompleted:
		status := 0
		if j.Result != nil {
			status = j.Result.ResponseStatus
		}
		parts = append(parts, a2a.TextPart{Text: fmt.Sprintf("The upstream answered HTTP %d; the response is the task's artifact.", status)})
	case a2a.TaskStateCanceled:
		parts = append(parts, a2a.TextPart{Text: fmt.Sprintf("Job %s was canceled before it was sent.", j.ID)})
	case a2a.TaskStateFailed:
		reason := "unknown"
		if j.Result != nil && j.Result.Reason != "" {
			reason = j.Result.Reason
		}
		parts = append(parts, a2a.TextPart{Text: fmt.Sprintf("Job %s failed: %s.", j.ID, reason)},
			a2a.DataPart{Data: failureData(j, reason)})
	}
	msg := &a2a.Message{
		ID: string(j.ID) + "-" + string(state), Role: a2a.MessageRoleAgent,
		TaskID: info.TaskID, ContextID: info.ContextID, Parts: parts,
	}
	return a2a.TaskStatus{State: state, Message: msg, Timestamp: &ts}
}

func target(j *domain.Job) string {
	if j.PoolID != "" {
		return "pool " + j.PoolID
	}
	return string(j.Upstream())
}

const responseArtifactID = a2a.ArtifactID("upstream-response")

// responseArtifact is the upstream's response as a data part, or nil when
// the job got none.
func responseArtifact(j *domain.Job) *a2a.Artifact {
	r := j.Result
	if r == nil || r.ResponseStatus == 0 {
		return nil
	}
	return &a2a.Artifact{
		ID:          responseArtifactID,
		Name:        "upstream-response",
		Description: "The HTTP response Aquifer received for the job's request.",
		Parts:       a2a.ContentParts{a2a.DataPart{Data: responseData(j)}},
	}
}

// responseData has the field names of the job's SSE terminal event and of
// GET /jobs/{id}.
func responseData(j *domain.Job) map[string]any {
	r := j.Result
	body, enc := app.EncodeBody(r.Body)
	d := map[string]any{"job_id": string(j.ID), "response_status": r.ResponseStatus, "body": body}
	if enc != "" {
		d["body_encoding"] = enc
	}
	if r.BodyTruncated {
		d["body_truncated"] = true
	}
	if r.ContentType != "" {
		d["content_type"] = r.ContentType
	}
	return d
}

func failureData(j *domain.Job, reason string) map[string]any {
	if j.Result != nil && j.Result.ResponseStatus != 0 {
		d := responseData(j)
		d["reason"] = reason
		return d
	}
	return map[string]any{"job_id": string(j.ID), "reason": reason}
}

// requestMessage is the user message that created the task, rebuilt from the
// job: the request's fields with secret headers and URL parameters redacted
// and without the body.
func requestMessage(j *domain.Job, info a2a.TaskInfo, messageID string) *a2a.Message {
	if messageID == "" {
		messageID = string(j.ID) + "-request"
	}
	d := map[string]any{"user_id": j.UserID, "idempotent_key": j.IdempotentKey, "method": j.Method}
	if j.URL != "" {
		d["url"] = domain.RedactURL(j.URL)
	}
	if j.PoolID != "" {
		d["pool_id"] = j.PoolID
	}
	if len(j.Headers) > 0 {
		h := map[string]any{}
		for k, v := range domain.RedactHeaders(j.Headers) {
			h[k] = v
		}
		d["headers"] = h
	}
	if j.WebhookURL != "" {
		d["webhook_url"] = domain.RedactURL(j.WebhookURL)
	}
	return &a2a.Message{ID: messageID, Role: a2a.MessageRoleUser, TaskID: info.TaskID, ContextID: info.ContextID,
		Parts: a2a.ContentParts{a2a.DataPart{Data: d}}}
}

// metaCache remembers taskMeta for the most recent tasks, bounded: the
// oldest entry goes when it is full.
type metaCache struct {
	mu    sync.Mutex
	max   int
	m     map[a2a.TaskID]taskMeta
	order []a2a.TaskID // insertion order, a ring once full
	next  int
}

func newMetaCache(max int) *metaCache {
	return &metaCache{max: max, m: make(map[a2a.TaskID]taskMeta)}
}

func (c *metaCache) put(tid a2a.TaskID, m taskMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[tid]; ok {
		c.m[tid] = m
		return
	}
	if len(c.order) < c.max {
		c.order = append(c.order, tid)
	} else {
		delete(c.m, c.order[c.next])
		c.order[c.next] = tid
		c.next = (c.next + 1) % c.max
	}
	c.m[tid] = m
}

func (c *metaCache) get(tid a2a.TaskID) taskMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[tid]
}
