package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// sseFrame is one frame of a stream: an event (Event and Data set) or a
// comment line (Comment set).
type sseFrame struct {
	Event   string
	Data    map[string]any
	RawData string
	Comment string
}

func (f sseFrame) String() string {
	if f.Event == "" {
		return ": " + f.Comment
	}
	return f.Event + " " + f.RawData
}

// sseStream reads frames from an open stream in the background. The parser
// is strict: every frame must be exactly "event: <name>\ndata: <json>\n\n" or
// ": <comment>\n\n"; anything else ends the stream with an error.
type sseStream struct {
	resp   *http.Response
	frames chan sseFrame
	done   chan struct{}
	err    error // why reading stopped; nil at a clean end of stream. Valid after done.
}

// openStream connects to GET /jobs/{id}/stream and requires an SSE answer.
func (e *env) openStream(t *testing.T, id string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/jobs/"+id+"/stream", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET stream: status %d, want 200; body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		resp.Body.Close()
		cancel()
		t.Fatalf("stream Content-Type %q, want text/event-stream", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("stream Cache-Control %q, want no-cache", cc)
	}
	s := &sseStream{resp: resp, frames: make(chan sseFrame, 256), done: make(chan struct{})}
	go s.read(ctx)
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-s.done
	})
	return s
}

func (s *sseStream) read(ctx context.Context) {
	defer close(s.done)
	defer close(s.frames)
	br := bufio.NewReader(s.resp.Body)
	line := func() (string, error) {
		l, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && l != "" {
				return "", fmt.Errorf("stream ended inside a line: %q", l)
			}
			return "", err
		}
		return strings.TrimSuffix(l, "\n"), nil
	}
	for {
		first, err := line()
		if err == io.EOF {
			return // clean end between frames
		}
		if err != nil {
			s.err = err
			return
		}
		var f sseFrame
		switch {
		case strings.HasPrefix(first, ": "):
			f.Comment = strings.TrimPrefix(first, ": ")
		case strings.HasPrefix(first, "event: "):
			f.Event = strings.TrimPrefix(first, "event: ")
			data, err := line()
			if err != nil {
				s.err = fmt.Errorf("after %q: %w", first, err)
				return
			}
			if !strings.HasPrefix(data, "data: ") {
				s.err = fmt.Errorf("after %q: want a data line, got %q", first, data)
				return
			}
			f.RawData = strings.TrimPrefix(data, "data: ")
			if err := json.Unmarshal([]byte(f.RawData), &f.Data); err != nil {
				s.err = fmt.Errorf("data of %s is not a JSON object: %q", f.Event, f.RawData)
				return
			}
		default:
			s.err = fmt.Errorf("unexpected line %q", first)
			return
		}
		if blank, err := line(); err != nil || blank != "" {
			s.err = fmt.Errorf("frame %v not followed by a blank line: %q, %v", f, blank, err)
			return
		}
		select {
		case s.frames <- f:
		case <-ctx.Done():
			return
		}
	}
}

// next returns the next event frame, skipping keepalive comments.
func (s *sseStream) next(t *testing.T) sseFrame {
	t.Helper()
	for {
		f := s.nextFrame(t)
		if f.Event != "" {
			return f
		}
	}
}

// nextFrame returns the next frame, comments included.
func (s *sseStream) nextFrame(t *testing.T) sseFrame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			<-s.done
			t.Fatalf("stream ended (err %v) while a frame was expected", s.err)
		}
		return f
	case <-time.After(waitFor):
		t.Fatalf("no frame within %v", waitFor)
	}
	return sseFrame{}
}

// expectEvent reads the next event and checks its name and job id.
func (s *sseStream) expectEvent(t *testing.T, name, id string) sseFrame {
	t.Helper()
	f := s.next(t)
	if f.Event != name {
		t.Fatalf("got event %v, want %s", f, name)
	}
	if f.Data["job_id"] != id {
		t.Fatalf("event %v: job_id %v, want %s", f, f.Data["job_id"], id)
	}
	return f
}

// expectEnd requires the server to end the stream cleanly with no further
// events (keepalive comments are allowed).
func (s *sseStream) expectEnd(t *testing.T) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				<-s.done
				if s.err != nil {
					t.Fatalf("stream ended with an error: %v", s.err)
				}
				return
			}
			if f.Event != "" {
				t.Fatalf("got %v, want the end of the stream", f)
			}
		case <-deadline:
			t.Fatalf("the server did not end the stream within %v", waitFor)
		}
	}
}

