package aquifer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

// destination is a loopback HTTP server standing in for the API jobs are
// sent to.
func destination() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "hello from %s %s", r.Method, r.URL.Path)
	}))
}

// Embed Aquifer with the REST API as its front door: submit a job over
// HTTP, as any client of aquiferd would, and wait for its result in Go.
func Example() {
	dest := destination()
	defer dest.Close()

	front := aquifer.NewHTTPAdapter("127.0.0.1:0", aquifer.HTTPOptions{})
	aq, err := aquifer.New(aquifer.Options{
		Store:      aquifer.NewMemoryStore(), // OpenSQLite, OpenPebble or OpenPostgres for durable jobs
		CloseStore: true,
		Rates:      aquifer.RateTable{Defaults: aquifer.Rate{RPS: 20, MaxConcurrent: 2}},
		Adapters:   []aquifer.Adapter{front},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer aq.Stop(ctx)

	body := fmt.Sprintf(`{"user_id":"acct-7","idempotent_key":"order-991","url":%q,"method":"POST"}`, dest.URL+"/orders")
	resp, err := http.Post("http://"+front.Addr().String()+"/jobs", "application/json", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	var created struct {
		JobID  aquifer.JobID `json:"job_id"`
		Status string        `json:"status"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, created.Status)

	job, err := aq.Wait(ctx, created.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status, job.Result.ResponseStatus, string(job.Result.Body))
	// Output:
	// 201 Created queued
	// completed 200 hello from POST /orders
}

func ExampleAquifer_Enqueue() {
	dest := destination()
	defer dest.Close()

	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer aq.Stop(ctx)

	req := aquifer.JobRequest{
		UserID:        "acct-7",
		IdempotentKey: "invoice-42",
		URL:           dest.URL + "/invoices",
		Method:        "POST",
		Headers:       map[string]string{"Content-Type": "application/json"},
		Body:          `{"amount":42}`,
	}
	first, err := aq.Enqueue(ctx, &req)
	if err != nil {
		log.Fatal(err)
	}
	// The job is durable now; Aquifer sends it when the destination's pace
	// allows. The same (UserID, IdempotentKey) names the same job.
	again, err := aq.Enqueue(ctx, &req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate:", again.Duplicate, "same job:", again.JobID == first.JobID)

	job, err := aq.Wait(ctx, first.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status, job.Attempts, job.Result.ResponseStatus, string(job.Result.Body))

	// Invalid requests are refused with a code, the field and a message.
	_, err = aq.Enqueue(ctx, &aquifer.JobRequest{UserID: "acct-7", IdempotentKey: "x", URL: "ftp://example.com/"})
	fmt.Println(aquifer.ErrorCode(err), aquifer.ErrorField(err))
	// Output:
	// duplicate: true same job: true
	// completed 1 200 hello from POST /invoices
	// invalid url
}

func ExampleAquifer_Subscribe() {
	// The destination takes one request at a time; the first job holds it
	// until release is closed, so the second is still waiting when we
	// subscribe to it.
	release := make(chan struct{})
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		fmt.Fprint(w, "done")
	}))
	defer dest.Close()

	aq, err := aquifer.New(aquifer.Options{
		Store:      aquifer.NewMemoryStore(),
		CloseStore: true,
		Rates:      aquifer.RateTable{Defaults: aquifer.Rate{RPS: 50, MaxConcurrent: 1}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer aq.Stop(ctx)

	enqueue := func(key, path string) aquifer.JobID {
		res, err := aq.Enqueue(ctx, &aquifer.JobRequest{UserID: "u", IdempotentKey: key, URL: dest.URL + path})
		if err != nil {
			log.Fatal(err)
		}
		return res.JobID
	}
	enqueue("first", "/slow")
	second := enqueue("second", "/fast")

	job, sub, err := aq.Subscribe(ctx, second)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	fmt.Println("now:", job.Status)
	close(release)

	for ev := range sub.C {
		switch ev.Type {
		case aquifer.EventPosition: // its place in line, every few seconds while it waits
		case aquifer.EventDispatching:
			fmt.Println("dispatching, attempt", ev.Attempt)
		default:
			fmt.Println(ev.Type, ev.Result.ResponseStatus, string(ev.Result.Body))
		}
		if ev.Type.Terminal() {
			break
		}
	}
	// Output:
	// now: queued
	// dispatching, attempt 1
	// completed 200 done
}

// feedAdapter is a front door in a few dozen lines: it takes job requests
// from a Go channel, submits them, and reports each result.
type feedAdapter struct {
	in  <-chan aquifer.JobRequest
	out chan<- string

	stop func()        // ends the serving loop
	done chan struct{} // closed when it has ended
}

func (f *feedAdapter) Name() string { return "feed" }

// Start runs the serving loop in a goroutine the adapter owns and returns.
func (f *feedAdapter) Start(_ context.Context, aq *aquifer.Aquifer) error {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		for {
			select {
			case <-ctx.Done():
				return
			case req := <-f.in:
				msg := f.run(ctx, aq, &req)
				select {
				case f.out <- msg:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return nil
}

func (f *feedAdapter) run(ctx context.Context, aq *aquifer.Aquifer, req *aquifer.JobRequest) string {
	res, err := aq.Enqueue(ctx, req)
	if err != nil {
		return "refused: " + aquifer.ErrorMessage(err)
	}
	job, err := aq.Wait(ctx, res.JobID)
	if err != nil {
		return "gave up: " + err.Error()
	}
	return fmt.Sprintf("%s → %s %d", req.IdempotentKey, job.Status, job.Result.ResponseStatus)
}

// Stop ends the loop and waits for it; it is safe if Start never ran.
func (f *feedAdapter) Stop(ctx context.Context) error {
	if f.stop == nil {
		return nil
	}
	f.stop()
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func ExampleAdapter() {
	dest := destination()
	defer dest.Close()

	in, out := make(chan aquifer.JobRequest), make(chan string)
	aq, err := aquifer.New(aquifer.Options{
		Store:      aquifer.NewMemoryStore(),
		CloseStore: true,
		Adapters:   []aquifer.Adapter{&feedAdapter{in: in, out: out}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil { // starts the core, then the adapter
		log.Fatal(err)
	}
	in <- aquifer.JobRequest{UserID: "u", IdempotentKey: "ping-1", URL: dest.URL + "/ping"}
	fmt.Println(<-out)
	in <- aquifer.JobRequest{UserID: "u", IdempotentKey: "ping-2"}
	fmt.Println(<-out)

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := aq.Stop(stopCtx); err != nil { // stops the adapter, then the core
		log.Fatal(err)
	}
	// Output:
	// ping-1 → completed 200
	// refused: either url or pool_id is required
}

// Find the jobs that failed while a destination was down, and replay them
// once it is back: a dry run says how many, then an operation re-queues
// them in the background.
func ExampleAquifer_RetryJobs() {
	var down atomic.Bool
	down.Store(true)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "synced %s", r.URL.Path)
	}))
	defer dest.Close()

	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true,
		Retry: aquifer.RetryPolicy{Attempts: 1}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer aq.Stop(ctx)

	res, err := aq.Enqueue(ctx, &aquifer.JobRequest{UserID: "acct-7", IdempotentKey: "sync-1", URL: dest.URL + "/accounts/7"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := aq.Wait(ctx, res.JobID); err != nil {
		log.Fatal(err)
	}

	failed := &aquifer.JobQuery{Statuses: []aquifer.Status{aquifer.StatusFailed}, Destination: dest.URL}
	page, err := aq.ListJobs(ctx, failed)
	if err != nil {
		log.Fatal(err)
	}
	last := page.Jobs[0].History[len(page.Jobs[0].History)-1]
	fmt.Println("failed:", page.Counts[aquifer.StatusFailed], "last answer:", last.Status)

	down.Store(false)
	dry, err := aq.RetryJobs(ctx, failed, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("would retry:", dry.Count)
	run, err := aq.RetryJobs(ctx, failed, false)
	if err != nil {
		log.Fatal(err)
	}
	for {
		op, err := aq.Operation(ctx, run.Operation.ID)
		if err != nil {
			log.Fatal(err)
		}
		if op.Finished() {
			fmt.Println("operation:", op.State, "retried:", op.Changed)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	job, err := aq.Wait(ctx, res.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status, string(job.Result.Body), "attempts recorded:", len(job.History))
	// Output:
	// failed: 1 last answer: 503
	// would retry: 1
	// operation: completed retried: 1
	// completed synced /accounts/7 attempts recorded: 2
}

// Schedule a job for later, at high priority: it is durable at once but
// waits, in no destination's queue, until it is due; then it goes before
// the normal jobs waiting for the same destination. EnqueueBatch takes many
// such requests in one commit.
func ExampleAquifer_Enqueue_delayed() {
	dest := destination()
	defer dest.Close()

	aq, err := aquifer.New(aquifer.Options{Store: aquifer.NewMemoryStore(), CloseStore: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := aq.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer aq.Stop(ctx)

	delay, attempts := 0.2, 3
	res, err := aq.Enqueue(ctx, &aquifer.JobRequest{
		UserID: "acct-7", IdempotentKey: "reminder-5", URL: dest.URL + "/remind", Method: "POST",
		Options: aquifer.OptionsRequest{
			DelaySeconds: &delay, // or NotBefore: a time.Time (aquifer.ParseTime reads the API's forms)
			Priority:     aquifer.PriorityHigh.String(),
			Retry:        &aquifer.RetryRequest{MaxAttempts: &attempts},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	job, err := aq.Get(ctx, res.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status, "scheduled:", job.Scheduled(), "priority:", job.Priority, "attempts allowed:", job.Retry.MaxAttempts)

	job, err = aq.Wait(ctx, res.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status, "sent after its time:", !job.History[0].At.Before(job.NotBefore))

	// Out-of-bounds options are refused naming the field.
	attempts = 100
	_, err = aq.Enqueue(ctx, &aquifer.JobRequest{UserID: "acct-7", IdempotentKey: "reminder-6", URL: dest.URL + "/remind",
		Options: aquifer.OptionsRequest{Retry: &aquifer.RetryRequest{MaxAttempts: &attempts}}})
	fmt.Println(aquifer.ErrorCode(err), aquifer.ErrorField(err))
	// Output:
	// queued scheduled: true priority: high attempts allowed: 3
	// completed sent after its time: true
	// invalid retry.max_attempts
}
