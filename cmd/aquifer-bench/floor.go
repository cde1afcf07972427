package main

// The floor scenario (issue 21): the least work one end-to-end job needs,
// in its own process, measured with the same clients, target and webhook
// receiver as Aquifer's e2e row.
//
// The ceiling says what one trivial HTTP exchange costs on this machine; an
// e2e job is more than three of them. The floor server does exactly the
// work no implementation of the product can leave out, and nothing else:
//
//   - POST /jobs: read and decode the job (Aquifer's own decoder), write it
//     durably with its idempotency key unique (one group-committed SQLite
//     insert, the same driver and sync mode as aquiferd), answer 201;
//   - dispatch it over a kept-alive connection (Aquifer's own HTTP/1.1
//     client, with a deadline per attempt) and read the answer;
//   - write the result durably before the webhook goes out (so a caller who
//     polls after the webhook finds it), as a second group-committed write;
//   - sign the webhook as every Aquifer delivery is signed (Standard
//     Webhooks v1a, Ed25519, with Aquifer's signer), send it, read the
//     answer, and record the delivery (a third write).
//
// Everything else aquiferd does is left out: pacing and lanes, retries and
// backoff, admission control, tenants, auth, metrics, tracing, the
// operator's indexes and listings, the load headers, recovery. So floor CPU
// per job ÷ ceiling CPU per request is what the product's own definition
// costs on this machine, and aquiferd's e2e CPU per job ÷ the floor's is
// what everything else adds.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite"

	"github.com/aquiferhq/aquifer/internal/adapters/inbound/httpkit"
	"github.com/aquiferhq/aquifer/internal/adapters/outbound/egress"
	"github.com/aquiferhq/aquifer/internal/groupcommit"
	"github.com/aquiferhq/aquifer/internal/l8"
)

// Environment of the re-executed floor server.
const (
	envFloorAddr = "AQUIFER_BENCH_FLOOR_ADDR"
	envFloorDir  = "AQUIFER_BENCH_FLOOR_DIR"
	envFloorSync = "AQUIFER_BENCH_FLOOR_SYNC"
	// envFloorDispatch "false": accept jobs and never send them.
	envFloorDispatch = "AQUIFER_BENCH_FLOOR_DISPATCH"
)

const (
	floorWorkers   = 256 // attempts at once, as the e2e row's upstream allows
	floorAttempt   = 30 * time.Second
	floorMaxBody   = 1 << 20
	floorMaxAnswer = 1 << 20
)

// runFloor measures two floor servers, each fresh: one that only ingests
// (it never dispatches, like the ingest row's 1 rps upstream), with the
// ingest row's clients, and one that does the whole job, with the e2e row's
// clients, target and receiver (e2eOn).
func runFloor(ctx context.Context, o options) ([]result, error) {
	target, hooks, closeBoth, err := newTargetAndReceiver()
	if err != nil {
		return nil, err
	}
	defer closeBoth()

	var out []result
	for _, dispatch := range []bool{false, true} {
		d, stop, err := startFloor(ctx, o, dispatch)
		if err != nil {
			return out, err
		}
		var r result
		if dispatch {
			r = e2eOn(ctx, o, d, target, hooks, "floor")
			r.scenario, r.kind = "floor e2e (the least an e2e job needs)", "floor"
		} else {
			w := d.begin(ctx)
			l := submit(ctx, d.url, "", o.jobs, o.clients, o.quiet, "floor ingest", bodyMaker(o, "floor-ingest", target.url()+"/t", hooks.url()+"/hook"))
			r = result{scenario: "floor ingest (the least a durable accept needs)", kind: "floor-ingest", accepted: l.accepted,
				failed: l.rejected + l.errors, ingest: l.rate(), p50: l.percentile(0.5), p99: l.percentile(0.99), max: l.percentile(1),
				lost: -1, rss: d.peakRSS(), note: l.firstErr, cost: w.end(ctx, l.accepted)}
		}
		r.store = ""
		if logs := stop(); logs != "" && (r.lost > 0 || r.failed > 0) {
			r.note = join(r.note, "the floor's output: "+logs)
		}
		out = append(out, r)
	}
	return out, nil
}

