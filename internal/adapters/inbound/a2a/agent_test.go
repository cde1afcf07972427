package a2aagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	a2aagent "github.com/aquiferhq/aquifer/internal/adapters/inbound/a2a"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/memory"
	"github.com/aquiferhq/aquifer/internal/app"
	"github.com/aquiferhq/aquifer/internal/domain"
)

const waitFor = 10 * time.Second

// env is a real app.Service on the memory store behind the A2A agent,
// served by httptest, and an a2a-go client built from the served card.
type env struct {
	svc     *app.Service
	agent   *a2aagent.Agent
	srv     *httptest.Server
	mux     *http.ServeMux
	pushDir string
	client  *a2aclient.Client
}

func newService(t *testing.T) *app.Service {
	t.Helper()
	svc, err := app.New(app.Config{
		Store: memory.New(nil),
		Doer:  loopbackClient(),
		Retry: app.RetryPolicy{Attempts: 2, Backoff: []time.Duration{10 * time.Millisecond}},
		// One request at a time per upstream, so a gated first job keeps the
		// next one queued.
		Rates: app.RateTable{Defaults: domain.Rate{RPS: 1000, MaxConcurrent: 1}},
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return svc
}

func newEnv(t *testing.T, svc *app.Service, pushDir string) *env {
	t.Helper()
	if svc == nil {
		svc = newService(t)
	}
	if pushDir == "" {
		pushDir = filepath.Join(t.TempDir(), "a2a-push")
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	agent, err := a2aagent.New(svc, a2aagent.Options{PublicURL: srv.URL + "/", PushDir: pushDir, Version: "test", MaxBodyBytes: 1 << 20})
	if err != nil {
		t.Fatalf("a2a.New: %v", err)
	}
	mux.Handle(a2aagent.CardPath, agent.CardHandler())
	mux.Handle(a2aagent.JSONRPCPath, agent.JSONRPCHandler())
	if err := agent.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		agent.Close()
		srv.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	card, err := agentcard.NewResolver(srv.Client()).Resolve(ctx, srv.URL)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(srv.Client()))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = client.Destroy() })
	return &env{svc: svc, agent: agent, srv: srv, mux: mux, pushDir: pushDir, client: client}
}

