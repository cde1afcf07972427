// Package aquifer embeds Aquifer, the durable, rate-paced HTTP job queue, in
// a Go program. It is the same core the aquiferd daemon runs (aquiferd is
// built on this package), with the same stores, pacing, retries, signed
// webhooks and front doors.
//
// # Embedding
//
// Build an Aquifer from Options, Start it, submit jobs, Stop it:
//
//	store, err := aquifer.OpenSQLite(ctx, aquifer.SQLiteOptions{Path: "data/aquifer.db"})
//	…
//	aq, err := aquifer.New(aquifer.Options{
//		Store:      store,
//		CloseStore: true, // Stop closes it
//		Rates: aquifer.RateTable{Hosts: map[string]aquifer.Rate{
//			"api.vendor-a.com": {RPS: 10, MaxConcurrent: 3},
//		}},
//		Adapters: []aquifer.Adapter{aquifer.NewHTTPAdapter("127.0.0.1:8080", aquifer.HTTPOptions{})},
//	})
//	…
//	if err := aq.Start(ctx); err != nil { … }
//	defer aq.Stop(shutdownCtx)
//
//	res, err := aq.Enqueue(ctx, &aquifer.JobRequest{
//		UserID: "acct-7", IdempotentKey: "order-991",
//		URL: "https://api.vendor-a.com/orders", Method: "POST", Body: `{"n":1}`,
//	})
//	job, err := aq.Wait(ctx, res.JobID) // or Subscribe, or Get
//
// Enqueue returns once the job is durable. Aquifer sends it when its
// destination's pace allows, retries 5xx answers and transport errors, and
// keeps the result; with a WebhookURL the result is also delivered there.
//
// # Stores
//
// Options.Store is a built-in store (OpenSQLite, OpenPebble, OpenPostgres,
// NewMemoryStore) or any value implementing Store. The caller owns it
// unless Options.CloseStore hands it to Aquifer. pkg/aquifer/storetest runs
// the conformance suite every built-in store passes against a store of your
// own.
//
// # Front doors
//
// An Adapter takes jobs in from the outside world. NewHTTPAdapter serves
// the REST API on its own listener, Aquifer.Handler returns it to mount in
// your own server, and examples/custom_adapter shows a front door of your
// own. docs/ADAPTERS.md describes the built-in ones and how to write one;
// docs/EMBEDDING.md walks through this package.
//
// # Errors
//
// Errors from Aquifer's methods carry a stable code: ErrorCode returns it
// (CodeInvalid, CodeNotFound, CodeRejected, …), ErrorMessage the text that
// may be shown to a caller, ErrorField the offending request field, and
// RetryAfter the wait a rejection asks for.
package aquifer
