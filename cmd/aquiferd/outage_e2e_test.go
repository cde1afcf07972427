package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// downable is a loopback HTTP server on one fixed address that can go down:
// while down it accepts each connection and closes it at once (the client
// sees a transport error), counting them; while up it serves handler.
type downable struct {
	URL   string
	ln    net.Listener
	srv   *http.Server
	conns chan net.Conn
	down  atomic.Bool
	// refused counts connections dropped while down.
	refused atomic.Int64
	done    chan struct{}
}

func newDownable(t *testing.T, handler http.Handler) *downable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &downable{URL: "http://" + ln.Addr().String(), ln: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	d.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(chanListener{d}) }()
	go d.acceptLoop()
	t.Cleanup(func() {
		close(d.done)
		_ = ln.Close()
		_ = d.srv.Close()
	})
	return d
}

func (d *downable) acceptLoop() {
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		if d.down.Load() {
			d.refused.Add(1)
			_ = c.Close()
			continue
		}
		select {
		case d.conns <- c:
		case <-d.done:
			_ = c.Close()
			return
		}
	}
}

// setDown takes the server down (closing the connections it has open, as a
// crashed process would) or brings it back.
func (d *downable) setDown(down bool) {
	d.down.Store(down)
	if down {
		d.srv.SetKeepAlivesEnabled(false)
	} else {
		d.srv.SetKeepAlivesEnabled(true)
	}
}

// chanListener hands the accepted connections of a downable to its server.
type chanListener struct{ d *downable }

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.d.conns:
		return c, nil
	case <-l.d.done:
		return nil, errors.New("closed")
	}
}
func (l chanListener) Close() error   { return nil }
func (l chanListener) Addr() net.Addr { return l.d.ln.Addr() }

// TestDestinationAndReceiverDownForAMinute is the outage of issue 15: the
// target is down for 60 s while 600 jobs arrive at 10/s, and the webhook
// receiver is down too, until 15 s after the target is back. Before outage
// circuits, every job submitted in the first 45 s failed for good. Now every
// job completes and every webhook is delivered after recovery, and the down
// servers see a handful of probes, not five attempts per job.
func TestDestinationAndReceiverDownForAMinute(t *testing.T) {
	t.Parallel()
	const jobs, perSecond = 600, 10
	var targetHits sync.Map
	target := newDownable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Store(r.Header.Get("X-Job-Key"), true)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	var delivered sync.Map
	receiver := newDownable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(body, &p)
		delivered.Store(p.JobID, true)
		w.WriteHeader(http.StatusNoContent)
	}))
	target.setDown(true)
	receiver.setDown(true)

	cfg := paceConfig(t, pace{target.URL, 200, 8}, pace{receiver.URL, 200, 8})
	d := startDaemon(t, append([]string{"CONFIG_PATH=" + cfg}, storeEnv(t, "sqlite")...))

	start := time.Now()
	ids := make([]string, jobs)
	tick := time.NewTicker(time.Second / perSecond)
	for i := range jobs {
		<-tick.C
		body := fmt.Sprintf(`{"user_id":"outage","idempotent_key":"k%d","url":%q,"method":"POST","headers":{"X-Job-Key":"k%d"},"webhook_url":%q}`,
			i, target.URL+"/work", i, receiver.URL+"/hook")
		resp, err := http.Post(d.url+"/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		var out struct {
			JobID string `json:"job_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("submit %d: %d", i, resp.StatusCode)
		}
		ids[i] = out.JobID
		if i == 30*perSecond {
			checkCircuitOpen(t, d.url, target.URL)
		}
	}
	tick.Stop()
	// The target is back 60 s after it went down; the receiver 15 s later.
	time.Sleep(time.Until(start.Add(60 * time.Second)))
	target.setDown(false)
	targetRefused := target.refused.Load()
	time.Sleep(time.Until(start.Add(75 * time.Second)))
	receiver.setDown(false)
	receiverRefused := receiver.refused.Load()

	deadline := time.Now().Add(90 * time.Second) // the next probe is at most a minute away
	for {
		n := 0
		delivered.Range(func(any, any) bool { n++; return true })
		if n >= jobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after recovery, %d of %d webhooks delivered (target refused %d connections, receiver %d)", n, jobs, targetRefused, receiverRefused)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, id := range ids {
		var j struct {
			Status   string `json:"status"`
			Attempts int    `json:"attempts"`
			Webhook  struct {
				Status   string `json:"status"`
				Attempts int    `json:"attempts"`
			} `json:"webhook"`
		}
		getJSONInto(t, d.url+"/jobs/"+id, &j)
		if j.Status != "completed" || j.Webhook.Status != "delivered" {
			t.Fatalf("job k%d: %+v", i, j)
		}
		if j.Attempts > 5 || j.Webhook.Attempts > 5 {
			t.Fatalf("job k%d spent %d attempts and %d deliveries", i, j.Attempts, j.Webhook.Attempts)
		}
		if _, ok := targetHits.Load(fmt.Sprintf("k%d", i)); !ok {
			t.Fatalf("job k%d completed without reaching the target", i)
		}
	}
	// Three jobs failing opened each circuit; then only probes, 1 s
	// doubling. Five attempts per job would have been 3,000.
	if targetRefused > 20 || receiverRefused > 20 {
		t.Fatalf("the down servers saw %d (target) and %d (receiver) attempts; want the few that found them down and the probes", targetRefused, receiverRefused)
	}
	// Stop the daemon so its logs are complete, then look.
	_ = d.cmd.Process.Signal(syscallTERM)
	_ = d.cmd.Wait()
	if !strings.Contains(d.logs.String(), "circuit open") {
		t.Errorf("no log line says the destination is down")
	}
	t.Logf("outage: target saw %d attempts while down, receiver %d; all %d jobs completed and delivered %v after the start",
		targetRefused, receiverRefused, jobs, time.Since(start).Round(time.Second))
}

// checkCircuitOpen asserts that /health and /metrics show target's lane
// with an open circuit and a next probe.
func checkCircuitOpen(t *testing.T, base, target string) {
	t.Helper()
	var h struct {
		Lanes []struct {
			Lane    string `json:"lane"`
			Circuit struct {
				State       string `json:"state"`
				SinceMS     int64  `json:"since_ms"`
				NextProbeMS int64  `json:"next_probe_ms"`
				LastError   string `json:"last_error"`
			} `json:"circuit"`
		} `json:"lanes"`
	}
	getJSONInto(t, base+"/health", &h)
	found := false
	for _, l := range h.Lanes {
		if l.Lane == target {
			found = true
			c := l.Circuit
			if (c.State != "open" && c.State != "half_open") || c.SinceMS == 0 || c.NextProbeMS == 0 || c.LastError == "" {
				t.Fatalf("target lane circuit during the outage: %+v", c)
			}
		}
	}
	if !found {
		t.Fatalf("no lane %s in /health: %+v", target, h.Lanes)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("aquifer_lane_circuit_open{upstream=%q} 1", target); !strings.Contains(string(body), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
}

func getJSONInto(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