func loopbackClient() *http.Client {
	d := &net.Dialer{Timeout: waitFor}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return nil, fmt.Errorf("test client refuses to dial non-loopback address %s", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// gate is an upstream whose requests wait until release.
type gate struct {
	*httptest.Server
	release chan struct{}
	arrived chan string // each request's path, as it arrives
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	t.Helper()
	g := &gate{release: make(chan struct{}), arrived: make(chan string, 16)}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.arrived <- r.URL.Path
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(func() { g.open(); g.Close() })
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func (g *gate) waitArrival(t *testing.T, path string) {
	t.Helper()
	select {
	case got := <-g.arrived:
		if got != path {
			t.Fatalf("upstream got %s first, want %s", got, path)
		}
	case <-time.After(waitFor):
		t.Fatalf("request %s never reached the upstream", path)
	}
}

func upstreamOK(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func jobMessage(data map[string]any) *a2a.MessageSendParams {
	return &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
		a2a.TextPart{Text: "please send this"}, a2a.DataPart{Data: data})}
}

func nonBlocking(p *a2a.MessageSendParams) *a2a.MessageSendParams {
	f := false
	p.Config = &a2a.MessageSendConfig{Blocking: &f}
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

func jobIDOfTask(t *testing.T, tid a2a.TaskID) domain.JobID {
	t.Helper()
	id := domain.JobID(strings.ReplaceAll(string(tid), "-", ""))
	if !domain.ValidJobID(string(id)) {
		t.Fatalf("task id %s does not map to a job id", tid)
	}
	return id
}

func responseOf(t *testing.T, task *a2a.Task) map[string]any {
	t.Helper()
	if len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 1 {
		t.Fatalf("artifacts: %+v", task.Artifacts)
	}
	dp, ok := task.Artifacts[0].Parts[0].(a2a.DataPart)
	if !ok {
		t.Fatalf("artifact part is %T", task.Artifacts[0].Parts[0])
	}
	return dp.Data
}

func historyIDs(t *a2a.Task) string {
	var ids []string
	for _, m := range t.History {
		ids = append(ids, string(m.Role)+":"+m.ID)
	}
	return strings.Join(ids, ",")
}

func TestAgentCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	card, err := agentcard.NewResolver(e.srv.Client()).Resolve(ctxT(t), e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if card.Name != "Aquifer" || card.URL != e.srv.URL+"/a2a" || card.ProtocolVersion != "0.3.0" ||
		card.PreferredTransport != a2a.TransportProtocolJSONRPC || card.Version != "test" {
		t.Fatalf("card: %+v", card)
	}
	if !card.Capabilities.Streaming || !card.Capabilities.PushNotifications {
		t.Fatalf("capabilities: %+v", card.Capabilities)
	}
	if len(card.Skills) != 1 || card.Skills[0].ID != a2aagent.SkillID || !strings.Contains(card.Skills[0].Description, "idempotent_key") ||
		len(card.Skills[0].Examples) != 1 || !json.Valid([]byte(card.Skills[0].Examples[0])) {
		t.Fatalf("skills: %+v", card.Skills)
	}
	resp, err := e.srv.Client().Post(e.srv.URL+a2aagent.CardPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, OPTIONS" ||
		string(b) != `{"error":"method not allowed"}`+"\n" {
		t.Fatalf("POST to the card: %d Allow=%q %q, want a JSON 405 with Allow", resp.StatusCode, resp.Header.Get("Allow"), b)
	}
}

// TestTaskRedactsSecretURLParameters: the request message of a task shows
// its url and webhook_url with secret query values redacted; the upstream
// gets the real URL.
func TestTaskRedactsSecretURLParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	up := upstreamOK(t)
	res, err := e.client.SendMessage(ctxT(t), jobMessage(map[string]any{
		"user_id": "agent-1", "idempotent_key": "k-q", "url": up.URL + "/things?access_token=s3cr3t-a&x=1",
		"webhook_url": up.URL + "/hook?sig=s3cr3t-b",
	}))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("result is %T", res)
	}
	got, err := e.client.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []*a2a.Task{task, got} {
		raw, _ := json.Marshal(tk)
		if strings.Contains(string(raw), "s3cr3t") {
			t.Fatalf("task shows a secret URL parameter: %s", raw)
		}
		if !strings.Contains(string(raw), `/things?access_token=[redacted]\u0026x=1`) ||
			!strings.Contains(string(raw), "/hook?sig=[redacted]") {
			t.Fatalf("task does not show its redacted URLs: %s", raw)
		}
	}
	job, err := e.svc.Get(context.Background(), jobIDOfTask(t, task.ID))
	if err != nil || job.URL != up.URL+"/things?access_token=s3cr3t-a&x=1" {
		t.Fatalf("the stored job must keep the real URL: %+v %v", job, err)
	}
}

func TestSendMessageCompletesWithArtifact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	up := upstreamOK(t)
	res, err := e.client.SendMessage(ctxT(t), jobMessage(map[string]any{
		"user_id": "agent-1", "idempotent_key": "k-1", "url": up.URL + "/things", "method": "POST",
		"headers": map[string]any{"Authorization": "Bearer secret"}, "body": `{"a":1}`,
	}))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("result is %T", res)
	}
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("state %s", task.Status.State)
	}
	resp := responseOf(t, task)
	if resp["response_status"] != float64(200) && resp["response_status"] != 200 || resp["body"] != `{"path":"/things"}` {
		t.Fatalf("artifact data: %v", resp)
	}

	// The task is the job: same id, readable through the core.
	job, err := e.svc.Get(context.Background(), jobIDOfTask(t, task.ID))
	if err != nil || job.Status != domain.StatusCompleted || job.Method != "POST" {
		t.Fatalf("job behind the task: %+v, %v", job, err)
	}

	got, err := e.client.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateCompleted || got.ContextID != task.ContextID || responseOf(t, got)["body"] != `{"path":"/things"}` {
		t.Fatalf("GetTask: %+v", got)
	}
	// The task read back from the job store is the one the live execution
	// produced: same history, message by message.
	if historyIDs(got) != historyIDs(task) || len(got.History) != 3 {
		t.Fatalf("history read back %s, live %s", historyIDs(got), historyIDs(task))
	}
	raw, _ := json.Marshal(got)
	if strings.Contains(string(raw), "Bearer secret") {
		t.Fatalf("task echoes a secret header: %s", raw)
	}
}

func TestStreamingEventsToCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	up := upstreamOK(t)
	var states []a2a.TaskState
	var sawArtifact bool
	var tid a2a.TaskID
	for ev, err := range e.client.SendStreamingMessage(ctxT(t), jobMessage(map[string]any{
		"user_id": "agent-1", "idempotent_key": "stream-1", "url": up.URL + "/s"})) {
		if err != nil {
			t.Fatal(err)
		}
		switch v := ev.(type) {
		case *a2a.Task:
			tid = v.ID
			states = append(states, v.Status.State)
		case *a2a.TaskStatusUpdateEvent:
			states = append(states, v.Status.State)
			if v.Final != v.Status.State.Terminal() {
				t.Errorf("final=%v on state %s", v.Final, v.Status.State)
			}
		case *a2a.TaskArtifactUpdateEvent:
			sawArtifact = true
			if len(states) == 0 || states[len(states)-1] != a2a.TaskStateWorking {
				t.Errorf("artifact after %v", states)
			}
		default:
			t.Fatalf("unexpected event %T", ev)
		}
	}
	want := []a2a.TaskState{a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateCompleted}
	if fmt.Sprint(states) != fmt.Sprint(want) || !sawArtifact {
		t.Fatalf("states %v (artifact %v), want %v with an artifact", states, sawArtifact, want)
	}
	if _, err := e.svc.Get(context.Background(), jobIDOfTask(t, tid)); err != nil {
		t.Fatal(err)
	}
}

func TestBadInputIsInvalidParams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	cases := []struct {
		name string
		msg  *a2a.MessageSendParams
		want string
	}{
		{"no data part", &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "send https://x"})}, "send one data part"},
		{"two data parts", &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
			a2a.DataPart{Data: map[string]any{"user_id": "u"}}, a2a.DataPart{Data: map[string]any{"user_id": "v"}})}, "exactly one data part"},
		{"missing user_id", jobMessage(map[string]any{"idempotent_key": "k", "url": "http://127.0.0.1:1/"}), "user_id is required"},
		{"bad url", jobMessage(map[string]any{"user_id": "u", "idempotent_key": "k", "url": "ftp://x"}), "url must be an absolute http or https URL"},
		{"wrong type", jobMessage(map[string]any{"user_id": "u", "idempotent_key": "k", "url": "http://127.0.0.1:1/", "headers": []any{"x"}}), "headers must be an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.client.SendMessage(ctxT(t), c.msg)
			if !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want invalid params mentioning %q", err, c.want)
			}
			var streamErr error
			for _, err := range e.client.SendStreamingMessage(ctxT(t), c.msg) {
				if err != nil {
					streamErr = err
				}
			}
			if !errors.Is(streamErr, a2a.ErrInvalidParams) || !strings.Contains(streamErr.Error(), c.want) {
				t.Fatalf("stream error %v, want invalid params mentioning %q", streamErr, c.want)
			}
		})
	}

	// A follow-up message to a task is refused: one message, one job.
	up := upstreamOK(t)
	res, err := e.client.SendMessage(ctxT(t), jobMessage(map[string]any{"user_id": "u", "idempotent_key": "first", "url": up.URL}))
	if err != nil {
		t.Fatal(err)
	}
	follow := jobMessage(map[string]any{"user_id": "u", "idempotent_key": "second", "url": up.URL})
	follow.Message.TaskID = res.(*a2a.Task).ID
	if _, err := e.client.SendMessage(ctxT(t), follow); !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), "no follow-up messages") {
		t.Fatalf("follow-up: %v", err)
	}

	if _, err := e.client.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: "0190f0e0-0000-7000-8000-000000000000"}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	if _, err := e.client.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: "../../etc/passwd"}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("malformed task id: %v", err)
	}
}

func TestDuplicatePointsAtExistingTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	up := upstreamOK(t)
	data := map[string]any{"user_id": "agent-1", "idempotent_key": "dup", "url": up.URL}
	res, err := e.client.SendMessage(ctxT(t), jobMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	first := res.(*a2a.Task)
	res, err = e.client.SendMessage(ctxT(t), jobMessage(data))
	if err != nil {
		t.Fatal(err)
	}
	msg, ok := res.(*a2a.Message)
	if !ok {
		t.Fatalf("duplicate answered with %T, want a message", res)
	}
	var d map[string]any
	for _, p := range msg.Parts {
		if dp, ok := p.(a2a.DataPart); ok {
			d = dp.Data
		}
	}
	if d["duplicate"] != true || d["task_id"] != string(first.ID) || d["job_id"] != string(jobIDOfTask(t, first.ID)) {
		t.Fatalf("duplicate data %v, first task %s", d, first.ID)
	}
}

func TestCancelQueuedAndRefuseDispatched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	g := newGate(t)

	// The first job occupies the upstream's one slot; the second waits.
	busy, err := e.client.SendMessage(ctxT(t), nonBlocking(jobMessage(map[string]any{"user_id": "u", "idempotent_key": "busy", "url": g.URL + "/busy"})))
	if err != nil {
		t.Fatal(err)
	}
	g.waitArrival(t, "/busy")
	queued, err := e.client.SendMessage(ctxT(t), nonBlocking(jobMessage(map[string]any{"user_id": "u", "idempotent_key": "queued", "url": g.URL + "/queued"})))
	if err != nil {
		t.Fatal(err)
	}
	qt := queued.(*a2a.Task)
	if qt.Status.State != a2a.TaskStateSubmitted {
		t.Fatalf("queued task state %s", qt.Status.State)
	}

	canceled, err := e.client.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: qt.ID})
	if err != nil {
		t.Fatal(err)
	}
	if canceled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("after cancel: %s", canceled.Status.State)
	}
	got, err := e.client.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: qt.ID})
	if err != nil || got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("GetTask after cancel: %v %v", got, err)
	}
	job, _ := e.svc.Get(context.Background(), jobIDOfTask(t, qt.ID))
	if !job.Canceled() {
		t.Fatalf("job not canceled: %+v", job)
	}

	// The dispatched job cannot be cancelled, and says why.
	_, err = e.client.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: busy.(*a2a.Task).ID})
	if !errors.Is(err, a2a.ErrTaskNotCancelable) || !strings.Contains(err.Error(), "already dispatched") {
		t.Fatalf("cancel dispatched: %v", err)
	}
	// Neither can a finished one.
	g.open()
	if _, err := e.client.SendMessage(ctxT(t), jobMessage(map[string]any{"user_id": "u", "idempotent_key": "done", "url": g.URL + "/done"})); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: busy.(*a2a.Task).ID})
	if !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel finished: %v", err)
	}
	if _, err := e.client.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: "0190f0e0-0000-7000-8000-000000000000"}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
}

// pushReceiver records the tasks pushed to it.
type pushReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	states []a2a.TaskState
	tokens []string
	got    chan *a2a.Task
}

func newPushReceiver(t *testing.T) *pushReceiver {
	t.Helper()
	p := &pushReceiver{got: make(chan *a2a.Task, 64)}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var task a2a.Task
		if err := json.Unmarshal(raw, &task); err != nil {
			t.Errorf("push body %s: %v", raw, err)
			return
		}
		p.mu.Lock()
		p.states = append(p.states, task.Status.State)
		p.tokens = append(p.tokens, r.Header.Get("X-A2A-Notification-Token"))
		p.mu.Unlock()
		p.got <- &task
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *pushReceiver) waitState(t *testing.T, want a2a.TaskState) *a2a.Task {
	t.Helper()
	timeout := time.After(waitFor)
	for {
		select {
		case task := <-p.got:
			if task.Status.State == want {
				return task
			}
		case <-timeout:
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("no push with state %s; got %v", want, p.states)
		}
	}
}

