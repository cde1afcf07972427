package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"

	"github.com/aquiferhq/aquifer/internal/config"
)

// The dashboard (/ui/) tested as a person uses it: a real aquiferd with
// loopback targets, a headless Chromium (browser_test.go), and the DOM
// contract of data-test attributes that docs/DASHBOARD.md's pages keep. The
// API is the oracle: what the page shows is checked against what the
// daemon answers, and what a click does is checked in the daemon.

// pages are the dashboard's pages that need nothing but a route; the
// destination and job pages are reached with an id.
var pages = []string{"overview", "destinations", "jobs", "pools", "cluster"}

// TestDashboardInBrowser drives the dashboard of an open-mode daemon: every
// page loads, a job submitted meanwhile appears without a reload, a lane is
// paused and resumed, a failed job is retried from its page, a bulk retry
// shows its dry-run count before it runs, and the pages fit a phone.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	aquiferdBinary(t) // skips with -short
	browser(t)
	work := newTarget(t, nil)
	paced := newTarget(t, http.Header{"X-Aqueduct-Rps": {"5"}}) // holds its lane below the ceiling: a signal to show
	bulk := newTarget(t, nil)
	replay := newTarget(t, nil)
	hooks := newWebhookRecorder(t)
	cfg := paceConfig(t, pace{work.URL, 200, 8}, pace{paced.URL, 50, 4}, pace{bulk.URL, 200, 8},
		pace{replay.URL, 200, 8}, pace{hooks.URL, 200, 8})
	d := startDaemon(t, []string{"CONFIG_PATH=" + cfg, "AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data")})
	a := &api{t: t, base: d.url}

	// A finished job with a secret in its request and a webhook; a lane
	// held by its destination's signal; a pool with a member.
	const secret = "sk_live_do_not_show"
	done := a.submit(jobSpec{url: work.URL + "/v1/things?page=2", method: "POST", webhook: hooks.URL + "/hook",
		headers: map[string]string{"Authorization": "Bearer " + secret, "X-Trace": "t-1"}})
	a.waitJob(done, func(j map[string]any) bool { return j["status"] == "completed" && webhookStatus(j) == "delivered" })
	for i := range 3 {
		a.waitJob(a.submit(jobSpec{url: fmt.Sprintf("%s/slow/%d", paced.URL, i)}), completed)
	}
	a.do(http.MethodPost, "/pools/readers/members",
		fmt.Sprintf(`{"member_id":"m1","address":%q,"capacity_rps":20,"heartbeat_interval_seconds":600}`, work.URL+"/read"), http.StatusOK)

	t.Run("every page loads", func(t *testing.T) {
		b := newTab(t, d.url, 1280, 800)
		b.open("")
		b.ready("overview") // the default route
		b.waitVisible("[data-test=open-mode-banner]")
		for _, sel := range []string{"stat-ingest-rate", "stat-dispatch-rate", "stat-webhook-rate", "stat-backlog", "stat-failed"} {
			if b.text("[data-test="+sel+"]") == "" {
				t.Errorf("[data-test=%s] is empty", sel)
			}
		}
		b.waitVisible("[data-test=chart-rates]")
		b.waitVisible("[data-test=chart-backlog]")
		// The nav reaches every page without a reload.
		b.markLoad()
		for _, p := range pages {
			b.click("a[data-test=nav-" + p + "]")
			b.ready(p)
		}
		b.checkNoReload()

		b.route("#/destinations")
		b.ready("destinations")
		b.waitPresent(laneRow(paced.URL))
		b.route("#/destinations/" + url.QueryEscape(paced.URL))
		b.ready("destination")
		b.waitVisible("[data-test=chart-pace]")
		b.waitTextContains("[data-test=lane-signal]", "x-aqueduct")
		b.waitTextContains("[data-test=lane-details]", "Pacing mode")
		if d := b.text("[data-test=lane-details]"); !strings.Contains(d, "signalled") {
			t.Errorf("lane details %q: want the pacing mode the target's X-Aqueduct headers set (signalled)", d)
		}

		b.route("#/jobs")
		b.ready("jobs")
		b.waitPresent(jobRow(done))
		b.waitText(jobRow(done)+" [data-test=job-status]", "completed")
		b.route("#/jobs/" + done)
		b.ready("job")
		b.waitText("[data-test=job-status]", "completed")
		req := b.text("[data-test=job-request]")
		if strings.Contains(req, secret) || !strings.Contains(req, "[redacted]") || !strings.Contains(req, "X-Trace") {
			t.Errorf("job-request shows %q: want its headers, with the Authorization value redacted", req)
		}
		if n := b.count("[data-test=attempt]"); n != 1 {
			t.Errorf("%d attempts shown, want the one in the history", n)
		}
		b.waitTextContains("[data-test=job-response]", `/v1/things`) // the target's body echoes the path
		b.waitTextContains("[data-test=job-webhook]", "delivered")

		b.route("#/pools")
		b.ready("pools")
		b.waitPresent(`tr[data-test=member-row][data-pool="readers"][data-member="m1"]`)
		b.route("#/cluster")
		b.ready("cluster")
		b.waitVisible("[data-test=cluster-absent]") // SQLite: one process, no cluster
	})

	t.Run("a scheduled job shows when it is due and its options", func(t *testing.T) {
		a := a.in(t)
		b := newTab(t, d.url, 1280, 800)
		id := a.submit(jobSpec{url: work.URL + "/later", options: map[string]any{"delay_seconds": 3600, "priority": "high",
			"max_wait_seconds": 60, "retry": map[string]any{"max_attempts": 3, "backoff_seconds": 2}}})
		b.open("#/jobs/" + id)
		b.ready("job")
		b.waitTextContains("[data-test=job-summary]", "scheduled")
		summary := b.text("[data-test=job-summary]")
		for _, want := range []string{"Not before", "in 60 min", "Deadline", "Priority", "high", "3 attempts, backoff 2 s, doubling"} {
			if !strings.Contains(summary, want) {
				t.Errorf("job summary %q lacks %q", summary, want)
			}
		}
	})

	t.Run("a submitted job appears without a reload", func(t *testing.T) {
		a := a.in(t)
		b := newTab(t, d.url, 1280, 800)
		b.open("#/jobs")
		b.ready("jobs")
		b.markLoad()
		id := a.submit(jobSpec{url: work.URL + "/live"})
		b.waitPresent(jobRow(id))
		a.waitJob(id, completed)
		b.waitText(jobRow(id)+" [data-test=job-status]", "completed")
		b.checkNoReload()
	})

	t.Run("pause and resume a lane", func(t *testing.T) {
		a := a.in(t)
		b := newTab(t, d.url, 1280, 800)
		b.open("#/destinations")
		b.ready("destinations")
		row := laneRow(paced.URL)
		b.waitPresent(row)
		if s := b.text(row + " [data-test=lane-state]"); s != "running" && s != "idle" {
			t.Fatalf("lane-state %q before the pause, want running or idle", s)
		}
		b.click(row + " button[data-test=pause-lane]")
		b.confirmIfAsked()
		b.waitText(row+" [data-test=lane-state]", "paused")
		if l := a.lane(paced.URL); l["paused"] == nil {
			t.Fatalf("the page shows the lane paused, the API does not: %v", l)
		}
		b.click(row + " button[data-test=resume-lane]")
		b.confirmIfAsked()
		b.until(say(row+" lane-state to leave paused"), `(sel) => { const e = document.querySelector(sel);
			return !!e && ["running", "idle"].includes(e.textContent.trim()); }`, row+" [data-test=lane-state]")
		if l := a.lane(paced.URL); l["paused"] != nil {
			t.Fatalf("the page shows the lane resumed, the API does not: %v", l)
		}
	})

	t.Run("retry a failed job from its page", func(t *testing.T) {
		a := a.in(t)
		id := a.failedJobs(replay.URL, 1)[0]
		b := newTab(t, d.url, 1280, 800)
		b.open("#/jobs/" + id)
		b.ready("job")
		b.waitText("[data-test=job-status]", "failed")
		b.markLoad()
		b.click("button[data-test=retry-job]")
		b.waitText("[data-test=job-status]", "completed")
		b.waitPresent("[data-test=attempt]")
		if j := a.job(id); j["status"] != "completed" {
			t.Fatalf("the page shows the job completed; the API: %v", j)
		}
		b.checkNoReload()
	})

	t.Run("bulk retry shows the dry-run count first", func(t *testing.T) {
		a := a.in(t)
		ids := make([]string, 3)
		for i := range ids {
			ids[i] = a.submit(jobSpec{url: fmt.Sprintf("%s/bulk/%d", bulk.URL, i)})
			a.waitJob(ids[i], completed)
		}
		b := newTab(t, d.url, 1280, 800)
		b.open("#/jobs")
		b.ready("jobs")
		// Narrow the listing with the filter form, as a person would.
		b.selectValue("form[data-test=job-filters] select[name=status]", "completed")
		b.typeInto("form[data-test=job-filters] input[name=destination]", bulk.URL)
		b.submitForm("form[data-test=job-filters]")
		b.until(say("only the three jobs to "+bulk.URL+" to be listed"), `(want) => {
			const rows = [...document.querySelectorAll("tr[data-test=job-row]")].map(r => r.dataset.jobId).sort();
			return JSON.stringify(rows) === JSON.stringify(want); }`, sorted(ids))
		b.waitText("[data-test=count-completed]", "3")

		// The dialog shows the count, keeps the keyboard's focus while it is
		// open, and Esc closes it without acting.
		b.click("button[data-test=bulk-retry]")
		b.waitText("[data-test=dry-run-count]", "3")
		for range 6 {
			b.key(kb.Tab)
			var inside bool
			b.eval(`(() => { const d = document.querySelector("[data-test=dry-run-count]").closest("dialog, [role=dialog]");
				return !!d && d.contains(document.activeElement); })()`, &inside)
			if !inside {
				t.Fatalf("Tab moved the focus out of the confirmation dialog, to %s", b.activeElement())
			}
		}
		b.key(kb.Escape)
		b.waitGone("button[data-test=confirm]")
		if ops := a.do(http.MethodGet, "/operations", "", http.StatusOK)["operations"].([]any); len(ops) != 0 {
			t.Fatalf("closing the dialog started an operation: %v", ops)
		}
		b.click("button[data-test=bulk-retry]")
		b.waitText("[data-test=dry-run-count]", "3")
		b.click("button[data-test=confirm]")
		b.waitVisible("[data-test=operation-progress]")
		for _, id := range ids { // run again: a second attempt in each history
			a.waitJob(id, func(j map[string]any) bool { return completed(j) && len(j["history"].([]any)) == 2 })
		}
		ops := a.do(http.MethodGet, "/operations", "", http.StatusOK)["operations"].([]any)
		if len(ops) != 1 || ops[0].(map[string]any)["kind"] != "retry" || ops[0].(map[string]any)["total"] != 3.0 {
			t.Fatalf("operations after the bulk retry: %v", ops)
		}
	})

	t.Run("pages fit a phone", func(t *testing.T) {
		b := newTab(t, d.url, 390, 844)
		// The nav collapses behind a menu button, which opens it.
		b.open("")
		b.ready("overview")
		if b.visible("a[data-test=nav-jobs]") {
			t.Fatal("the nav's links take room at 390 px: the nav should collapse behind a menu button")
		}
		b.click("header button[aria-expanded]")
		b.click("a[data-test=nav-jobs]")
		b.ready("jobs")

		routes := map[string]string{"destination": "#/destinations/" + url.QueryEscape(paced.URL), "job": "#/jobs/" + done}
		for _, p := range pages {
			routes[p] = "#/" + p
		}
		for _, p := range append(pages, "destination", "job") {
			b.open(routes[p])
			b.ready(p)
			b.noHorizontalScroll(p)
		}
	})
}