func requireTerminal(t *testing.T, f sseFrame, status float64, body string) {
	t.Helper()
	if f.Data["response_status"] != status || f.Data["body"] != body {
		t.Fatalf("%v: want response_status %v and body %q", f, status, body)
	}
}

func TestStreamLiveFromQueued(t *testing.T) {
	up := newUpstream(t, true, func(r recorded) response { return response{200, "text/plain", []byte("done:" + r.Path)} })
	// One at a time, so the second job stays queued behind the first.
	e := newEnv(t, envOptions{hosts: map[string]domain.Rate{up.hostPort: {RPS: 1000, MaxConcurrent: 1}}})

	first := e.submit(t, jobFor("u", "first", up.url("/first")))
	if r := up.waitArrival(t); r.Path != "/first" {
		t.Fatalf("first arrival %s", r.Path)
	}
	id := e.submit(t, jobFor("u", "second", up.url("/second")))
	if _, m, b := e.getJob(t, id); m["status"] != "queued" {
		t.Fatalf("second job is not queued: %s", b)
	}

	s := e.openStream(t, id)
	f := s.expectEvent(t, "queued", id)
	requireKeys(t, "queued data", f.Data, "job_id", "status")
	if f.Data["status"] != "queued" {
		t.Fatalf("queued frame %v", f)
	}
	// A queued job's catch-up includes its place in line: first (the job
	// ahead of it is running, and running jobs are not counted).
	f = s.expectEvent(t, "position", id)
	if f.Data["position"] != float64(1) {
		t.Fatalf("position frame %v, want position 1", f)
	}
	up.requireNoArrival(t, 50*time.Millisecond)
	if _, m, b := e.getJob(t, id); m["status"] != "queued" {
		t.Fatalf("second job left queued before the first finished (max_concurrent 1 ignored?): %s", b)
	}

	up.releaseOne(t) // the first job finishes; the second starts
	if r := up.waitArrival(t); r.Path != "/second" {
		t.Fatalf("second arrival %s", r.Path)
	}
	if f := s.expectEvent(t, "dispatching", id); f.Data["attempt"] != float64(1) {
		t.Fatalf("live dispatching frame %v, want attempt 1", f)
	}
	up.releaseOne(t)
	f = s.expectEvent(t, "completed", id)
	requireTerminal(t, f, 200, "done:/second")
	if _, ok := f.Data["reason"]; ok {
		t.Fatalf("completed frame carries a reason: %v", f)
	}
	s.expectEnd(t)
	e.waitStatus(t, first, "completed")
	up.requirePeak(t, 1)
}

func TestStreamLateSubscriberGetsCatchUpAndClose(t *testing.T) {
	e := newEnv(t, envOptions{}) // 30s keepalive: a hang would show as a timeout
	binary := []byte{0xff, 0x00, 0xfe}
	up := newUpstream(t, false, func(r recorded) response {
		if r.Path == "/bin" {
			return response{200, "application/octet-stream", binary}
		}
		return response{202, "text/plain", []byte("accepted <later>")}
	})

	id := e.submit(t, jobFor("u", "late", up.url("/late")))
	e.waitStatus(t, id, "completed")
	for range 2 { // a second late subscriber gets the same
		s := e.openStream(t, id)
		f := s.expectEvent(t, "queued", id)
		if f.Data["status"] != "queued" {
			t.Fatalf("queued frame %v", f)
		}
		// The same frame a live subscriber got: the first attempt started.
		if f := s.expectEvent(t, "dispatching", id); f.Data["attempt"] != float64(1) {
			t.Fatalf("catch-up dispatching frame %v, want attempt 1", f)
		}
		requireTerminal(t, s.expectEvent(t, "completed", id), 202, "accepted <later>")
		s.expectEnd(t)
	}

	id = e.submit(t, jobFor("u", "late-bin", up.url("/bin")))
	e.waitStatus(t, id, "completed")
	s := e.openStream(t, id)
	s.expectEvent(t, "queued", id)
	s.expectEvent(t, "dispatching", id)
	f := s.expectEvent(t, "completed", id)
	requireTerminal(t, f, 200, base64.StdEncoding.EncodeToString(binary))
	if f.Data["body_encoding"] != "base64" {
		t.Fatalf("binary body without body_encoding: %v", f)
	}
	s.expectEnd(t)
}

func TestStreamFailedJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, true, fixed(500, "text/plain", "boom"))

	id := e.submit(t, jobFor("u", "fails", up.url("/f")))
	up.waitArrival(t) // attempt 1 is running
	s := e.openStream(t, id)
	s.expectEvent(t, "queued", id)
	s.expectEvent(t, "dispatching", id)

	up.releaseOne(t) // 500: retried after the backoff
	up.waitArrival(t)
	up.releaseOne(t) // 500 again: retries are spent
	f := s.expectEvent(t, "failed", id)
	requireTerminal(t, f, 500, "boom")
	if r, _ := f.Data["reason"].(string); !strings.Contains(r, "500") {
		t.Fatalf("failed frame reason %q does not say what happened", r)
	}
	s.expectEnd(t)

	// A late subscriber to the failed job gets the same ending.
	late := e.openStream(t, id)
	late.expectEvent(t, "queued", id)
	if f := late.expectEvent(t, "dispatching", id); f.Data["attempt"] != float64(1) {
		t.Fatalf("catch-up dispatching frame %v, want attempt 1", f)
	}
	f = late.expectEvent(t, "failed", id)
	requireTerminal(t, f, 500, "boom")
	if r, _ := f.Data["reason"].(string); !strings.Contains(r, "500") {
		t.Fatalf("late failed frame reason %q", r)
	}
	late.expectEnd(t)
}

// TestStreamCanceledJobWasNeverDispatching: a job canceled before it was
// sent never had a dispatching event, and a late subscriber gets none.
func TestStreamCanceledJobWasNeverDispatching(t *testing.T) {
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))
	e := newEnv(t, envOptions{hosts: map[string]domain.Rate{up.hostPort: {RPS: 1000, MaxConcurrent: 1}}})
	first := e.submit(t, jobFor("u", "holds-the-lane", up.url("/first")))
	up.waitArrival(t) // max_concurrent 1: the next job waits
	id := e.submit(t, jobFor("u", "canceled", up.url("/never")))
	if resp, b := e.request(t, http.MethodDelete, "/jobs/"+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d %s", resp.StatusCode, b)
	}
	s := e.openStream(t, id)
	s.expectEvent(t, "queued", id)
	if f := s.expectEvent(t, "failed", id); f.Data["reason"] != "canceled" {
		t.Fatalf("failed frame %v, want reason canceled", f)
	}
	s.expectEnd(t)
	up.releaseOne(t)
	e.waitStatus(t, first, "completed")
}

func TestStreamUnknownJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "nope"} {
		resp, b := e.request(t, http.MethodGet, "/jobs/"+id+"/stream", nil)
		m := requireJSONError(t, resp, b, http.StatusNotFound)
		if m["error"] != "job not found" {
			t.Fatalf("stream of %s: error %q, want \"job not found\"", id, m["error"])
		}
	}
}

func TestStreamClosedByCloseStreams(t *testing.T) {
	e := newEnv(t, envOptions{})
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))

	id := e.submit(t, jobFor("u", "held", up.url("/held")))
	up.waitArrival(t)
	s := e.openStream(t, id)
	s.expectEvent(t, "queued", id)
	s.expectEvent(t, "dispatching", id)

	e.h.CloseStreams()
	s.expectEnd(t)
	if _, m, b := e.getJob(t, id); m["status"] != "in_flight" {
		t.Fatalf("closing streams changed the job: %s", b)
	}
	up.releaseOne(t)
	e.waitStatus(t, id, "completed")
}

func TestStreamKeepAlive(t *testing.T) {
	e := newEnv(t, envOptions{keepAlive: 10 * time.Millisecond})
	up := newUpstream(t, true, fixed(200, "text/plain", "ok"))

	id := e.submit(t, jobFor("u", "slow", up.url("/slow")))
	up.waitArrival(t)
	s := e.openStream(t, id)
	s.expectEvent(t, "queued", id)
	s.expectEvent(t, "dispatching", id)
	for range 2 {
		if f := s.nextFrame(t); f.Comment != "keepalive" {
			t.Fatalf("got %v, want a \": keepalive\" comment", f)
		}
	}
	up.releaseOne(t)
	requireTerminal(t, s.expectEvent(t, "completed", id), 200, "ok")
	s.expectEnd(t)
}