func TestPushConfigs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	g := newGate(t)
	recv := newPushReceiver(t)

	res, err := e.client.SendMessage(ctxT(t), nonBlocking(jobMessage(map[string]any{"user_id": "u", "idempotent_key": "push", "url": g.URL + "/p"})))
	if err != nil {
		t.Fatal(err)
	}
	tid := res.(*a2a.Task).ID
	set, err := e.client.SetTaskPushConfig(ctxT(t), &a2a.TaskPushConfig{TaskID: tid, Config: a2a.PushConfig{ID: "cfg-1", URL: recv.URL + "/hook", Token: "tok"}})
	if err != nil || set.Config.ID != "cfg-1" {
		t.Fatalf("set: %+v %v", set, err)
	}
	got, err := e.client.GetTaskPushConfig(ctxT(t), &a2a.GetTaskPushConfigParams{TaskID: tid, ConfigID: "cfg-1"})
	if err != nil || got.Config.URL != recv.URL+"/hook" {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := e.client.ListTaskPushConfig(ctxT(t), &a2a.ListTaskPushConfigParams{TaskID: tid})
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Durable: one 0600 file per task in a 0700 directory.
	fi, err := os.Stat(filepath.Join(e.pushDir, string(tid)+".json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("push file: %v %v", fi, err)
	}
	if di, err := os.Stat(e.pushDir); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("push dir: %v %v", di, err)
	}

	g.waitArrival(t, "/p")
	g.open()
	final := recv.waitState(t, a2a.TaskStateCompleted)
	if final.ID != tid || responseOf(t, final)["body"] != `{"path":"/p"}` {
		t.Fatalf("final push: %+v", final)
	}
	recv.mu.Lock()
	if recv.tokens[len(recv.tokens)-1] != "tok" {
		t.Errorf("push token %q", recv.tokens)
	}
	recv.mu.Unlock()

	// Bad configs and unknown tasks are refused.
	if _, err := e.client.SetTaskPushConfig(ctxT(t), &a2a.TaskPushConfig{TaskID: tid, Config: a2a.PushConfig{URL: "not a url"}}); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("bad url: %v", err)
	}
	if _, err := e.client.SetTaskPushConfig(ctxT(t), &a2a.TaskPushConfig{TaskID: "0190f0e0-0000-7000-8000-000000000000", Config: a2a.PushConfig{URL: recv.URL}}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}

	if err := e.client.DeleteTaskPushConfig(ctxT(t), &a2a.DeleteTaskPushConfigParams{TaskID: tid, ConfigID: "cfg-1"}); err != nil {
		t.Fatal(err)
	}
	if list, err := e.client.ListTaskPushConfig(ctxT(t), &a2a.ListTaskPushConfigParams{TaskID: tid}); err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %+v %v", list, err)
	}
	if _, err := os.Stat(filepath.Join(e.pushDir, string(tid)+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("push file after delete: %v", err)
	}
}

func TestPushConfigWithMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	up := upstreamOK(t)
	recv := newPushReceiver(t)
	msg := jobMessage(map[string]any{"user_id": "u", "idempotent_key": "inline", "url": up.URL + "/i"})
	msg.Config = &a2a.MessageSendConfig{PushConfig: &a2a.PushConfig{URL: recv.URL}}
	res, err := e.client.SendMessage(ctxT(t), msg)
	if err != nil {
		t.Fatal(err)
	}
	final := recv.waitState(t, a2a.TaskStateCompleted)
	if final.ID != res.(*a2a.Task).ID {
		t.Fatalf("pushed task %s, sent %s", final.ID, res.(*a2a.Task).ID)
	}

	// A rejected message leaves no push config behind.
	bad := jobMessage(map[string]any{"user_id": "u", "idempotent_key": "bad", "url": "ftp://x"})
	bad.Config = &a2a.MessageSendConfig{PushConfig: &a2a.PushConfig{URL: recv.URL}}
	if _, err := e.client.SendMessage(ctxT(t), bad); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("bad message: %v", err)
	}
	entries, _ := os.ReadDir(e.pushDir)
	for _, en := range entries {
		if en.Name() != string(res.(*a2a.Task).ID)+".json" {
			t.Errorf("stray push file %s", en.Name())
		}
	}
}

