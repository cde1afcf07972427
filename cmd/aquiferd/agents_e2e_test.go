package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// End-to-end tests of the agent adapters against the built binary: MCP over
// a real stdio pipe, MCP streamable HTTP and A2A sharing the HTTP listener
// with REST, and an A2A task and its push config surviving a restart.

// lockedBuffer is a bytes.Buffer safe for the exec copier and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// teeReadCloser copies what the client reads from aquiferd's stdout.
type teeReadCloser struct {
	io.Reader
	c io.Closer
}

func (t teeReadCloser) Close() error { return t.c.Close() }

func okUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %+v", name, res.Content)
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("%s: structured content %T", name, res.StructuredContent)
	}
	return m
}

// TestMCPStdio drives the binary with the SDK client over its stdin/stdout:
// list tools, enqueue, long-poll the result, read the resource. Every byte
// on stdout must be protocol; logs go to stderr. Closing stdin stops it.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	bin := aquiferdBinary(t)
	up := okUpstream(t)

	cmd := exec.Command(bin)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "AQUIFER_ADAPTER=mcp-stdio", "AQUIFER_DATA_DIR="+filepath.Join(cmd.Dir, "data"), "AQUIFER_LOG_LEVEL=debug")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr, protocol lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	transport := &sdk.IOTransport{Reader: teeReadCloser{io.TeeReader(stdout, &protocol), stdout}, Writer: stdin}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 12 { // aquifer_enqueue_batch is the twelfth
		t.Fatalf("tools: %v %v", tools, err)
	}
	enq := callTool(t, cs, "aquifer_enqueue_job", map[string]any{"user_id": "e2e", "idempotent_key": "stdio-1", "url": up.URL + "/stdio", "method": "POST", "body": "hi"})
	id, _ := enq["job_id"].(string)
	job := callTool(t, cs, "aquifer_get_job", map[string]any{"job_id": id, "wait_seconds": 20})
	if job["status"] != "completed" || job["response_status"] != float64(200) || job["body"] != `{"path":"/stdio"}` {
		t.Fatalf("job: %v", job)
	}
	rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "aquifer://jobs/" + id})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, `"status":"completed"`) {
		t.Fatalf("resource: %+v %v", rr, err)
	}

	// Closing stdin ends the session and the process, cleanly.
	_ = cs.Close()
	_ = stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("aquiferd exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("aquiferd did not exit after stdin closed")
	}

	sc := bufio.NewScanner(strings.NewReader(protocol.String()))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	lines := 0
	for sc.Scan() {
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil || msg.JSONRPC != "2.0" {
			t.Fatalf("stdout line is not JSON-RPC: %q", sc.Text())
		}
		lines++
	}
	if lines < 4 {
		t.Fatalf("only %d protocol lines on stdout", lines)
	}
	if !strings.Contains(stderr.String(), "aquiferd started") {
		t.Fatalf("logs did not go to stderr:\n%s", stderr.String())
	}
}

// TestAdaptersShareTheListener runs http, a2a and mcp-http on one port: a
// job submitted over A2A is the same job over REST and MCP.
func TestAdaptersShareTheListener(t *testing.T) {
	t.Parallel()
	up := okUpstream(t)
	d := startDaemon(t, []string{"AQUIFER_ADAPTER=http,a2a,mcp-http", "AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data")})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	card, err := agentcard.DefaultResolver.Resolve(ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	port := d.url[strings.LastIndex(d.url, ":")+1:]
	if card.URL != "http://localhost:"+port+"/a2a" {
		t.Fatalf("card URL %s, want the default public URL http://localhost:%s/a2a", card.URL, port)
	}
	client, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: d.url + "/a2a", Transport: a2a.TransportProtocolJSONRPC}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Destroy()
	res, err := client.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
		a2a.DataPart{Data: map[string]any{"user_id": "e2e", "idempotent_key": "a2a-1", "url": up.URL + "/a2a-job"}})})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("A2A result %+v", res)
	}
	jobID := strings.ReplaceAll(string(task.ID), "-", "")

	rest := getJSON(t, d.url+"/jobs/"+jobID)
	if rest["status"] != "completed" || rest["body"] != `{"path":"/a2a-job"}` {
		t.Fatalf("REST view of the A2A job: %v", rest)
	}

	cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: d.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	job := callTool(t, cs, "aquifer_get_job", map[string]any{"job_id": jobID})
	if job["status"] != "completed" {
		t.Fatalf("MCP view of the A2A job: %v", job)
	}
	if h := callTool(t, cs, "aquifer_health", nil); h["status"] != "ok" {
		t.Fatalf("health over MCP: %v", h)
	}
}