// startFloor starts a floor server in its own process with a fresh
// database; dispatch false: it accepts jobs and never sends them. stop
// kills it, removes its database and returns what it logged.
func startFloor(ctx context.Context, o options, dispatch bool) (*daemon, func() string, error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "aquifer-floor-")
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	dieWithBench(cmd)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=127.0.0.1:%d", envFloorAddr, port), envFloorDir+"="+dir,
		envFloorSync+"="+o.sync, envFloorDispatch+"="+strconv.FormatBool(dispatch))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() string {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
		return strings.TrimSpace(logs.String())
	}
	d := &daemon{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}
	if err := d.waitHealthy(ctx, 10*time.Second); err != nil {
		return nil, nil, fmt.Errorf("%w\n%s", err, stop())
	}
	return d, stop, nil
}

// floorServer is what runFloor starts (see the file comment).
type floorServer struct {
	db              *sql.DB
	insert, dup     *sql.Stmt
	finish, deliver *sql.Stmt
	writes          chan *floorOp
	jobs            chan *floorJob
	working         sync.WaitGroup
	closing         chan struct{} // stops the writer
	written         chan struct{} // closed when it stopped
	rt              http.RoundTripper
	id              *l8.Identity
	hold            bool // accept jobs, never send them (set before serving)
}

type floorJob struct {
	seq    int64
	dup    bool // the key was taken: seq is the job that has it
	req    httpkit.JobRequestJSON
	status int    // the destination's answer
	answer []byte // its body
}

// floorOp is one durable write; done is closed once its group committed.
type floorOp struct {
	kind int // opInsert, opFinish, opDeliver
	job  *floorJob
	err  error
	done chan struct{}
}

const (
	opInsert = iota
	opFinish
	opDeliver
)

// floorSchema is one table with the job, its result and its delivery; the
// rowid is the job id, and the idempotency key is unique per user.
const floorSchema = `
CREATE TABLE jobs (
    seq             INTEGER PRIMARY KEY,
    user_id         TEXT    NOT NULL,
    idempotent_key  TEXT    NOT NULL,
    method          TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    headers         TEXT    NOT NULL,
    body            BLOB,
    webhook_url     TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    response_status INTEGER NOT NULL DEFAULT 0,
    response_body   BLOB,
    delivered_at    INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotent_key);
`

// serveFloor runs the floor server on addr with its database in dir, until
// the process is killed. With AQUIFER_DEBUG_ADDR set it also serves
// net/http/pprof there, as aquiferd does.
func serveFloor(addr, dir, syncMode string, dispatch bool) error {
	s, err := newFloorServer(dir, syncMode)
	if err != nil {
		return err
	}
	s.hold = !dispatch
	if debug := os.Getenv("AQUIFER_DEBUG_ADDR"); debug != "" {
		go func() { _ = http.ListenAndServe(debug, pprofMux()) }()
	}
	return (&http.Server{Addr: addr, Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}).ListenAndServe()
}

// newFloorServer opens the floor's database in dir (sync "normal" or
// "full") and starts its writer and workers; close stops them.
func newFloorServer(dir, syncMode string) (*floorServer, error) {
	if syncMode != "normal" {
		syncMode = "full"
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "floor.db")+"?_txlock=immediate"+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous("+strings.ToUpper(syncMode)+")&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // the writer's
	if _, err := db.Exec(floorSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("schema: %w", err)
	}
	s := &floorServer{db: db, writes: make(chan *floorOp, 4096), jobs: make(chan *floorJob, 1<<16),
		closing: make(chan struct{}), written: make(chan struct{}),
		rt: egress.NewClient(egress.Options{}).Transport}
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&s.insert, `INSERT INTO jobs (user_id, idempotent_key, method, url, headers, body, webhook_url, status, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?) ON CONFLICT (user_id, idempotent_key) DO NOTHING`},
		{&s.dup, `SELECT seq FROM jobs WHERE user_id = ? AND idempotent_key = ?`},
		{&s.finish, `UPDATE jobs SET status = 'succeeded', response_status = ?, response_body = ? WHERE seq = ?`},
		{&s.deliver, `UPDATE jobs SET delivered_at = ? WHERE seq = ?`},
	} {
		if *p.st, err = db.Prepare(p.sql); err != nil {
			db.Close()
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.id = l8.NewIdentity(key)
	go func() {
		defer close(s.written)
		groupcommit.Run(s.writes, s.closing, groupcommit.Options{MaxBatch: 1024, GatherYields: 2}, s.commit)
	}()
	for range floorWorkers {
		s.working.Go(s.work)
	}
	return s, nil
}

// pprofMux serves net/http/pprof's handlers.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	return mux
}

func (s *floorServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", serveRuntimeMetrics)
	mux.HandleFunc("POST /jobs", s.postJob)
	return mux
}

