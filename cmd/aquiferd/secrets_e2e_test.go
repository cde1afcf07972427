package main

import (
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
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
	"github.com/aquiferhq/aquifer/pkg/aquifer/webhookverify"
)

// TestSecretsNeverLeave runs jobs carrying secret headers through every
// front door, with debug logging, a failing destination and a webhook, then
// looks for the secrets in everything Aquifer shows: its logs, /health,
// GET /jobs, the SSE stream, MCP tool results and resources, A2A tasks and
// /metrics. The destination must still receive them.
func TestSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	secrets := []string{"s3cr3t-bearer-0001", "s3cr3t-apikey-0002", "s3cr3t-cookie-0003", "s3cr3t-token-0004", "s3cr3t-session-0005"}
	headers := map[string]string{
		"Authorization":    "Bearer " + secrets[0],
		"X-Api-Key":        secrets[1],
		"Cookie":           "sid=" + secrets[2],
		"X-Upstream-Token": secrets[3],
		"X-Session-Id":     secrets[4],
		"X-Trace":          "visible-trace-value",
	}
	var received bytes.Buffer
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.Header.Write(&received) // the destination gets the real values
		if strings.HasPrefix(r.URL.Path, "/fail") {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer target.Close()
	// The webhook secret signs the deliveries and must show nowhere either.
	webhookSecret, err := aquifer.NewWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	var hookMu sync.Mutex
	var delivered []http.Header
	var deliveredBodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/h" {
			http.NotFound(w, r) // the L8 discovery: this receiver does not speak L8
			return
		}
		hookMu.Lock()
		delivered, deliveredBodies = append(delivered, r.Header.Clone()), append(deliveredBodies, b)
		hookMu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()

	d := startDaemon(t, []string{"AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data"), "AQUIFER_ADAPTER=http,a2a,mcp-http",
		"AQUIFER_LOG_LEVEL=debug", "AQUIFER_WEBHOOK_SECRET=" + webhookSecret})
	hdrJSON, _ := json.Marshal(headers)
	submit := func(key, path string) string {
		body := fmt.Sprintf(`{"user_id":"u","idempotent_key":%q,"url":%q,"method":"POST","headers":%s,"body":"payload","webhook_url":%q}`,
			key, target.URL+path, hdrJSON, hook.URL+"/h")
		ids := submitJobs(t, d.url, 1, 1, func(int) string { return body })
		if ids[0] == "" {
			t.Fatalf("job %s not accepted", key)
		}
		return ids[0]
	}
	okID, failID := submit("ok", "/ok"), submit("fail", "/fail")

	var seen strings.Builder
	grab := func(what, url string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&seen, "\n--- %s\n%s", what, b)
	}
	deadline := time.Now().Add(30 * time.Second) // 5 attempts for the failing job: 1+2+4+8 s
	for {
		j := getJSON(t, d.url+"/jobs/"+failID)
		if j["status"] == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing job did not fail: %v", j)
		}
		time.Sleep(100 * time.Millisecond)
	}
	grab("GET /jobs ok", d.url+"/jobs/"+okID)
	grab("GET /jobs fail", d.url+"/jobs/"+failID)
	grab("SSE", d.url+"/jobs/"+okID+"/stream")
	grab("/health", d.url+"/health")
	grab("/metrics", d.url+"/metrics")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: d.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, id := range []string{okID, failID} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "aquifer_get_job", Arguments: map[string]any{"job_id": id}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res)
		fmt.Fprintf(&seen, "\n--- MCP get_job\n%s", b)
		rr, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "aquifer://jobs/" + id})
		if err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(rr)
		fmt.Fprintf(&seen, "\n--- MCP resource\n%s", b)
	}
	enq, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "aquifer_enqueue_job", Arguments: map[string]any{
		"user_id": "u", "idempotent_key": "mcp", "url": target.URL + "/ok", "headers": headers}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(enq)
	fmt.Fprintf(&seen, "\n--- MCP enqueue\n%s", b)

	a2c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: d.url + "/a2a", Transport: a2a.TransportProtocolJSONRPC}})
	if err != nil {
		t.Fatal(err)
	}
	defer a2c.Destroy()
	sent, err := a2c.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
		a2a.DataPart{Data: map[string]any{"user_id": "u", "idempotent_key": "a2a", "url": target.URL + "/ok", "headers": headers}})})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(sent)
	fmt.Fprintf(&seen, "\n--- A2A send\n%s", b)
	if task, ok := sent.(*a2a.Task); ok {
		got, err := a2c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(got)
		fmt.Fprintf(&seen, "\n--- A2A get\n%s", b)
	}

	// Stop the daemon so its logs are complete, then look.
	_ = d.cmd.Process.Signal(syscallTERM)
	_ = d.cmd.Wait()
	fmt.Fprintf(&seen, "\n--- logs\n%s", d.logs.String())
	out := seen.String()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			i := strings.Index(out, s)
			t.Errorf("secret %s leaked: …%s…", s, out[max(0, i-200):min(len(out), i+100)])
		}
	}
	if !strings.Contains(out, "visible-trace-value") {
		t.Error("a non-secret header was not shown at all: the check proves nothing")
	}
	for _, s := range secrets {
		if !strings.Contains(received.String(), s) {
			t.Errorf("the destination did not receive %s: redaction must only affect what Aquifer shows", s)
		}
	}

	// The webhook secret: in use (the deliveries verify with it), and shown
	// nowhere, in either form (also not in check-config's output).
	cc := exec.Command(aquiferdBinary(t), "check-config")
	cc.Env = append(os.Environ(), "AQUIFER_DATA_DIR="+filepath.Join(t.TempDir(), "cc"), "AQUIFER_WEBHOOK_SECRET="+webhookSecret)
	ccOut, err := cc.CombinedOutput()
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, ccOut)
	}
	out += "\n--- check-config\n" + string(ccOut)
	for _, form := range []string{webhookSecret, strings.TrimPrefix(webhookSecret, "whsec_")} {
		if i := strings.Index(out, form); i >= 0 {
			t.Errorf("the webhook secret leaked: …%s…", out[max(0, i-200):min(len(out), i+100)])
		}
	}
	v, err := webhookverify.NewWithSecret(webhookSecret, webhookverify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(delivered) == 0 {
		t.Fatal("no webhook was delivered: the webhook secret check proves nothing")
	}
	for i, h := range delivered {
		if _, err := v.Verify(h, deliveredBodies[i]); err != nil {
			t.Errorf("delivery %d does not verify with the webhook secret: %v", i, err)
		}
	}
}

const syscallTERM = syscall.SIGTERM
