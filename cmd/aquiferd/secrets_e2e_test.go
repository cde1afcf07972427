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

// TestSecretsNeverLeave runs jobs carrying secret headers and secret URL
// query parameters through every front door, with debug logging, a failing
// destination, an unreachable one and webhooks, then looks for the secrets in
// everything Aquifer shows: its logs, /health, GET /jobs, the SSE stream,
// webhook payloads, MCP tool results and resources, A2A tasks and /metrics.
// The destination and the receiver must still receive them.
func TestSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	secrets := []string{"s3cr3t-bearer-0001", "s3cr3t-apikey-0002", "s3cr3t-cookie-0003", "s3cr3t-token-0004", "s3cr3t-session-0005"}
	// In URLs: the target's access_token (to a closed loopback port, so the
	// transport error names it too) and the webhook's sig.
	const querySecret, sigSecret, a2aSecret = "s3cr3t-query-0006", "s3cr3t-sig-0007", "s3cr3t-a2a-0008"
	urlSecrets := []string{querySecret, sigSecret, a2aSecret}
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
	var hookURLs, hookBodies strings.Builder // what the receiver got: the real URL, and the payloads
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/h" {
			http.NotFound(w, r) // the L8 discovery: this receiver does not speak L8
			return
		}
		hookMu.Lock()
		delivered, deliveredBodies = append(delivered, r.Header.Clone()), append(deliveredBodies, b)
		fmt.Fprintf(&hookURLs, "%s\n", r.URL.RequestURI())
		fmt.Fprintf(&hookBodies, "%s\n", b)
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
	const closed = "http://127.0.0.1:1/p?access_token=" + querySecret + "&x=1"
	downIDs := submitJobs(t, d.url, 1, 1, func(int) string {
		return fmt.Sprintf(`{"user_id":"u","idempotent_key":"down","url":%q,"webhook_url":%q}`, closed, hook.URL+"/h?sig="+sigSecret+"&y=2")
	})
	downID := downIDs[0]
	if downID == "" {
		t.Fatal("the job with secrets in its URLs was not accepted")
	}

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
	deadline := time.Now().Add(40 * time.Second) // 5 attempts for the failing jobs: 1+2+4+8 s, then their webhooks
	for _, id := range []string{failID, downID} {
		for {
			j := getJSON(t, d.url+"/jobs/"+id)
			if w, _ := j["webhook"].(map[string]any); j["status"] == "failed" && w != nil && w["status"] == "delivered" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the failing job was not failed and delivered: %v", j)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	grab("GET /jobs ok", d.url+"/jobs/"+okID)
	grab("GET /jobs fail", d.url+"/jobs/"+failID)
	grab("GET /jobs down", d.url+"/jobs/"+downID)
	grab("SSE", d.url+"/jobs/"+okID+"/stream")
	grab("SSE down", d.url+"/jobs/"+downID+"/stream")
	down := getJSON(t, d.url+"/jobs/"+downID)
	if want := "dial tcp 127.0.0.1:1: connect: connection refused"; down["reason"] != want {
		t.Errorf("reason %q, want %q: the address, not the URL", down["reason"], want)
	}
	if want := "http://127.0.0.1:1/p?access_token=[redacted]&x=1"; down["url"] != want {
		t.Errorf("url %q, want %q", down["url"], want)
	}
	if want := hook.URL + "/h?sig=[redacted]&y=2"; down["webhook_url"] != want {
		t.Errorf("webhook_url %q, want %q", down["webhook_url"], want)
	}
	grab("/health", d.url+"/health")
	grab("/metrics", d.url+"/metrics")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: d.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, id := range []string{okID, failID, downID} {
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
	sentQuery, err := a2c.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser,
		a2a.DataPart{Data: map[string]any{"user_id": "u", "idempotent_key": "a2a-query", "url": target.URL + "/ok?api_key=" + a2aSecret,
			"webhook_url": hook.URL + "/h?sig=" + sigSecret}})})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(sentQuery)
	fmt.Fprintf(&seen, "\n--- A2A send (query)\n%s", b)
	gotTasks := 0
	for _, s := range []a2a.SendMessageResult{sent, sentQuery} {
		if task, ok := s.(*a2a.Task); ok {
			got, err := a2c.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
			if err != nil {
				t.Fatal(err)
			}
			b, _ = json.Marshal(got)
			fmt.Fprintf(&seen, "\n--- A2A get\n%s", b)
			gotTasks++
		}
	}
	if gotTasks != 2 {
		t.Errorf("A2A answered %d tasks, want 2", gotTasks)
	}
	if !strings.Contains(seen.String(), "api_key=[redacted]") {
		t.Error("the A2A task does not show its redacted url: the check proves nothing")
	}

	// Stop the daemon so its logs are complete, then look.
	_ = d.cmd.Process.Signal(syscallTERM)
	_ = d.cmd.Wait()
	fmt.Fprintf(&seen, "\n--- logs\n%s", d.logs.String())
	hookMu.Lock()
	fmt.Fprintf(&seen, "\n--- webhook payloads\n%s", hookBodies.String())
	gotURLs := hookURLs.String()
	hookMu.Unlock()
	out := seen.String()
	if !strings.Contains(out, `"reason":"dial tcp 127.0.0.1:1: connect: connection refused"`) {
		t.Error("no webhook payload or SSE frame with the transport error: the check proves nothing")
	}
	for _, s := range append(secrets, urlSecrets...) {
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
	if !strings.Contains(gotURLs, "/h?sig="+sigSecret+"&y=2") {
		t.Errorf("the receiver was not called at its real URL: %s", gotURLs)
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
