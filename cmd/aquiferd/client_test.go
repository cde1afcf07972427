package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aquiferhq/aquifer/internal/config"
	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// The client mode against the real REST API: an Aquifer on the memory
// store behind its own HTTP handler (as pkg/aquifer serves it), on
// loopback.

// instance is a running Aquifer the client talks to.
type instance struct {
	url string
	aq  *aquifer.Aquifer
}

func newInstance(t *testing.T, tenants ...aquifer.Tenant) *instance {
	t.Helper()
	aq, err := aquifer.New(aquifer.Options{
		Store:   aquifer.NewMemoryStore(),
		Rates:   aquifer.RateTable{Defaults: aquifer.Rate{RPS: 1000, MaxConcurrent: 8}},
		Retry:   aquifer.RetryPolicy{Attempts: 2, Backoff: []time.Duration{10 * time.Millisecond}},
		Tenants: tenants,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := aq.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(aq.Handler(aquifer.HTTPOptions{}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := aq.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return &instance{url: srv.URL, aq: aq}
}

// submit queues a job as tenant ("" in open mode) and returns its id.
func (in *instance) submit(t *testing.T, tenant, key, url string) string {
	t.Helper()
	ctx := t.Context()
	if tenant != "" {
		ctx = aquifer.WithTenant(ctx, tenant)
	}
	res, err := in.aq.Enqueue(ctx, &aquifer.JobRequest{UserID: "shop", IdempotentKey: key, URL: url})
	if err != nil {
		t.Fatalf("enqueue %s: %v", key, err)
	}
	return string(res.JobID)
}

// finish waits for jobs to end and returns their statuses.
func (in *instance) finish(t *testing.T, tenant string, ids ...string) []aquifer.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if tenant != "" {
		ctx = aquifer.WithTenant(ctx, tenant)
	}
	var out []aquifer.Status
	for _, id := range ids {
		j, err := in.aq.Wait(ctx, aquifer.JobID(id))
		if err != nil {
			t.Fatalf("wait for %s: %v", id, err)
		}
		out = append(out, j.Status)
	}
	return out
}

// apiGet is the API's own answer, for comparing with -o json.
func (in *instance) apiGet(t *testing.T, path, key string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, in.url+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// switchable answers 500 while failing is set, 200 after; it counts
// requests.
type switchable struct {
	*httptest.Server
	failing atomic.Bool
	hits    atomic.Int64
}

func newSwitchable(t *testing.T, failing bool) *switchable {
	t.Helper()
	s := &switchable{}
	s.failing.Store(failing)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if s.failing.Load() {
			http.Error(w, "broken deploy", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(s.Close)
	return s
}

// cli runs the client mode as Run does, with a terminal of the test's
// choosing and the environment env.
type cli struct {
	env  map[string]string
	term terminal
}

type result struct {
	stdout, stderr string
	err            error
}

func (c cli) run(t *testing.T, args ...string) result {
	t.Helper()
	return c.runCtx(t.Context(), args...)
}

func (c cli) runCtx(ctx context.Context, args ...string) result {
	var out, errOut bytes.Buffer
	cl := &client{lookup: func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }, term: c.term,
		stdout: &out, stderr: &errOut, now: time.Now, poll: 20 * time.Millisecond}
	err := cl.run(ctx, args[0], args[1:])
	return result{out.String(), errOut.String(), err}
}

// ok runs args and fails the test unless they succeed.
func (c cli) ok(t *testing.T, args ...string) result {
	t.Helper()
	r := c.run(t, args...)
	if r.err != nil {
		t.Fatalf("aquiferd %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r
}

// fails runs args and fails the test unless they fail with want in the
// error.
func (c cli) fails(t *testing.T, want string, args ...string) result {
	t.Helper()
	r := c.run(t, args...)
	if r.err == nil || !strings.Contains(r.err.Error(), want) {
		t.Fatalf("aquiferd %s: error %v, want one containing %q\nstdout:\n%s", strings.Join(args, " "), r.err, want, r.stdout)
	}
	return r
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// rowOf is the table line that mentions id.
func rowOf(t *testing.T, table, id string) string {
	t.Helper()
	for _, l := range lines(table) {
		if strings.Contains(l, id) {
			return l
		}
	}
	t.Fatalf("no line mentions %s in:\n%s", id, table)
	return ""
}

// TestClientJobsList: the table lists the jobs newest first in aligned
// columns with the counts under it; the filters, paging and -o json are
// the API's.
func TestClientJobsList(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	good, bad := newSwitchable(t, false), newSwitchable(t, true)
	var goods, bads []string
	for i := range 3 {
		goods = append(goods, in.submit(t, "", fmt.Sprintf("g%d", i), fmt.Sprintf("%s/orders/%d", good.URL, i)))
	}
	for i := range 2 {
		bads = append(bads, in.submit(t, "", fmt.Sprintf("b%d", i), bad.URL+"/refunds"))
	}
	in.finish(t, "", append(slices.Clone(goods), bads...)...)
	c := cli{env: map[string]string{"AQUIFER_URL": in.url}}

	r := c.ok(t, "jobs", "list")
	if !strings.Contains(r.stderr, "warning: open mode: no API keys are configured") {
		t.Errorf("stderr %q lacks the open-mode warning", r.stderr)
	}
	table := lines(r.stdout)
	head := table[0]
	for _, col := range []string{"JOB", "STATUS", "DESTINATION", "USER", "CREATED", "ATTEMPTS", "RESULT"} {
		if !strings.Contains(head, col) {
			t.Fatalf("header %q lacks %s", head, col)
		}
	}
	if strings.Contains(head, "TENANT") {
		t.Errorf("a TENANT column without tenants: %q", head)
	}
	statusCol := strings.Index(head, "STATUS")
	for i, id := range []string{bads[1], bads[0], goods[2], goods[1], goods[0]} { // newest first
		l := table[i+1]
		if !strings.HasPrefix(l, id) || !(strings.HasPrefix(l[statusCol:], "completed ") || strings.HasPrefix(l[statusCol:], "failed ")) {
			t.Fatalf("row %d %q: want %s first and the status under STATUS (column %d)", i+1, l, id, statusCol)
		}
		if !regexp.MustCompile(`\s\d\d:\d\d:\d\d \((just now|\d+s ago)\)\s`).MatchString(l) {
			t.Errorf("row %q: the creation time should read as local time and how long ago", l)
		}
	}
	if l := rowOf(t, r.stdout, bads[0]); !strings.Contains(l, "HTTP 500 upstream returned 500") || !strings.Contains(l, "/refunds") {
		t.Errorf("failed row %q: want its answer and reason, and its URL", l)
	}
	if !strings.Contains(r.stdout, "matching, by status: queued 0 · in_flight 0 · completed 3 · failed 2") {
		t.Errorf("no counts line:\n%s", r.stdout)
	}

	r = c.ok(t, "jobs", "list", "--status", "failed", "--destination", bad.URL)
	if n := len(lines(r.stdout)); !strings.Contains(r.stdout, bads[0]) || !strings.Contains(r.stdout, bads[1]) || strings.Contains(r.stdout, goods[0]) || n != 5 {
		t.Errorf("failed to %s (%d lines):\n%s", bad.URL, n, r.stdout)
	}
	r = c.ok(t, "jobs", "list", "--q", "orders/1", "--status", "completed,failed")
	if !strings.Contains(r.stdout, goods[1]) || strings.Contains(r.stdout, goods[0]) {
		t.Errorf("--q orders/1:\n%s", r.stdout)
	}
	if r = c.ok(t, "jobs", "list", "--since", "1h", "--before", "1m"); !strings.HasPrefix(r.stdout, "no jobs match\n") {
		t.Errorf("nothing was created over a minute ago:\n%s", r.stdout)
	}

	// -o json is the API's answer as it is.
	r = c.ok(t, "jobs", "list", "-o", "json", "--status", "failed")
	if got, want := strings.TrimSpace(r.stdout), in.apiGet(t, "/jobs?status=failed", ""); got != want {
		t.Errorf("-o json:\n%s\nthe API:\n%s", got, want)
	}

	// Paging: one page and where to go next, or every page.
	r = c.ok(t, "jobs", "list", "--limit", "2")
	if !strings.Contains(r.stdout, "more: add --cursor ") || strings.Contains(r.stdout, goods[2]) {
		t.Errorf("--limit 2:\n%s", r.stdout)
	}
	cursor := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(r.stdout)[1]
	if r = c.ok(t, "jobs", "list", "--limit", "2", "--cursor", cursor); !strings.Contains(r.stdout, goods[2]) || strings.Contains(r.stdout, "matching, by status") {
		t.Errorf("the second page (no counts there):\n%s", r.stdout)
	}
	r = c.ok(t, "jobs", "list", "--limit", "2", "--all")
	if strings.Contains(r.stdout, "more:") || len(lines(r.stdout)) != 8 {
		t.Errorf("--all:\n%s", r.stdout)
	}
	r = c.ok(t, "jobs", "list", "--limit", "2", "--all", "-o", "json")
	var merged struct {
		Jobs       []map[string]any `json:"jobs"`
		NextCursor *string          `json:"next_cursor"`
		Counts     map[string]int   `json:"counts"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &merged); err != nil || len(merged.Jobs) != 5 || merged.NextCursor != nil || merged.Counts["completed"] != 3 {
		t.Errorf("--all -o json: %v %+v", err, merged)
	}

	c.fails(t, `status "dead" is not one of queued, in_flight, completed, failed (HTTP 400)`, "jobs", "list", "--status", "dead")
	c.fails(t, "limit must be 1–500 (HTTP 400)", "jobs", "list", "--limit", "501")
	c.fails(t, "--since: \"yesterday\" is neither a duration", "jobs", "list", "--since", "yesterday")
	c.fails(t, "destination must be scheme://host[:port]", "jobs", "list", "--destination", "api.example.com")
	c.fails(t, `unexpected argument "extra"`, "jobs", "list", "extra")
}

// TestClientJobsGet: one job, field by field, with its attempt history.
func TestClientJobsGet(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	bad := newSwitchable(t, true)
	id := in.submit(t, "", "x", bad.URL+"/refunds?token=s3cret")
	in.finish(t, "", id)
	c := cli{env: map[string]string{"AQUIFER_URL": in.url}}

	r := c.ok(t, "jobs", "get", id)
	for _, want := range []string{"job       " + id, "status    failed", "reason    upstream returned 500", "response  HTTP 500",
		"attempt history, oldest first (2 attempts; a job keeps its last 10):", "AT", "TOOK", "ANSWER"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("jobs get lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "HTTP 500") != 3 || strings.Contains(r.stdout, "s3cret") {
		t.Errorf("want the response and both attempts as HTTP 500, and the URL's secret redacted:\n%s", r.stdout)
	}
	r = c.ok(t, "jobs", "get", "-o", "json", id) // flags before the argument too
	if got, want := strings.TrimSpace(r.stdout), in.apiGet(t, "/jobs/"+id, ""); got != want {
		t.Errorf("-o json:\n%s\nthe API:\n%s", got, want)
	}
	c.fails(t, "job not found (HTTP 404)", "jobs", "get", strings.Repeat("a", 32))

	// A scheduled job shows when it is due and its other options.
	attempts, backoff := 3, 2.0
	res, err := in.aq.Enqueue(t.Context(), &aquifer.JobRequest{UserID: "shop", IdempotentKey: "later", URL: bad.URL + "/later",
		Options: aquifer.OptionsRequest{DelaySeconds: &backoff, MaxWaitSeconds: &backoff, Priority: "high",
			Retry: &aquifer.RetryRequest{MaxAttempts: &attempts, BackoffSeconds: &backoff}}})
	if err != nil {
		t.Fatal(err)
	}
	r = c.ok(t, "jobs", "get", string(res.JobID))
	for label, want := range map[string]string{"status": "queued (scheduled)", "not before": "(in ", "deadline": "(in ",
		"priority": "high", "retry": "3 attempts, backoff 2s doubling up to 300s"} {
		if !regexp.MustCompile(`(?m)^` + label + ` {2,}.*` + regexp.QuoteMeta(want)).MatchString(r.stdout) {
			t.Errorf("jobs get of a scheduled job lacks %s %q:\n%s", label, want, r.stdout)
		}
	}
	c.fails(t, "a job id is required", "jobs", "get")
}

// TestClientRetry: one job, then in bulk: the dry run counts, a refusal
// without a terminal or an answer changes nothing, a yes runs it, and
// --wait follows it to the end.
func TestClientRetry(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	bad := newSwitchable(t, true)
	first := in.submit(t, "", "1", bad.URL)
	in.finish(t, "", first)
	c := cli{env: map[string]string{"AQUIFER_URL": in.url}}

	bad.failing.Store(false)
	r := c.ok(t, "jobs", "retry", first)
	if !strings.HasPrefix(r.stdout, "job "+first+" queued again") || !regexp.MustCompile(`\nstatus    (queued|in_flight)\n`).MatchString(r.stdout) {
		t.Fatalf("jobs retry ID:\n%s", r.stdout)
	}
	if st := in.finish(t, "", first); st[0] != aquifer.StatusCompleted {
		t.Fatalf("the retried job ended %s", st[0])
	}
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	// Closed before the instance stops (cleanups run last first).
	t.Cleanup(func() { close(release) })
	// A job queued or running cannot be retried.
	c.fails(t, "job has not finished", "jobs", "retry", in.submit(t, "", "slow", hang.URL))

	bad.failing.Store(true)
	failed := []string{in.submit(t, "", "2", bad.URL+"/a"), in.submit(t, "", "3", bad.URL+"/b")}
	in.finish(t, "", failed...)
	bad.failing.Store(false)
	hits := bad.hits.Load()

	r = c.ok(t, "jobs", "retry", "--status", "failed", "--destination", bad.URL, "--dry-run")
	if r.stdout != "2 jobs would be retried (dry run: nothing was changed)\n" {
		t.Fatalf("dry run: %q", r.stdout)
	}
	r = c.fails(t, "retry of 2 jobs not confirmed: standard input is not a terminal", "jobs", "retry", "--status", "failed", "--destination", bad.URL)
	if r.stdout != "" {
		t.Errorf("a refusal printed %q", r.stdout)
	}
	no := cli{env: c.env, term: terminal{in: strings.NewReader("n\n"), tty: true}}
	if r = no.fails(t, "not confirmed: nothing was changed", "jobs", "retry", "--status", "failed", "--destination", bad.URL); !strings.HasSuffix(r.stderr, "\nRetry 2 jobs? [y/N] ") {
		t.Errorf("the question: %q", r.stderr)
	}
	if bad.hits.Load() != hits {
		t.Fatal("a refused bulk retry sent requests")
	}
	if st := in.finish(t, "", failed...); st[0] != aquifer.StatusFailed || st[1] != aquifer.StatusFailed {
		t.Fatalf("after the refusals the jobs are %v, want them still failed", st)
	}

	yes := cli{env: c.env, term: terminal{in: strings.NewReader("y\n"), tty: true}}
	r = yes.ok(t, "jobs", "retry", "--status", "failed", "--destination", bad.URL, "--wait")
	if !strings.Contains(r.stderr, "Retry 2 jobs? [y/N] ") || !regexp.MustCompile(`retry op_\S+: 2 of 2 \(100%\), 2 changed, 0 skipped — completed`).MatchString(r.stderr) {
		t.Errorf("--wait's progress on stderr:\n%s", r.stderr)
	}
	if !strings.Contains(r.stdout, "state      completed") || !strings.Contains(r.stdout, "changed    2") || !strings.Contains(r.stdout, "filter     destination="+bad.URL+" status=failed") {
		t.Errorf("the operation at the end:\n%s", r.stdout)
	}
	if st := in.finish(t, "", failed...); st[0] != aquifer.StatusCompleted || st[1] != aquifer.StatusCompleted {
		t.Fatalf("after the bulk retry the jobs are %v", st)
	}
	opID := regexp.MustCompile(`operation\s+(op_\S+)`).FindStringSubmatch(r.stdout)[1]
	if r = c.ok(t, "operations", "list"); !strings.Contains(rowOf(t, r.stdout, opID), "retry") {
		t.Errorf("operations list:\n%s", r.stdout)
	}
	r = c.ok(t, "operations", "get", opID, "-o", "json")
	if got, want := strings.TrimSpace(r.stdout), in.apiGet(t, "/operations/"+opID, ""); got != want {
		t.Errorf("operations get -o json:\n%s\nthe API:\n%s", got, want)
	}

	// Without --wait the operation's id and how to follow it.
	r = c.ok(t, "jobs", "retry", "--status", "completed", "--destination", bad.URL, "--yes")
	if !regexp.MustCompile(`^operation op_\S+ started: retry of 3 jobs\nfollow it: aquiferd operations get op_\S+ --wait\n$`).MatchString(r.stdout) {
		t.Errorf("--yes without --wait: %q", r.stdout)
	}

	c.fails(t, "name a job id or a filter, not both", "jobs", "retry", first, "--status", "failed")
	c.fails(t, "name a job id, or a filter for a bulk retry", "jobs", "retry")
	c.fails(t, "a retry acts on completed and failed jobs only", "jobs", "retry", "--status", "queued", "--yes")
}

// TestClientWaitEnds: --wait reports a failed operation as an error, and
// an interrupted wait says the operation goes on. (The operations are
// served by a stand-in: real ones finish too fast to catch running.)
func TestClientWaitEnds(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/operations/op_stuck":
			n := polls.Add(1)
			fmt.Fprintf(w, `{"id":"op_stuck","kind":"retry","state":"running","total":10,"processed":%d,"changed":%d,"skipped":0,"progress":%g}`,
				min(n, 3), min(n, 3), float64(min(n, 3))/10)
		case "/operations/op_bad":
			fmt.Fprint(w, `{"id":"op_bad","kind":"cancel","state":"failed","total":4,"processed":2,"changed":2,"skipped":0,"progress":0.5,"error":"store unavailable"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":"operation not found"}`)
		}
	}))
	t.Cleanup(srv.Close)
	c := cli{env: map[string]string{"AQUIFER_URL": srv.URL}}

	r := c.fails(t, "operation op_bad failed: store unavailable", "operations", "get", "op_bad", "--wait")
	if !strings.Contains(r.stderr, "cancel op_bad: 2 of 4 (50%), 2 changed, 0 skipped — failed") || !strings.Contains(r.stdout, "error      store unavailable") {
		t.Errorf("a failed operation: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	r = c.runCtx(ctx, "operations", "get", "op_stuck", "--wait")
	if r.err == nil || r.err.Error() != "stopped waiting; operation op_stuck goes on (aquiferd operations get op_stuck --wait)" {
		t.Fatalf("an interrupted wait: %v", r.err)
	}
	if got := lines(r.stderr); len(got) != 3 || got[2] != "retry op_stuck: 3 of 10 (30%), 3 changed, 0 skipped — running" {
		t.Errorf("progress lines (one each time it moves): %q", got)
	}
	c.fails(t, "operation not found (HTTP 404)", "operations", "get", "op_none")
}

// TestClientCancel: one queued job, then every queued job to a paused
// destination, confirmed with --yes and followed with --wait.
func TestClientCancel(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	up := newSwitchable(t, false)
	c := cli{env: map[string]string{"AQUIFER_URL": in.url}}
	c.ok(t, "lanes", "pause", up.URL)
	ids := []string{in.submit(t, "", "1", up.URL), in.submit(t, "", "2", up.URL), in.submit(t, "", "3", up.URL)}

	r := c.ok(t, "jobs", "cancel", ids[0])
	if !strings.HasPrefix(r.stdout, "job "+ids[0]+" canceled") || !strings.Contains(r.stdout, "reason    canceled") {
		t.Fatalf("jobs cancel ID:\n%s", r.stdout)
	}
	r = c.ok(t, "jobs", "cancel", "--status", "queued", "--destination", up.URL, "--dry-run", "-o", "json")
	if strings.TrimSpace(r.stdout) != `{"dry_run":true,"count":2}` {
		t.Fatalf("dry run -o json: %q", r.stdout)
	}
	r = c.ok(t, "jobs", "cancel", "--status", "queued", "--destination", up.URL, "--yes", "--wait", "-o", "json")
	var op struct {
		State   string `json:"state"`
		Changed int    `json:"changed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &op); err != nil || op.State != "completed" || op.Changed != 2 {
		t.Fatalf("bulk cancel --wait -o json: %v %q", err, r.stdout)
	}
	for _, st := range in.finish(t, "", ids...) {
		if st != aquifer.StatusFailed {
			t.Fatalf("after the cancel a job is %s", st)
		}
	}
	if up.hits.Load() != 0 {
		t.Fatal("a canceled job was sent")
	}
	if r = c.ok(t, "jobs", "cancel", "--status", "queued", "--destination", up.URL); r.stderr != "warning: "+openModeWarning+"\nno jobs match: nothing to cancel\n" {
		t.Errorf("nothing left to cancel: stderr %q", r.stderr)
	}
}

const openModeWarning = "open mode: no API keys are configured; anyone who can reach this address can list, retry, cancel and pause"

// TestClientLanes: pause holds a destination's jobs, the lane shows it,
// resume releases them.
func TestClientLanes(t *testing.T) {
	t.Parallel()
	in := newInstance(t)
	up := newSwitchable(t, false)
	c := cli{env: map[string]string{"AQUIFER_URL": in.url}}
	dest := "http://" + up.Listener.Addr().String()

	r := c.ok(t, "lanes", "pause", dest, "--reason", "partner incident 7")
	if !strings.HasPrefix(r.stdout, dest+" paused: ") || !strings.Contains(r.stdout, "partner incident 7") {
		t.Fatalf("lanes pause:\n%s", r.stdout)
	}
	id := in.submit(t, "", "held", up.URL+"/x")
	r = c.ok(t, "lanes", "list")
	head := lines(r.stdout)[0]
	for _, col := range []string{"DESTINATION", "STATE", "PACE", "CEILING", "PACED BY", "BACKLOG", "IN FLIGHT", "OLDEST WAITING", "LAST ERROR"} {
		if !strings.Contains(head, col) {
			t.Fatalf("lanes list header %q lacks %s", head, col)
		}
	}
	l := rowOf(t, r.stdout, dest)
	if f := strings.Fields(l); f[1] != "paused" || !strings.Contains(l, "1,000 rps, 8 at once") {
		t.Errorf("the paused lane's row %q", l)
	}
	if col := strings.Index(head, "BACKLOG"); !strings.HasPrefix(l[col:], "1 ") {
		t.Errorf("row %q: the backlog of 1 is not under BACKLOG", l)
	}
	r = c.ok(t, "lanes", "get", dest)
	for _, want := range []string{"destination     " + dest, "state           paused", "partner incident 7", "backlog         1 queued"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lanes get lacks %q:\n%s", want, r.stdout)
		}
	}
	r = c.ok(t, "lanes", "get", dest, "-o", "json")
	age := regexp.MustCompile(`"oldest_queued_age_seconds":[0-9.e+-]+`) // computed when the view is rendered
	if got, want := age.ReplaceAllString(strings.TrimSpace(r.stdout), ""), age.ReplaceAllString(in.apiGet(t, lanePath(dest), ""), ""); got != want || !strings.Contains(got, `"reason":"partner incident 7"`) {
		t.Errorf("lanes get -o json:\n%s\nthe API:\n%s", got, want)
	}
	if up.hits.Load() != 0 {
		t.Fatal("a job was sent to a paused destination")
	}

	r = c.ok(t, "lanes", "resume", dest)
	if !strings.HasPrefix(r.stdout, dest+" resumed") || strings.Contains(r.stdout, "partner incident 7") {
		t.Errorf("lanes resume:\n%s", r.stdout)
	}
	if st := in.finish(t, "", id); st[0] != aquifer.StatusCompleted {
		t.Fatalf("after resume the job is %s", st[0])
	}
	c.fails(t, "a destination (scheme://host[:port] or pool:ID) is required", "lanes", "pause")
	c.fails(t, "destination must be scheme://host[:port]", "lanes", "get", "nowhere")
}

// TestClientKeys: with tenants, the key comes from --api-key or
// AQUIFER_API_KEY; a tenant sees its own jobs and may not pause; an admin
// sees every tenant's, named; no key is a 401 that says what to set.
func TestClientKeys(t *testing.T) {
	t.Parallel()
	in := newInstance(t, aquifer.Tenant{Name: "alpha", KeySHA256: config.HashKey("alpha-key")},
		aquifer.Tenant{Name: "bravo", KeySHA256: config.HashKey("bravo-key")},
		aquifer.Tenant{Name: "ops", KeySHA256: config.HashKey("ops-key"), Role: aquifer.RoleAdmin})
	up := newSwitchable(t, false)
	id := in.submit(t, "alpha", "1", up.URL)
	in.finish(t, "alpha", id)

	anon := cli{env: map[string]string{"AQUIFER_URL": in.url}}
	anon.fails(t, "an API key is required: send Authorization: Bearer <key> (set --api-key or AQUIFER_API_KEY) (HTTP 401)", "jobs", "list")

	alpha := cli{env: map[string]string{"AQUIFER_URL": in.url, "AQUIFER_API_KEY": "alpha-key"}}
	r := alpha.ok(t, "jobs", "list")
	if !strings.Contains(r.stdout, id) || strings.Contains(lines(r.stdout)[0], "TENANT") || r.stderr != "" {
		t.Errorf("alpha's own listing (no tenant column, no open-mode warning):\n%s\nstderr %q", r.stdout, r.stderr)
	}
	if r = anon.ok(t, "jobs", "list", "--api-key", "bravo-key"); strings.Contains(r.stdout, id) {
		t.Errorf("bravo sees alpha's job:\n%s", r.stdout)
	}
	anon.fails(t, "job not found (HTTP 404)", "jobs", "get", id, "--api-key", "bravo-key")
	alpha.fails(t, "only an admin key may pause or resume lanes (HTTP 403)", "lanes", "pause", up.URL)

	admin := cli{env: map[string]string{"AQUIFER_URL": in.url, "AQUIFER_API_KEY": "ops-key"}}
	r = admin.ok(t, "jobs", "list")
	if l := rowOf(t, r.stdout, id); !strings.Contains(lines(r.stdout)[0], "TENANT") || !regexp.MustCompile(`\salpha\s+shop\s`).MatchString(l) {
		t.Errorf("the admin's listing: want a TENANT column with alpha, and the user as alpha named it:\n%s", r.stdout)
	}
	admin.ok(t, "lanes", "pause", up.URL)
	admin.ok(t, "lanes", "resume", up.URL)
}

// TestClientReachAndUsage: what goes wrong before the API answers is said
// with the URL or the flag concerned.
func TestClientReachAndUsage(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	notAquifer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<html>hello</html>")
	}))
	t.Cleanup(notAquifer.Close)

	c := cli{env: map[string]string{}}
	c.fails(t, "cannot reach Aquifer at http://"+addr+": connection refused", "jobs", "list", "--url", "http://"+addr)
	c.fails(t, `--url "": want the instance's base URL`, "lanes", "list", "--url", "")
	env := cli{env: map[string]string{"AQUIFER_URL": "http://" + addr + "/"}}
	env.fails(t, "cannot reach Aquifer at http://"+addr+": connection refused", "lanes", "list")
	c.fails(t, `--url "localhost:8080": want the instance's base URL`, "jobs", "list", "--url", "localhost:8080")
	c.fails(t, "is not Aquifer's", "jobs", "list", "--url", notAquifer.URL)
	c.fails(t, `want table or json, not "yaml"`, "jobs", "list", "-o", "yaml")
	c.fails(t, `jobs: unknown command "frob"`, "jobs", "frob")
	c.fails(t, "lanes: name a command (list, get, pause, resume)", "lanes")
	if r := c.ok(t, "jobs", "-help"); !strings.Contains(r.stdout, "Usage: aquiferd jobs <command>") {
		t.Errorf("jobs -help: %q", r.stdout)
	}
	if r := c.ok(t, "jobs", "retry", "-help"); !strings.Contains(r.stderr, "-dry-run") {
		t.Errorf("jobs retry -help: %q", r.stderr)
	}
	out, _, err := runCLI(t, nil, "help")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"jobs list", "jobs get ID", "jobs retry ID", "jobs cancel ID", "lanes list", "lanes get DEST", "lanes pause DEST", "lanes resume DEST", "operations list"} {
		if !strings.Contains(out, "\n  "+cmd) {
			t.Errorf("aquiferd help does not list %q", cmd)
		}
	}
}

// TestClientExitStatus runs the binary: a failing call exits non-zero with
// the reason on one line of stderr.
func TestClientExitStatus(t *testing.T) {
	t.Parallel()
	bin := aquiferdBinary(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	cmd := exec.Command(bin, "jobs", "list", "--url", "http://"+addr)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("jobs list against a closed port: %v, want a non-zero exit", err)
	}
	if msg := stderr.String(); strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "aquiferd: cannot reach Aquifer at http://"+addr+": connection refused") || stdout.Len() != 0 {
		t.Fatalf("stderr %q, stdout %q", msg, stdout.String())
	}
}

func TestClientFormats(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{0: "just now", 45 * time.Second: "45s ago", 3*time.Minute + 59*time.Second: "3m ago",
		5 * time.Hour: "5h ago", 47 * time.Hour: "47h ago", 72 * time.Hour: "3d ago", -30 * time.Second: "in 30s"} {
		if got := ago(d); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := humanInt(n); got != want {
			t.Errorf("humanInt(%d) = %q, want %q", n, got, want)
		}
	}
	for r, want := range map[float64]string{2: "2", 12.5: "12.5", 0.25: "0.25", 1500: "1,500", 2.3456: "2.35"} {
		if got := humanRate(r); got != want {
			t.Errorf("humanRate(%v) = %q, want %q", r, got, want)
		}
	}
	for in, want := range map[string]string{"15m": "2026-05-01T11:45:00.000Z", "3d": "2026-04-28T12:00:00.000Z",
		"2026-04-30T10:00:00+02:00": "2026-04-30T08:00:00.000Z"} {
		if got, err := parseWhen(in, now); err != nil || got != want {
			t.Errorf("parseWhen(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"soon", "-5m", "xd", ""} {
		if got, err := parseWhen(bad, now); err == nil {
			t.Errorf("parseWhen(%q) = %q, want an error", bad, got)
		}
	}
	var ts struct{ A, B, C, D apiTime }
	if err := json.Unmarshal([]byte(`{"A":1777636800000,"B":"2026-05-01T12:00:00.000Z","C":null,"D":0}`), &ts); err != nil {
		t.Fatal(err)
	}
	if !ts.A.Equal(ts.B.Time) || !ts.A.Equal(time.UnixMilli(1777636800000)) || !ts.C.IsZero() || !ts.D.IsZero() {
		t.Errorf("apiTime: %+v", ts)
	}
	if err := json.Unmarshal([]byte(`{"A":"yesterday"}`), &ts); err == nil {
		t.Error("apiTime took \"yesterday\"")
	}
	c := &client{now: func() time.Time { return now }}
	if got := c.when(now.Add(-3 * time.Minute)); !strings.HasSuffix(got, " (3m ago)") {
		t.Errorf("when: %q", got)
	}
	f := map[string]any{"status": []any{"failed", "completed"}, "created_after": float64(1777636800000), "q": "", "response_status": float64(503)}
	if got, want := filterText(f), "created_after="+time.UnixMilli(1777636800000).Local().Format(time.RFC3339)+" response_status=503 status=failed,completed"; got != want {
		t.Errorf("filterText: %q, want %q", got, want)
	}
	if got := filterText(map[string]any{}); got != "(every job)" {
		t.Errorf("filterText of nothing: %q", got)
	}
	if got := lanePath("https://api.example.com:443"); got != "/lanes/https%3A%2F%2Fapi.example.com%3A443" {
		t.Errorf("lanePath: %q", got)
	}
}