// close stops the workers once the jobs handed to them are done, then the
// writer, and closes the database. No request may arrive after it starts.
func (s *floorServer) close() error {
	close(s.jobs)
	s.working.Wait()
	close(s.closing)
	<-s.written
	return s.db.Close()
}

func (s *floorServer) postJob(w http.ResponseWriter, r *http.Request) {
	j := &floorJob{}
	if !httpkit.DecodeBody(w, r, &j.req, floorMaxBody) {
		return
	}
	if j.req.UserID == "" || j.req.IdempotentKey == "" || j.req.URL == "" || j.req.WebhookURL == "" {
		httpkit.WriteError(w, http.StatusBadRequest, "user_id, idempotent_key, url and webhook_url are required")
		return
	}
	if j.req.Method == "" {
		j.req.Method = http.MethodPost
	}
	if err := s.write(opInsert, j); err != nil {
		httpkit.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := strconv.AppendInt([]byte(`{"job_id":"`), j.seq, 10)
	w.Header().Set("Content-Type", "application/json")
	if j.dup { // already accepted: not sent again
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(out, `","status":"queued","duplicate":true}`...))
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(out, `","status":"queued"}`...))
	if !s.hold {
		s.jobs <- j
	}
}

// write hands one op to the writer and waits for its commit.
func (s *floorServer) write(kind int, j *floorJob) error {
	op := &floorOp{kind: kind, job: j, done: make(chan struct{})}
	s.writes <- op
	<-op.done
	return op.err
}

// commit applies one group in one transaction and answers its ops.
func (s *floorServer) commit(group []*floorOp) {
	err := s.apply(group)
	for _, op := range group {
		if op.err == nil {
			op.err = err
		}
		close(op.done)
	}
}

func (s *floorServer) apply(group []*floorOp) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	ins, dup, fin, dlv := tx.Stmt(s.insert), tx.Stmt(s.dup), tx.Stmt(s.finish), tx.Stmt(s.deliver)
	now := time.Now().UnixMilli()
	for _, op := range group {
		j := op.job
		switch op.kind {
		case opInsert:
			headers, _ := json.Marshal(j.req.Headers)
			res, err := ins.Exec(j.req.UserID, j.req.IdempotentKey, j.req.Method, j.req.URL, headers, j.req.Body, j.req.WebhookURL, now)
			if err != nil {
				op.err = err
				continue
			}
			if n, _ := res.RowsAffected(); n == 0 { // a duplicate: its job
				j.dup = true
				op.err = dup.QueryRow(j.req.UserID, j.req.IdempotentKey).Scan(&j.seq)
				continue
			}
			j.seq, op.err = res.LastInsertId()
		case opFinish:
			_, op.err = fin.Exec(j.status, j.answer, j.seq)
		case opDeliver:
			_, op.err = dlv.Exec(now, j.seq)
		}
	}
	return tx.Commit()
}

// work runs jobs: dispatch, result, signed webhook, delivery.
func (s *floorServer) work() {
	for j := range s.jobs {
		h := make(http.Header, len(j.req.Headers))
		for k, v := range j.req.Headers {
			h[http.CanonicalHeaderKey(k)] = []string{v}
		}
		status, answer, err := s.send(j.req.Method, j.req.URL, h, []byte(j.req.Body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor: dispatch:", err)
			continue
		}
		j.status, j.answer = status, answer
		if err := s.write(opFinish, j); err != nil {
			fmt.Fprintln(os.Stderr, "floor: result:", err)
			continue
		}
		id := strconv.FormatInt(j.seq, 10)
		payload, _ := json.Marshal(struct {
			JobID          string `json:"job_id"`
			Status         string `json:"status"`
			ResponseStatus int    `json:"response_status"`
			Body           string `json:"body"`
		}{id, "succeeded", status, string(answer)})
		wh := http.Header{"Content-Type": {"application/json"}}
		l8.SignStandardHeaders(wh, "msg_"+id, payload, time.Now(), nil, s.id)
		if _, _, err := s.send(http.MethodPost, j.req.WebhookURL, wh, payload); err != nil {
			fmt.Fprintln(os.Stderr, "floor: webhook:", err)
			continue
		}
		if err := s.write(opDeliver, j); err != nil {
			fmt.Fprintln(os.Stderr, "floor: delivery:", err)
		}
	}
}

// send makes one attempt under its own deadline and reads the whole answer.
func (s *floorServer) send(method, url string, h http.Header, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), floorAttempt)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = h
	resp, err := s.rt.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, floorMaxAnswer))
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode >= 500 {
		return 0, nil, errors.New("floor: " + resp.Status)
	}
	return resp.StatusCode, answer, nil
}