// TestDashboardWithTenantKeys drives the dashboard of a daemon with API
// keys: the login form appears (no open-mode banner), refuses a wrong key,
// and a tenant's key sees only its own jobs and cannot pause a lane (the
// API's 403 shown as a toast), while an admin key sees every tenant's.
func TestDashboardWithTenantKeys(t *testing.T) {
	t.Parallel()
	aquiferdBinary(t)
	browser(t)
	work := newTarget(t, nil)
	keyA, keyB, keyOps := "aq_alpha_dashboard", "aq_bravo_dashboard", "aq_ops_dashboard"
	yml := fmt.Sprintf(`upstreams:
  %q: {rps: 200, max_concurrent: 8}
tenants:
  - name: alpha
    key_sha256: %s
  - name: bravo
    key_sha256: %s
  - name: ops
    key_sha256: %s
    role: admin
`, strings.TrimPrefix(work.URL, "http://"), config.HashKey(keyA), config.HashKey(keyB), config.HashKey(keyOps))
	cfg := filepath.Join(t.TempDir(), "aquifer.yml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, []string{"CONFIG_PATH=" + cfg, "AQUIFER_DATA_DIR=" + filepath.Join(t.TempDir(), "data")})
	alpha, bravo, ops := &api{t: t, base: d.url, key: keyA}, &api{t: t, base: d.url, key: keyB}, &api{t: t, base: d.url, key: keyOps}
	mine := alpha.submit(jobSpec{url: work.URL + "/alpha"})
	theirs := bravo.submit(jobSpec{url: work.URL + "/bravo"})
	alpha.waitJob(mine, completed)
	bravo.waitJob(theirs, completed)

	t.Run("a tenant logs in and sees only its own", func(t *testing.T) {
		ops := ops.in(t)
		b := newTab(t, d.url, 1280, 800)
		b.open("")
		b.ready("login")
		if b.visible("[data-test=open-mode-banner]") {
			t.Fatal("the open-mode banner is shown on a daemon with API keys")
		}
		b.typeInto("input[data-test=login-key]", "aq_not_a_key")
		b.click("button[data-test=login-submit]")
		b.waitVisible("[data-test=login-error]")

		b.typeInto("input[data-test=login-key]", keyA)
		b.click("button[data-test=login-submit]")
		b.ready("overview")
		if b.visible("[data-test=open-mode-banner]") {
			t.Fatal("the open-mode banner is shown to a tenant's key")
		}
		b.route("#/jobs")
		b.ready("jobs")
		b.waitPresent(jobRow(mine))
		if b.count(jobRow(theirs)) != 0 || b.count("tr[data-test=job-row]") != 1 {
			t.Fatalf("alpha's listing shows %d rows (bravo's job among them: %v), want alpha's one job",
				b.count("tr[data-test=job-row]"), b.count(jobRow(theirs)) != 0)
		}
		// Another tenant's job is not found: the API's error, in a toast
		// or in the page.
		b.route("#/jobs/" + theirs)
		b.until(say(`"job not found" on the page`), `() => [...document.querySelectorAll("main, [data-test=toast]")]
			.some(e => e.textContent.includes("job not found"))`)
		if strings.Contains(b.text("main"), work.URL+"/bravo") {
			t.Fatalf("alpha's dashboard shows bravo's job:\n%s", b.describe())
		}

		// A tenant's key reads the lanes but may not pause one.
		b.route("#/destinations")
		b.ready("destinations")
		row := laneRow(work.URL)
		b.click(row + " button[data-test=pause-lane]")
		b.confirmIfAsked()
		b.waitTextContains("[data-test=toast]", "only an admin key may pause or resume lanes")
		if l := ops.lane(work.URL); l["paused"] != nil {
			t.Fatalf("a tenant's click paused the lane: %v", l)
		}
		if s := b.text(row + " [data-test=lane-state]"); s == "paused" {
			t.Fatalf("the page shows the lane paused after a refusal")
		}

		b.click("button[data-test=logout]")
		b.ready("login")
		var kept bool
		b.eval(fmt.Sprintf(`Object.values(sessionStorage).some(v => v.includes(%s))`, jsString(keyA)), &kept)
		if kept {
			t.Fatal("the key is still in sessionStorage after logout")
		}
	})

	t.Run("an admin key sees every tenant's jobs", func(t *testing.T) {
		b := newTab(t, d.url, 1280, 800)
		b.open("")
		b.ready("login")
		b.typeInto("input[data-test=login-key]", keyOps)
		b.click("button[data-test=login-submit]")
		b.ready("overview")
		b.route("#/jobs")
		b.ready("jobs")
		b.waitPresent(jobRow(mine))
		b.waitPresent(jobRow(theirs))
	})
}

// TestDashboardClusterPage checks the cluster page of two instances on one
// Postgres schema: each instance is a row.
func TestDashboardClusterPage(t *testing.T) {
	t.Parallel()
	aquiferdBinary(t)
	browser(t)
	schema := postgresSchema(t)
	dir := t.TempDir()
	env := func(id string) []string {
		return []string{"AQUIFER_DATA_DIR=" + filepath.Join(dir, id), "AQUIFER_STORE_BACKEND=postgres",
			"AQUIFER_POSTGRES_DSN=" + testDatabaseURL(), "AQUIFER_POSTGRES_SCHEMA=" + schema, "AQUIFER_INSTANCE_ID=" + id}
	}
	d := startDaemon(t, env("ui-one"))
	startDaemon(t, env("ui-two"))
	b := newTab(t, d.url, 1280, 800)
	b.open("#/cluster")
	b.ready("cluster")
	b.until(say("a row for each of the two instances"), `() => {
		const rows = [...document.querySelectorAll("tr[data-test=instance-row]")].map(r => r.textContent);
		return rows.length === 2 && rows.some(t => t.includes("ui-one")) && rows.some(t => t.includes("ui-two")); }`)
	if b.visible("[data-test=cluster-absent]") {
		t.Fatal("cluster-absent is shown for a cluster")
	}
}

// laneRow selects the destinations page's row of the lane to base (a
// target's URL, which is how the API names its lane).
func laneRow(base string) string {
	return fmt.Sprintf(`tr[data-test=lane-row][data-destination=%s]`, jsString(base))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func jobRow(id string) string {
	return fmt.Sprintf(`tr[data-test=job-row][data-job-id="%s"]`, id)
}

// markLoad marks the loaded document, so that checkNoReload can tell a
// reload (which would lose the mark) from the page updating itself.
func (b *tab) markLoad() {
	b.t.Helper()
	b.eval(`window.__aquiferTestMark = "kept"`, nil)
}

func (b *tab) checkNoReload() {
	b.t.Helper()
	var mark *string
	b.eval(`window.__aquiferTestMark`, &mark)
	if mark == nil || *mark != "kept" {
		b.t.Fatal("the page reloaded: the dashboard must update in place")
	}
}

// activeElement describes the focused element, for failures.
func (b *tab) activeElement() string {
	b.t.Helper()
	var s string
	b.eval(`(() => { const e = document.activeElement; if (!e) return "nothing";
		return e.tagName.toLowerCase() + (e.dataset.test ? "[data-test=" + e.dataset.test + "]" : "") + " " + e.textContent.trim().slice(0, 40); })()`, &s)
	return s
}

// confirmIfAsked clicks the confirmation of a dialog if the page opens one
// (a pause may ask for a reason); the answer is what the test then checks.
func (b *tab) confirmIfAsked() {
	b.t.Helper()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if b.visible("button[data-test=confirm]") {
			b.click("button[data-test=confirm]")
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// selectValue chooses value in a select, as a person picking it does: the
// page sees input and change events.
func (b *tab) selectValue(sel, value string) {
	b.t.Helper()
	b.waitVisible(sel)
	var ok bool
	b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s);
		if (![...e.options].some(o => o.value === %s)) return false;
		e.focus(); e.value = %s;
		e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true}));
		return true; })()`, jsString(sel), jsString(value), jsString(value)), &ok)
	if !ok {
		b.t.Fatalf("%s has no option %q", sel, value)
	}
}

// submitForm submits a form as pressing Enter or its button would: with a
// submit event the page handles (form.submit() would skip it and reload).
func (b *tab) submitForm(sel string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`document.querySelector(%s).requestSubmit()`, jsString(sel)), nil)
}

// noHorizontalScroll fails the test if the page is wider than the
// viewport.
func (b *tab) noHorizontalScroll(page string) {
	b.t.Helper()
	var m struct{ Scroll, Viewport int }
	b.eval(`({Scroll: document.documentElement.scrollWidth, Viewport: document.documentElement.clientWidth})`, &m)
	if m.Scroll > m.Viewport {
		var wide []string
		b.eval(`[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
			.slice(0, 5).map(e => e.tagName.toLowerCase() + (e.dataset.test ? "[data-test=" + e.dataset.test + "]" : "") + (e.className ? "." + e.className : ""))`, &wide)
		b.t.Errorf("page %s scrolls sideways at %d px wide: content is %d px (too wide: %v)", page, m.Viewport, m.Scroll, wide)
	}
}

// newTarget is a loopback destination answering every request with 200 and
// a small JSON body, plus headers.
func newTarget(t *testing.T, headers http.Header) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range headers {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// api calls one daemon's REST API as the dashboard does: JSON bodies, and
// the key, if any, as a bearer token.
type api struct {
	t    *testing.T
	base string
	key  string
	n    int // jobs submitted, for unique idempotency keys
}

// do sends one request and decodes the JSON answer, failing the test unless
// the status is want.
func (a *api) do(method, path, body string, want int) map[string]any {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		a.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
	}
	return m
}

type jobSpec struct {
	url, pool, method, body, webhook string
	headers                          map[string]string
	options                          map[string]any // job options (delay_seconds, priority, …)
}

// submit posts a new job and returns its id.
func (a *api) submit(j jobSpec) string {
	a.t.Helper()
	a.n++
	req := map[string]any{"user_id": "dash", "idempotent_key": fmt.Sprintf("dash-%d-%d", time.Now().UnixNano(), a.n)}
	if j.pool != "" {
		req["pool_id"] = j.pool
	} else {
		req["url"] = j.url
	}
	if j.body != "" {
		req["body"] = j.body
	}
	if j.method != "" {
		req["method"] = j.method
	}
	if j.webhook != "" {
		req["webhook_url"] = j.webhook
	}
	if j.headers != nil {
		req["headers"] = j.headers
	}
	for k, v := range j.options {
		req[k] = v
	}
	body, _ := json.Marshal(req)
	return a.do(http.MethodPost, "/jobs", string(body), http.StatusCreated)["job_id"].(string)
}

// in is a copy of a for a subtest: its failures are the subtest's.
func (a *api) in(t *testing.T) *api {
	c := *a
	c.t = t
	return &c
}

func (a *api) job(id string) map[string]any {
	a.t.Helper()
	return a.do(http.MethodGet, "/jobs/"+id, "", http.StatusOK)
}

// waitJob waits until the job satisfies ok.
func (a *api) waitJob(id string, ok func(map[string]any) bool) {
	a.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		j := a.job(id)
		if ok(j) {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("job %s is still %v", id, j)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func completed(j map[string]any) bool { return j["status"] == "completed" }

func webhookStatus(j map[string]any) any {
	w, _ := j["webhook"].(map[string]any)
	return w["status"]
}

func (a *api) lane(dest string) map[string]any {
	a.t.Helper()
	return a.do(http.MethodGet, "/lanes/"+url.PathEscape(dest), "", http.StatusOK)
}

// failedJobs makes n failed jobs to dest at once, without waiting out
// retries: it holds the lane, submits, cancels each job (a canceled job is
// failed, with reason "canceled") and lets the lane go.
func (a *api) failedJobs(dest string, n int) []string {
	a.t.Helper()
	lane := "/lanes/" + url.PathEscape(dest)
	a.do(http.MethodPost, lane+"/pause", `{"reason":"making failed jobs for a test"}`, http.StatusOK)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = a.submit(jobSpec{url: fmt.Sprintf("%s/replay/%d", dest, i)})
		a.do(http.MethodDelete, "/jobs/"+ids[i], "", http.StatusOK)
	}
	a.do(http.MethodPost, lane+"/resume", "", http.StatusOK)
	for _, id := range ids {
		if j := a.job(id); j["status"] != "failed" {
			a.t.Fatalf("canceled job %s is %v", id, j)
		}
	}
	return ids
}

// TestDashboardScreenshots writes docs/img/dashboard-<page>.png (`make
// screenshots` runs it with AQUIFER_SCREENSHOTS=docs/img): every page at
// 1280×800 and the jobs page at a phone's 390 px, from a daemon on Postgres
// seeded with what an operator meets — steady traffic to a lane its
// destination paces, a destination that is down and the jobs that failed
// there, a paused lane with a backlog, and a pool with members. It only
// checks that each page loads; the browser tests above check the pages.
func TestDashboardScreenshots(t *testing.T) {
	dir := os.Getenv("AQUIFER_SCREENSHOTS")
	if dir == "" {
		t.Skip("set AQUIFER_SCREENSHOTS to a directory (make screenshots) to write the dashboard's screenshots")
	}
	aquiferdBinary(t)
	browser(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The API's destination paces itself: it tells Aquifer a rate that
	// swings between 8 and 40 rps every 20 s, under a ceiling of 50.
	start := time.Now()
	swing := func() string {
		phase := float64(time.Since(start)%(20*time.Second)) / float64(20*time.Second)
		if phase > 0.5 {
			phase = 1 - phase
		}
		return fmt.Sprintf("%.1f", 8+64*phase)
	}
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Aqueduct-Rps", swing())
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"path":%q}`, r.URL.Path)
	}))
	t.Cleanup(apiSrv.Close)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	held := newTarget(t, nil)
	farm := newTarget(t, nil)
	hooks := newWebhookRecorder(t)
	cfg := paceConfig(t, pace{apiSrv.URL, 50, 8}, pace{down.URL, 20, 4}, pace{held.URL, 10, 2},
		pace{farm.URL, 200, 8}, pace{hooks.URL, 200, 8})
	d := startDaemon(t, append(storeEnv(t, "postgres"), "CONFIG_PATH="+cfg, "AQUIFER_MAX_OUTAGE_HOLD=12s"))
	a := &api{t: t, base: d.url}

	// Open the pages whose charts are drawn from what the page has seen,
	// so they have history by the time they are shot.
	overview := newTab(t, d.url, 1280, 800)
	overview.open("#/overview")
	overview.ready("overview")
	lane := newTab(t, d.url, 1280, 800)
	lane.open("#/destinations/" + url.QueryEscape(apiSrv.URL))
	lane.ready("destination")
	lanes := newTab(t, d.url, 1280, 800)
	lanes.open("#/destinations")
	lanes.ready("destinations")

	for m, capacity := range map[string]int{"gpu-a": 12, "gpu-b": 20, "gpu-c": 8} {
		a.do(http.MethodPost, "/pools/render-farm/members", fmt.Sprintf(
			`{"member_id":%q,"address":%q,"capacity_rps":%d,"heartbeat_interval_seconds":600}`, m, farm.URL+"/render/"+m, capacity), http.StatusOK)
	}
	for i := range 30 {
		a.submit(jobSpec{url: "", pool: "render-farm", method: "POST", body: fmt.Sprintf("frame-%d", i)})
	}
	a.do(http.MethodPost, "/lanes/"+url.PathEscape(held.URL)+"/pause", `{"reason":"vendor incident 4411"}`, http.StatusOK)
	for i := range 40 {
		a.submit(jobSpec{url: fmt.Sprintf("%s/v2/orders/%d/sync", held.URL, 9100+i), method: "POST"})
	}
	var failed []string
	for i := range 6 {
		failed = append(failed, a.submit(jobSpec{url: fmt.Sprintf("%s/v1/invoices/%d", down.URL, 300+i), method: "POST",
			webhook: hooks.URL + "/aquifer", headers: map[string]string{"Authorization": "Bearer sk_live_example", "Content-Type": "application/json"}}))
	}
	// Steady traffic for the charts: about 30 jobs a second, with webhooks.
	stop := make(chan struct{})
	traffic := make(chan struct{})
	go func() {
		defer close(traffic)
		tick := time.NewTicker(33 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			body := fmt.Sprintf(`{"user_id":"acct-%d","idempotent_key":"shot-%d","url":"%s/v1/things/%d","method":"POST","webhook_url":"%s/aquifer"}`,
				i%9, i, apiSrv.URL, i, hooks.URL)
			resp, err := http.Post(d.url+"/jobs", "application/json", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
			}
		}
	}()
	defer func() { close(stop); <-traffic }()
	for _, id := range failed {
		deadline := time.Now().Add(60 * time.Second)
		for a.job(id)["status"] != "failed" {
			if time.Now().After(deadline) {
				t.Fatalf("job %s to the down destination did not fail: %v", id, a.job(id))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(20 * time.Second) // more history past the failures

	shoot := func(b *tab, name string) {
		t.Helper()
		time.Sleep(1500 * time.Millisecond) // a poll or two after the first data, for charts and relative times
		path := filepath.Join(dir, "dashboard-"+name+".png")
		if err := os.WriteFile(path, b.screenshot(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	shoot(overview, "overview")
	shoot(lane, "destination")
	shoot(lanes, "destinations")
	b := newTab(t, d.url, 1280, 800)
	for _, p := range []struct{ name, route, page string }{
		{"jobs", "#/jobs", "jobs"},
		{"job", "#/jobs/" + failed[0], "job"},
		{"pools", "#/pools", "pools"},
		{"cluster", "#/cluster", "cluster"},
	} {
		b.open(p.route)
		b.ready(p.page)
		shoot(b, p.name)
	}
	phone := newTab(t, d.url, 390, 844)
	phone.open("#/jobs")
	phone.ready("jobs")
	shoot(phone, "jobs-phone")
}
