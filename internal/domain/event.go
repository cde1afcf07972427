package domain

// EventType names a job lifecycle event. The names are the SSE event names.
type EventType string

const (
	EventQueued      EventType = "queued"
	EventDispatching EventType = "dispatching"
	EventPosition    EventType = "position"
	EventCompleted   EventType = "completed"
	EventFailed      EventType = "failed"
)

// Terminal reports whether the event ends a job's stream.
func (t EventType) Terminal() bool { return t == EventCompleted || t == EventFailed }

// Event is one transition of one job.
type Event struct {
	Type     EventType
	JobID    JobID
	Position int     // EventPosition: 1-based place in its lane
	Attempt  int     // EventDispatching: 1-based attempt number
	Result   *Result // EventCompleted / EventFailed
}
