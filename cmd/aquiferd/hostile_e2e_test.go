package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestHostileInputFlood throws 10,000 malformed and oversize requests at a
// running aquiferd from a few concurrent clients, while one more client
// trickles its headers. Every request gets a 4xx (with a JSON error body
// wherever Aquifer, not net/http, answers); the daemon stays up, writes no
// row, cuts the slow client off at its ReadHeaderTimeout, and is back to
// the goroutines it had before.
func TestHostileInputFlood(t *testing.T) {
	t.Parallel()
	const (
		requests = 10_000
		workers  = 4
		maxBody  = 4096
	)
	debugAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	storage := storeEnv(t, "sqlite")
	p := startDaemon(t, append(storage, fmt.Sprintf("AQUIFER_MAX_BODY_BYTES=%d", maxBody), "AQUIFER_DEBUG_ADDR="+debugAddr))
	addr := strings.TrimPrefix(p.url, "http://")

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for range 20 { // warm up: connections, lazily started parts
		getHealth(t, client, p.url)
	}
	client.CloseIdleConnections()
	before := settledGoroutines(t, debugAddr, -1)

	// A slowloris: headers at one byte every 200 ms, never finished.
	slowCtx, stopSlow := context.WithTimeout(context.Background(), 30*time.Second)
	slow := make(chan time.Duration, 1)
	go func() { slow <- slowHeaderClient(slowCtx, addr) }()
	t.Cleanup(func() {
		stopSlow()
		<-slow
	})

	cases := hostileCases(maxBody)
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		textual  = map[string]int{} // answers that are not JSON, by kind of request and status
		failures []string
	)
	failed := map[string]bool{} // each kind of request is reported once
	fail := func(kind, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !failed[kind] {
			failed[kind] = true
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := cases[i%len(cases)]
				status, ct, body, err := c.send(client, p.url, addr)
				if err != nil {
					fail(c.name, "%s: %v", c.name, err)
					continue
				}
				mu.Lock()
				statuses[status]++
				if !strings.HasPrefix(ct, "application/json") {
					textual[fmt.Sprintf("%s %d", c.name, status)]++
				}
				mu.Unlock()
				switch {
				case status < 400 || status > 499:
					fail(c.name, "%s: status %d, want 4xx: %q", c.name, status, trim(body))
				case c.raw && !strings.HasPrefix(ct, "application/json"):
					// net/http refused the request before any handler ran:
					// its answer is plain text ("400 Bad Request", 431).
				case !isJSONError(ct, body):
					fail(c.name, "%s: %d with Content-Type %q, want a JSON error: %q", c.name, status, ct, trim(body))
				}
			}
		}()
	}
	for i := range requests {
		next <- i
	}
	close(next)
	wg.Wait()
	flood := time.Since(start)
	client.CloseIdleConnections()

	total := 0
	for _, n := range statuses {
		total += n
	}
	t.Logf("%d requests (%d kinds) in %v; statuses %s; not JSON: %v", total, len(cases), flood.Round(time.Millisecond),
		fmtStatuses(statuses), textual)
	for _, f := range failures {
		t.Error(f)
	}
	if total != requests {
		t.Errorf("%d of %d requests answered", total, requests)
	}

	// Still alive, nothing stored, nothing queued.
	if p.cmd.ProcessState != nil || p.cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatalf("aquiferd died: %v", p.cmd.ProcessState)
	}
	h := getHealth(t, client, p.url)
	if h.Jobs.Queued != 0 || h.Jobs.InFlight != 0 || h.Jobs.WebhooksPending != 0 {
		t.Errorf("/health reports jobs after the flood: %+v", h.Jobs)
	}
	client.CloseIdleConnections()

	// The slowloris was cut off at the default ReadHeaderTimeout (10 s).
	cut := <-slow
	slow <- cut // for the cleanup
	if cut < 9*time.Second || cut > 15*time.Second {
		t.Errorf("slow header client cut off after %v, want about 10s (ReadHeaderTimeout)", cut)
	}

	after := settledGoroutines(t, debugAddr, before)
	t.Logf("goroutines: %d before, %d after; slow header client cut off after %v", before, after, cut.Round(time.Millisecond))
	if after > before+2 {
		t.Errorf("goroutines grew from %d to %d", before, after)
	}

	// After a clean stop, the database holds no job.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("aquiferd exit: %v\n%s", err, p.logs)
	}
	if n := countJobRows(t, filepath.Join(dataDirOf(t, storage), "aquifer.db")); n != 0 {
		t.Errorf("%d job rows in the database", n)
	}
}