// TestHTTPAdapterAloneHasNoAgents checks that /mcp and the A2A routes are
// served only when their adapters are named, and that /health is served by
// the listener even without the REST adapter.
func TestHTTPAdapterAloneHasNoAgents(t *testing.T) {
	t.Parallel()
	rest := startDaemon(t, []string{"AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data")})
	for _, path := range []string{"/mcp", "/.well-known/agent-card.json", "/a2a"} {
		resp, err := http.Get(rest.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s with AQUIFER_ADAPTER=http: %d, want 404", path, resp.StatusCode)
		}
	}
	agentOnly := startDaemon(t, []string{"AQUIFER_ADAPTER=a2a", "AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data")})
	resp, err := http.Post(agentOnly.url+"/jobs", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /jobs with AQUIFER_ADAPTER=a2a: %d, want 404", resp.StatusCode)
	}
	getJSON(t, agentOnly.url+"/.well-known/agent-card.json")
}

// TestA2ATaskSurvivesRestart stops aquiferd while an A2A task's job waits,
// restarts it on the same data directory, and follows the task to the end:
// the task reads back from the job store, its push config from the data
// directory, and the final state is pushed.
func TestA2ATaskSurvivesRestart(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	env := []string{"AQUIFER_ADAPTER=a2a,http", "AQUIFER_DATA_DIR=" + dataDir, "AQUIFER_SHUTDOWN_TIMEOUT=1s"}

	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	arrived := make(chan struct{}, 8)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
			fmt.Fprint(w, `{"released":true}`)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { open(); gate.Close() })
	pushes := make(chan a2a.Task, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task a2a.Task
		if err := json.NewDecoder(r.Body).Decode(&task); err == nil {
			pushes <- task
		}
	}))
	t.Cleanup(receiver.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first := startDaemon(t, env)
	client := a2aClient(t, ctx, first.url)
	blocking := false
	res, err := client.SendMessage(ctx, &a2a.MessageSendParams{
		Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.DataPart{Data: map[string]any{"user_id": "e2e", "idempotent_key": "restart", "url": gate.URL + "/slow"}}),
		Config:  &a2a.MessageSendConfig{Blocking: &blocking},
	})
	if err != nil {
		t.Fatal(err)
	}
	tid := res.(*a2a.Task).ID
	if _, err := client.SetTaskPushConfig(ctx, &a2a.TaskPushConfig{TaskID: tid, Config: a2a.PushConfig{URL: receiver.URL + "/push"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the job never reached the upstream")
	}
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("first aquiferd exited with %v\n%s", err, first.logs)
	}

	second := startDaemon(t, env)
	client = a2aClient(t, ctx, second.url)
	got, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: tid})
	if err != nil || got.Status.State.Terminal() {
		t.Fatalf("task after restart: %+v %v", got, err)
	}
	cfgs, err := client.ListTaskPushConfig(ctx, &a2a.ListTaskPushConfigParams{TaskID: tid})
	if err != nil || len(cfgs) != 1 {
		t.Fatalf("push configs after restart: %+v %v", cfgs, err)
	}
	open()
	var last a2a.TaskState
	for ev, err := range client.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: tid}) {
		if err != nil {
			t.Fatal(err)
		}
		if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			last = su.Status.State
		}
		if task, ok := ev.(*a2a.Task); ok {
			last = task.Status.State
		}
	}
	if last != a2a.TaskStateCompleted {
		t.Fatalf("resubscribe ended in %q", last)
	}
	for {
		select {
		case task := <-pushes:
			if task.ID == tid && task.Status.State == a2a.TaskStateCompleted {
				return
			}
		case <-ctx.Done():
			t.Fatal("the completed state was never pushed after the restart")
		}
	}
}

func a2aClient(t *testing.T, ctx context.Context, base string) *a2aclient.Client {
	t.Helper()
	c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: base + "/a2a", Transport: a2a.TransportProtocolJSONRPC}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}