// TestTasksSurviveAgentRestart replaces the agent (its memory gone) over the
// same job store and push directory, as after a process restart: the task
// reads back from its job, its push config still fires, and a resubscribe
// follows it to the end.
func TestTasksSurviveAgentRestart(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	pushDir := filepath.Join(t.TempDir(), "a2a-push")
	g := newGate(t)
	recv := newPushReceiver(t)

	first := newEnv(t, svc, pushDir)
	res, err := first.client.SendMessage(ctxT(t), nonBlocking(jobMessage(map[string]any{"user_id": "u", "idempotent_key": "restart", "url": g.URL + "/r"})))
	if err != nil {
		t.Fatal(err)
	}
	tid := res.(*a2a.Task).ID
	if _, err := first.client.SetTaskPushConfig(ctxT(t), &a2a.TaskPushConfig{TaskID: tid, Config: a2a.PushConfig{URL: recv.URL}}); err != nil {
		t.Fatal(err)
	}
	g.waitArrival(t, "/r")
	// A second job to the same upstream waits behind the first.
	res, err = first.client.SendMessage(ctxT(t), nonBlocking(jobMessage(map[string]any{"user_id": "u", "idempotent_key": "restart-queued", "url": g.URL + "/q"})))
	if err != nil {
		t.Fatal(err)
	}
	queuedID := res.(*a2a.Task).ID
	first.agent.Close()

	second := newEnv(t, svc, pushDir)
	got, err := second.client.GetTask(ctxT(t), &a2a.TaskQueryParams{ID: tid})
	if err != nil || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("task after restart: %+v %v", got, err)
	}
	if len(got.History) != 2 || got.History[0].Role != a2a.MessageRoleUser || got.History[1].Role != a2a.MessageRoleAgent {
		t.Fatalf("history after restart: %+v", got.History)
	}
	// No execution survived the restart; cancelling works from the job alone.
	canceled, err := second.client.CancelTask(ctxT(t), &a2a.TaskIDParams{ID: queuedID})
	if err != nil || canceled.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel after restart: %+v %v", canceled, err)
	}
	list, err := second.client.ListTaskPushConfig(ctxT(t), &a2a.ListTaskPushConfigParams{TaskID: tid})
	if err != nil || len(list) != 1 {
		t.Fatalf("push configs after restart: %+v %v", list, err)
	}

	var states []a2a.TaskState
	events := second.client.ResubscribeToTask(ctxT(t), &a2a.TaskIDParams{ID: tid})
	g.open()
	for ev, err := range events {
		if err != nil {
			t.Fatal(err)
		}
		switch v := ev.(type) {
		case *a2a.Task:
			states = append(states, v.Status.State)
		case *a2a.TaskStatusUpdateEvent:
			states = append(states, v.Status.State)
		}
	}
	if len(states) == 0 || states[len(states)-1] != a2a.TaskStateCompleted {
		t.Fatalf("resubscribe states %v", states)
	}
	final := recv.waitState(t, a2a.TaskStateCompleted)
	if responseOf(t, final)["body"] != `{"path":"/r"}` {
		t.Fatalf("final push after restart: %+v", final)
	}

	// The final push is recorded with the configs, so a later start does
	// not push the finished task again.
	second.agent.Close() // waits for the push watcher
	raw, err := os.ReadFile(filepath.Join(pushDir, string(tid)+".json"))
	if err != nil || !strings.Contains(string(raw), `"final_pushed":"completed"`) {
		t.Fatalf("push file after the final push: %s %v", raw, err)
	}
}

// TestJSONRPCWire checks the wire answers other SDKs read: an error's
// message carries its detail, and a method without a result still answers.
func TestJSONRPCWire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, "")
	post := func(body string) map[string]any {
		t.Helper()
		resp, err := e.srv.Client().Post(e.srv.URL+a2aagent.JSONRPCPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("answer to %s: %v", body, err)
		}
		return out
	}
	out := post(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`)
	rpcErr, _ := out["error"].(map[string]any)
	if rpcErr["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(rpcErr["message"]), "send one data part") {
		t.Fatalf("error answer: %v", out)
	}

	up := upstreamOK(t)
	res, err := e.client.SendMessage(ctxT(t), jobMessage(map[string]any{"user_id": "u", "idempotent_key": "wire", "url": up.URL}))
	if err != nil {
		t.Fatal(err)
	}
	tid := res.(*a2a.Task).ID
	post(`{"jsonrpc":"2.0","id":2,"method":"tasks/pushNotificationConfig/set","params":{"taskId":"` + string(tid) + `","pushNotificationConfig":{"id":"c","url":"` + up.URL + `"}}}`)
	out = post(`{"jsonrpc":"2.0","id":3,"method":"tasks/pushNotificationConfig/delete","params":{"id":"` + string(tid) + `","pushNotificationConfigId":"c"}}`)
	if v, ok := out["result"]; !ok || v != nil || out["id"] != float64(3) {
		t.Fatalf("delete answer: %v", out)
	}
}