// hostileCase is one kind of bad request.
type hostileCase struct {
	name string
	raw  bool // sent as bytes on its own connection: net/http may refuse it itself
	send func(c *http.Client, base, addr string) (status int, contentType string, body []byte, err error)
}

// viaClient sends a well-formed HTTP request with bad content.
func viaClient(name, method, path, contentType string, body func() io.Reader) hostileCase {
	return hostileCase{name: name, send: func(c *http.Client, base, _ string) (int, string, []byte, error) {
		var rd io.Reader
		if body != nil {
			rd = body()
		}
		req, err := http.NewRequest(method, base+path, rd)
		if err != nil {
			return 0, "", nil, err
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, resp.Header.Get("Content-Type"), b, err
	}}
}

// viaConn writes raw bytes on a new connection and reads one response.
func viaConn(name string, raw string) hostileCase {
	return hostileCase{name: name, raw: true, send: func(_ *http.Client, _, addr string) (int, string, []byte, error) {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return 0, "", nil, err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, raw); err != nil {
			return 0, "", nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, resp.Header.Get("Content-Type"), b, nil
	}}
}

// routed marks a raw request that net/http accepts and passes on.
func routed(c hostileCase) hostileCase {
	c.raw = false
	return c
}

func str(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }

// unsized hides the length, so the body goes chunked.
func unsized(s string) func() io.Reader {
	return func() io.Reader { return io.MultiReader(strings.NewReader(s)) }
}

func job(fields string) string {
	return `{"user_id":"hostile","idempotent_key":"k",` + fields + `}`
}

func hostileCases(maxBody int) []hostileCase {
	const js = "application/json"
	big := strings.Repeat("x", maxBody+1)
	post := func(name, body string) hostileCase { return viaClient(name, http.MethodPost, "/jobs", js, str(body)) }
	cases := []hostileCase{
		// Bad JSON.
		post("empty body", ``),
		post("truncated", `{"user_id":"u","idempotent_key":"k","url":"http://a`),
		post("not json", `user_id=u&url=http://a/`),
		post("array", `[{"user_id":"u"}]`),
		post("null", `null`),
		post("two objects", job(`"url":"http://127.0.0.1:1/"}{"x":1`)),
		post("nan literal", `{"user_id":NaN}`),
		post("deep nesting", `{"x":`+strings.Repeat("[", 1000)+strings.Repeat("]", 1000)+`}`),
		post("invalid utf8", "{\"user_id\":\"\xff\xfe\",\"idempotent_key\":\"k\",\"url\":\"http://a/\"}"),
		// Wrong types.
		post("user_id number", `{"user_id":7,"idempotent_key":"k","url":"http://a/"}`),
		post("headers array", job(`"url":"http://a/","headers":["a"]`)),
		post("header value number", job(`"url":"http://a/","headers":{"X":1}`)),
		post("body object", job(`"url":"http://a/","body":{"a":1}`)),
		post("huge number", job(`"url":"http://a/","method":1e999`)),
		// Missing fields.
		post("empty object", `{}`),
		post("no user_id", `{"idempotent_key":"k","url":"http://a/"}`),
		post("no idempotent_key", `{"user_id":"u","url":"http://a/"}`),
		post("no target", job(`"method":"GET"`)),
		post("blank user_id", `{"user_id":" \t","idempotent_key":"k","url":"http://a/"}`),
		// Invalid URLs and schemes.
		post("url not a url", job(`"url":"not a url"`)),
		post("url no host", job(`"url":"http://"`)),
		post("url dot host", job(`"url":"http://./"`)),
		post("url credentials", job(`"url":"http://user:pw@127.0.0.1/"`)),
		post("url port", job(`"url":"http://127.0.0.1:99999/"`)),
		post("url port zero", job(`"url":"http://127.0.0.1:00000/"`)),
		post("url crlf", job(`"url":"http://a/\r\nX-Injected: 1"`)),
		post("url too long", job(`"url":"http://a/`+strings.Repeat("p", 9000)+`"`)),
		post("scheme ftp", job(`"url":"ftp://127.0.0.1/f"`)),
		post("scheme file", job(`"url":"file:///etc/passwd"`)),
		post("scheme javascript", job(`"url":"javascript:alert(1)"`)),
		post("scheme gopher", job(`"url":"gopher://127.0.0.1:70/"`)),
		post("url and pool", job(`"url":"http://a/","pool_id":"p"`)),
		post("bad pool id", job(`"pool_id":"../p"`)),
		post("webhook scheme", job(`"url":"http://a/","webhook_url":"file:///tmp/x"`)),
		// Bad headers and methods in the job.
		post("header name space", job(`"url":"http://a/","headers":{"Bad Name":"v"}`)),
		post("header name colon", job(`"url":"http://a/","headers":{"X:Y":"v"}`)),
		post("header name empty", job(`"url":"http://a/","headers":{"":"v"}`)),
		post("header hop-by-hop", job(`"url":"http://a/","headers":{"Transfer-Encoding":"chunked"}`)),
		post("header twice", job(`"url":"http://a/","headers":{"x-a":"1","X-A":"2"}`)),
		post("header crlf value", job(`"url":"http://a/","headers":{"X-A":"v\r\nX-B: w"}`)),
		post("too many headers", job(`"url":"http://a/","headers":{`+manyHeaders(101)+`}`)),
		post("method with space", job(`"url":"http://a/","method":"GET /x HTTP/1.1"`)),
		post("method connect", job(`"url":"http://a/","method":"CONNECT"`)),
		post("method too long", job(`"url":"http://a/","method":"`+strings.Repeat("M", 40)+`"`)),
		post("method unicode", job(`"url":"http://a/","method":"GÉT"`)),
		post("user_id control", `{"user_id":"a\u0000b","idempotent_key":"k","url":"http://a/"}`),
		post("key too long", `{"user_id":"u","idempotent_key":"`+strings.Repeat("k", 600)+`","url":"http://a/"}`),
		// Oversize bodies.
		post("oversize", job(`"url":"http://a/","body":"`+big+`"`)),
		viaClient("oversize chunked", http.MethodPost, "/jobs", js, unsized(job(`"url":"http://a/","body":"`+big+`"`))),
		viaClient("oversize challenge", http.MethodPost, "/l8/challenge", js, str(`{"challenge_id":"`+strings.Repeat("c", 9000)+`"}`)),
		// Wrong content.
		viaClient("form body", http.MethodPost, "/jobs", "application/x-www-form-urlencoded", str("user_id=u&idempotent_key=k&url=http%3A%2F%2Fa%2F")),
		viaClient("xml body", http.MethodPost, "/jobs", "application/xml", str(`<job><user_id>u</user_id></job>`)),
		viaClient("binary body", http.MethodPost, "/jobs", "application/octet-stream", str("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")),
		viaClient("challenge not uuid", http.MethodPost, "/l8/challenge", js, str(`{"challenge_id":"sign me","nonce":"x","timestamp":0}`)),
		viaClient("challenge bad json", http.MethodPost, "/l8/challenge", js, str(`{"timestamp":"soon"}`)),
		viaClient("member bad json", http.MethodPost, "/pools/p/members", js, str(`{"member_id":`)),
		viaClient("member bad address", http.MethodPost, "/pools/p/members", js, str(`{"member_id":"m","address":"file:///x","capacity_rps":-1}`)),
		// Garbage paths and ids.
		viaClient("unknown path", http.MethodGet, "/admin", "", nil),
		viaClient("unknown job", http.MethodGet, "/jobs/0190a1b2c3d4e5f60718293a4b5c6d7e", "", nil),
		viaClient("garbage job id", http.MethodGet, "/jobs/%00%ff%2e%2e", "", nil),
		viaClient("long job id", http.MethodGet, "/jobs/"+strings.Repeat("a", 4000), "", nil),
		viaClient("unknown stream", http.MethodGet, "/jobs/0190a1b2c3d4e5f60718293a4b5c6d7e/stream", "", nil),
		viaClient("garbage stream", http.MethodGet, "/jobs/NaN/stream", "", nil),
		viaClient("cancel unknown", http.MethodDelete, "/jobs/ffffffffffffffffffffffffffffffff", "", nil),
		viaClient("cancel garbage", http.MethodDelete, "/jobs/-1", "", nil),
		viaClient("unknown pool", http.MethodGet, "/pools/nope", "", nil),
		viaClient("deep path", http.MethodGet, "/jobs/a/b/c/d/e/f", "", nil),
		viaClient("encoded slash", http.MethodGet, "/jobs/a%2Fb/stream", "", nil),
		// Wrong HTTP methods.
		viaClient("PUT jobs", http.MethodPut, "/jobs", js, str(`{}`)),
		// GET /jobs lists jobs; garbage filters are refused before the store is asked.
		viaClient("list unknown filter", http.MethodGet, "/jobs?bogus=1", "", nil),
		viaClient("list bad limit", http.MethodGet, "/jobs?limit=ten&limit=%00", "", nil),
		viaClient("PATCH job", http.MethodPatch, "/jobs/0190a1b2c3d4e5f60718293a4b5c6d7e", js, str(`{}`)),
		viaClient("POST health", http.MethodPost, "/health", js, str(`{}`)),
		viaClient("DELETE health", http.MethodDelete, "/health", "", nil),
		viaClient("POST stream", http.MethodPost, "/jobs/0190a1b2c3d4e5f60718293a4b5c6d7e/stream", js, str(`{}`)),
		viaClient("GET challenge", http.MethodGet, "/l8/challenge", "", nil),
		viaClient("OPTIONS jobs", http.MethodOptions, "/jobs", "", nil),
		viaClient("TRACE jobs", http.MethodTrace, "/jobs", "", nil),
		viaClient("custom method", "BREW", "/jobs", "", nil),
		// Protocol-level garbage, refused by net/http before any handler.
		viaConn("bad header name", "POST /jobs HTTP/1.1\r\nHost: a\r\nBad Header: x\r\nContent-Length: 2\r\n\r\n{}"),
		viaConn("header without colon", "GET /health HTTP/1.1\r\nHost: a\r\nnocolon\r\n\r\n"),
		viaConn("header name control", "GET /health HTTP/1.1\r\nHost: a\r\nX-\x01: y\r\n\r\n"),
		viaConn("header value control", "GET /health HTTP/1.1\r\nHost: a\r\nX-A: \x00\r\n\r\n"),
		viaConn("oversize header", "GET /health HTTP/1.1\r\nHost: a\r\nX-Big: "+strings.Repeat("b", 80<<10)+"\r\n\r\n"),
		viaConn("oversize header count", "GET /health HTTP/1.1\r\nHost: a\r\n"+strings.Repeat("X-Many: m\r\n", 8000)+"\r\n"),
		viaConn("invalid method token", "GE<T /health HTTP/1.1\r\nHost: a\r\n\r\n"),
		viaConn("garbage request line", "\x00\x01\x02\x03 / HTTP/1.1\r\nHost: a\r\n\r\n"),
		viaConn("request line no version", "GET /health\r\nHost: a\r\n\r\n"),
		viaConn("space in path", "GET /jobs/a b HTTP/1.1\r\nHost: a\r\n\r\n"),
		viaConn("missing host", "GET /health HTTP/1.1\r\n\r\n"),
		viaConn("two hosts", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
		viaConn("conflicting lengths", "POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"),
		viaConn("negative length", "POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"),
		viaConn("length not a number", "POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Length: NaN\r\n\r\n"),
		viaConn("oversize length", "POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{"),
		// Well-formed HTTP that net/http hands to the daemon's handler: the
		// answer is Aquifer's, so a JSON error.
		routed(viaConn("double slash path", "GET //jobs HTTP/1.1\r\nHost: a\r\n\r\n")),
		routed(viaConn("dot-dot path", "GET /jobs/../health HTTP/1.1\r\nHost: a\r\n\r\n")),
		routed(viaConn("connect", "CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")),
		routed(viaConn("asterisk form", "GET * HTTP/1.1\r\nHost: a\r\n\r\n")),
		routed(viaConn("absolute form", "GET http://169.254.169.254/latest/meta-data HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n")),
		viaConn("bad chunk", "POST /jobs HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
	}
	return cases
}

func manyHeaders(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"X-H%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}

func isJSONError(contentType string, body []byte) bool {
	if !strings.HasPrefix(contentType, "application/json") {
		return false
	}
	var e struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error != ""
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

func fmtStatuses(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

type healthDoc struct {
	Status string `json:"status"`
	Jobs   struct {
		Queued          int64 `json:"queued"`
		InFlight        int64 `json:"in_flight"`
		WebhooksPending int64 `json:"webhooks_pending"`
	} `json:"jobs"`
}

func getHealth(t *testing.T, c *http.Client, base string) healthDoc {
	t.Helper()
	resp, err := c.Get(base + "/health")
	if err != nil {
		t.Fatalf("/health: %v", err)
	}
	defer resp.Body.Close()
	var h healthDoc
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %d %v", resp.StatusCode, err)
	}
	return h
}

// goroutineCount reads the daemon's goroutine count from its pprof server.
func goroutineCount(t *testing.T, debugAddr string) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + debugAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatalf("goroutine profile: %v", err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total ")))
	if err != nil {
		t.Fatalf("goroutine profile header %q: %v", line, err)
	}
	return n
}

// settledGoroutines waits for the count to stop moving (and, with target
// >= 0, to come down to target+2) and returns it.
func settledGoroutines(t *testing.T, debugAddr string, target int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	prev, stable := -1, 0
	for {
		n := goroutineCount(t, debugAddr)
		if n == prev {
			stable++
		} else {
			stable = 0
		}
		prev = n
		if stable >= 3 && (target < 0 || n <= target+2) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slowHeaderClient starts a request and sends its headers one byte every
// 200 ms until the server hangs up or ctx ends; it returns how long that
// took.
func slowHeaderClient(ctx context.Context, addr string) time.Duration {
	start := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn) // returns when the server hangs up
	}()
	header := "GET /health HTTP/1.1\r\nHost: a\r\nX-Slow: " + strings.Repeat("s", 1000)
	for i := 0; i < len(header); i++ {
		if _, err := conn.Write([]byte{header[i]}); err != nil {
			break
		}
		select {
		case <-closed:
			return time.Since(start)
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(200 * time.Millisecond):
		}
	}
	select {
	case <-closed:
	case <-ctx.Done():
	}
	return time.Since(start)
}

func dataDirOf(t *testing.T, env []string) string {
	t.Helper()
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "AQUIFER_DATA_DIR="); ok {
			return v
		}
	}
	t.Fatal("no AQUIFER_DATA_DIR")
	return ""
}

// countJobRows counts the jobs table of a stopped daemon's SQLite file.
func countJobRows(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM jobs").Scan(&n); err != nil {
		t.Fatalf("count jobs: %v", err)
	}
	return n
}
