package httpkit

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

// SSE data shapes (BEHAVIOR.md §6.2).
type (
	sseQueued struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	sseDispatching struct {
		JobID   string `json:"job_id"`
		Attempt int    `json:"attempt,omitempty"`
	}
	ssePosition struct {
		JobID    string `json:"job_id"`
		Position int    `json:"position"`
	}
	sseTerminal struct {
		JobID          string `json:"job_id"`
		Reason         string `json:"reason,omitempty"`
		ResponseStatus int    `json:"response_status"`
		Body           string `json:"body"`
		BodyEncoding   string `json:"body_encoding,omitempty"`
		BodyTruncated  bool   `json:"body_truncated,omitempty"`
	}
)

// Source is what a job event stream reads from.
type Source interface {
	Subscribe(ctx context.Context, id domain.JobID) (*domain.Job, *app.Subscription, error)
	Position(ctx context.Context, j *domain.Job) (int, error)
}

// StreamOptions configure Stream.
type StreamOptions struct {
	// KeepAlive is the interval of keep-alive comments. Default 30s.
	KeepAlive time.Duration
	// Closing ends the stream when closed (server shutdown).
	Closing <-chan struct{}
	// First, if set, is written before the catch-up frames.
	First *Frame
}

// Frame is one named SSE event with a JSON payload.
type Frame struct {
	Event string
	Data  any
}

// Stream answers 200 text/event-stream with the events of job, whose
// subscription sub the caller opened before reading job (so nothing is
// missed) and Stream closes. It sends catch-up frames for what already
// happened (queued; dispatching if an attempt started; the terminal event if
// the job is finished, after which the stream ends), the job's position if
// it waits in its queue (not while it is scheduled), then live events until the job ends, the client leaves or
// o.Closing closes.
func Stream(w http.ResponseWriter, r *http.Request, src Source, job *domain.Job, sub *app.Subscription, o StreamOptions) {
	defer func() { sub.Close() }()
	if o.KeepAlive <= 0 {
		o.KeepAlive = 30 * time.Second
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // streams outlive the server's WriteTimeout
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Connection", "keep-alive")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	s := &sseWriter{w: w, rc: rc}
	if o.First != nil {
		s.frame(domain.EventType(o.First.Event), o.First.Data)
	}
	if done := s.catchUp(job); done || s.err != nil {
		return
	}
	// A scheduled job is in no queue yet: it has no position to report
	// (its lane publishes position events once it is due).
	if job.Status == domain.StatusQueued && !job.Scheduled() {
		if pos, err := src.Position(r.Context(), job); err == nil {
			s.frame(domain.EventPosition, ssePosition{JobID: string(job.ID), Position: pos})
		}
	}
	keepAlive := time.NewTicker(o.KeepAlive)
	defer keepAlive.Stop()
	id := job.ID
	var err error
	for {
		select {
		case <-r.Context().Done():
			return
		case <-o.Closing:
			return
		case <-keepAlive.C:
			s.comment("keepalive")
		case ev, ok := <-sub.C:
			if !ok {
				// We fell behind and were dropped: reload and resubscribe.
				job, sub, err = src.Subscribe(r.Context(), id)
				if err != nil {
					return
				}
				if s.terminal(job) {
					return
				}
				continue
			}
			s.event(ev)
			if ev.Type.Terminal() {
				return
			}
		}
		if s.err != nil {
			return
		}
	}
}

type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

// catchUp writes the frames a late subscriber missed, as a live subscriber
// got them, and reports whether the job is already finished. dispatching is
// published once, when the first attempt starts (attempt 1); a job canceled
// before it was ever sent never had one.
func (s *sseWriter) catchUp(j *domain.Job) bool {
	s.frame(domain.EventQueued, sseQueued{JobID: string(j.ID), Status: string(domain.StatusQueued)})
	if j.Status == domain.StatusInFlight || j.Attempts > 0 || j.Status.Terminal() && !j.Canceled() {
		s.event(domain.Event{Type: domain.EventDispatching, JobID: j.ID, Attempt: 1})
	}
	return s.terminal(j)
}

// terminal writes the terminal frame if j is finished.
func (s *sseWriter) terminal(j *domain.Job) bool {
	if !j.Status.Terminal() {
		return false
	}
	ev := domain.EventCompleted
	if j.Status == domain.StatusFailed {
		ev = domain.EventFailed
	}
	s.event(domain.Event{Type: ev, JobID: j.ID, Result: j.Result})
	return true
}

func (s *sseWriter) event(ev domain.Event) {
	id := string(ev.JobID)
	switch ev.Type {
	case domain.EventDispatching:
		s.frame(ev.Type, sseDispatching{JobID: id, Attempt: ev.Attempt})
	case domain.EventPosition:
		s.frame(ev.Type, ssePosition{JobID: id, Position: ev.Position})
	case domain.EventCompleted, domain.EventFailed:
		t := sseTerminal{JobID: id}
		if r := ev.Result; r != nil {
			t.ResponseStatus, t.BodyTruncated = r.ResponseStatus, r.BodyTruncated
			t.Body, t.BodyEncoding = app.EncodeBody(r.Body)
			if ev.Type == domain.EventFailed {
				t.Reason = r.Reason
			}
		}
		s.frame(ev.Type, t)
	default:
		s.frame(ev.Type, sseQueued{JobID: id, Status: string(ev.Type)})
	}
}

func (s *sseWriter) frame(name domain.EventType, data any) {
	if s.err != nil {
		return
	}
	b, err := Marshal(data)
	if err != nil {
		s.err = err
		return
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		s.err = err
		return
	}
	s.err = s.rc.Flush()
}

func (s *sseWriter) comment(text string) {
	if s.err != nil {
		return
	}
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		s.err = err
		return
	}
	s.err = s.rc.Flush()
}
