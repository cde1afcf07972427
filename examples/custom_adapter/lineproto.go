package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// maxLine bounds one command line (an ENQUEUE carries the job's body).
const maxLine = 1 << 20

// LineAdapter is a front door speaking a line protocol over TCP. Each
// command is one line; each answer is one line:
//
//	ENQUEUE <job as JSON>   → OK <job_id>            (OK <job_id> duplicate for a resubmission)
//	GET <job_id>            → JOB <job_id> <status>
//	WAIT <job_id>           → DONE <job_id> <status> <response_status> <body or failure reason, JSON-quoted>
//	anything refused        → ERR <code> <message>
//
// The JSON of ENQUEUE has the field names of POST /jobs (user_id,
// idempotent_key, url, method, headers, body, webhook_url, pool_id).
type LineAdapter struct {
	addr string

	mu    sync.Mutex
	aq    *aquifer.Aquifer
	log   *zap.Logger
	ln    net.Listener
	conns map[net.Conn]struct{}
	ctx   context.Context    // ends at Stop: aborts WAITs
	stop  context.CancelFunc // nil until Start
	wg    sync.WaitGroup     // the accept loop and one goroutine per connection
}

var _ aquifer.Adapter = (*LineAdapter)(nil)

// NewLineAdapter returns the adapter, listening on addr once started.
func NewLineAdapter(addr string) *LineAdapter {
	return &LineAdapter{addr: addr, conns: map[net.Conn]struct{}{}}
}

// Name implements aquifer.Adapter.
func (a *LineAdapter) Name() string { return "line" }

// Addr returns the listening address once started, nil before.
func (a *LineAdapter) Addr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ln == nil {
		return nil
	}
	return a.ln.Addr()
}

// Start binds the listener (so a taken port fails Aquifer.Start) and
// accepts connections in the background.
func (a *LineAdapter) Start(ctx context.Context, aq *aquifer.Aquifer) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a.addr)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.aq, a.log, a.ln = aq, aq.Logger().Named("line"), ln
	a.ctx, a.stop = context.WithCancel(context.Background())
	a.wg.Add(1)
	go a.accept(ln)
	return nil
}

// Stop closes the listener and every connection (a WAIT in progress ends
// with ERR), then waits for the adapter's goroutines until ctx ends.
func (a *LineAdapter) Stop(ctx context.Context) error {
	a.mu.Lock()
	if a.stop == nil {
		a.mu.Unlock()
		return nil // never started
	}
	a.stop()
	a.ln.Close()
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *LineAdapter) accept(ln net.Listener) {
	defer a.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed by Stop
		}
		a.mu.Lock()
		if a.ctx.Err() != nil {
			a.mu.Unlock()
			c.Close()
			return
		}
		a.conns[c] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		go a.serve(c)
	}
}

func (a *LineAdapter) serve(c net.Conn) {
	defer a.wg.Done()
	defer func() {
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
	}()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	w := bufio.NewWriter(c)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fmt.Fprintln(w, a.handle(a.ctx, line))
		if err := w.Flush(); err != nil {
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		fmt.Fprintf(w, "ERR %s line longer than %d bytes\n", aquifer.CodeTooLarge, maxLine)
		w.Flush()
	}
}

// handle answers one command.
func (a *LineAdapter) handle(ctx context.Context, line string) string {
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch strings.ToUpper(cmd) {
	case "ENQUEUE":
		req, err := decodeJob(arg)
		if err != nil {
			return "ERR " + aquifer.CodeInvalid + " " + err.Error()
		}
		res, err := a.aq.Enqueue(ctx, req)
		if err != nil {
			return a.refuse(err)
		}
		if res.Duplicate {
			return fmt.Sprintf("OK %s duplicate", res.JobID)
		}
		return fmt.Sprintf("OK %s", res.JobID)
	case "GET":
		j, err := a.aq.Get(ctx, aquifer.JobID(arg))
		if err != nil {
			return a.refuse(err)
		}
		return fmt.Sprintf("JOB %s %s", j.ID, j.Status)
	case "WAIT":
		j, err := a.aq.Wait(ctx, aquifer.JobID(arg))
		if err != nil {
			return a.refuse(err)
		}
		out := string(j.Result.Body)
		if j.Status == aquifer.StatusFailed {
			out = j.Result.Reason
		}
		return fmt.Sprintf("DONE %s %s %d %s", j.ID, j.Status, j.Result.ResponseStatus, strconv.Quote(out))
	default:
		return fmt.Sprintf("ERR %s unknown command %q (ENQUEUE, GET, WAIT)", aquifer.CodeInvalid, cmd)
	}
}

// refuse turns an error into an ERR line: its code and the message the
// caller may see. Internal errors are logged here, at the edge.
func (a *LineAdapter) refuse(err error) string {
	code := aquifer.ErrorCode(err)
	if errors.Is(err, context.Canceled) {
		return "ERR " + aquifer.CodeUnavailable + " shutting down"
	}
	if code == aquifer.CodeInternal {
		a.log.Error("command failed", zap.Error(err))
	}
	return "ERR " + code + " " + aquifer.ErrorMessage(err)
}

// wireJob is the JSON of ENQUEUE.
type wireJob struct {
	UserID        string            `json:"user_id"`
	IdempotentKey string            `json:"idempotent_key"`
	URL           string            `json:"url"`
	PoolID        string            `json:"pool_id"`
	Method        string            `json:"method"`
	Headers       map[string]string `json:"headers"`
	Body          string            `json:"body"`
	WebhookURL    string            `json:"webhook_url"`
}

func decodeJob(s string) (*aquifer.JobRequest, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var w wireJob
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("ENQUEUE wants one JSON object: %v", err)
	}
	return &aquifer.JobRequest{UserID: w.UserID, IdempotentKey: w.IdempotentKey, URL: w.URL, PoolID: w.PoolID,
		Method: w.Method, Headers: w.Headers, Body: w.Body, WebhookURL: w.WebhookURL}, nil
}
