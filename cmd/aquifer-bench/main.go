// Command aquifer-bench measures Aquifer on this machine. It starts its own
// loopback target and webhook receiver, starts a fresh aquiferd (or uses one
// at -addr), submits jobs with concurrent clients and prints a table.
//
// Scenarios (-scenario, comma-separated; default "ceiling,ingest,e2e"):
//
//	ceiling  a trivial Go HTTP server answering POSTs, driven by the same
//	         clients: the most any HTTP service can take here.
//	ingest   durable ingest only: jobs target an upstream paced at 1 rps, so
//	         nothing competes with accepting them.
//	e2e      accepted → target hit → webhook received, against a loopback
//	         target configured for a high rate; every webhook must arrive.
//	backlog  queue -backlog jobs against a 2 rps upstream and report the
//	         daemon's peak RSS: the store is the queue, memory is a window.
//	pacing   configure an upstream at 20, 200 and 2,000 rps, queue about
//	         -pacing-seconds of work and measure the rate it arrives at.
//	fairness a noisy tenant floods an upstream while a quiet one sends a few
//	         spaced jobs; once with account queues on, once off.
//	listing  ingest while an operator pages GET /jobs (first pages with
//	         counts) back to back; compare with ingest in the same run.
//	batch, scheduled, due: job options (options.go).
//	budget, adaptive: issue 20's pacing against simulated APIs (issue20.go).
//	scale    issue 21's scale curve: ingest and e2e with 0, 100k and 1M jobs
//	         queued, on one daemon per store (scale.go); minutes per store.
//
// Every rate comes with the server's CPU time, heap allocations and GC
// cycles per job (metrics.go); when the ceiling ran too, issue 21's targets
// follow the table (targets.go). -rounds N runs those scenarios N times in
// turn and ends with each ratio's median and range over the rounds
// (rounds.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	listInterval time.Duration // listing scenario: pause between listings
	aquiferd     string
	addr         string
	jobs         int
	clients      int
	backlog      int
	scenarios    []string
	sync         string
	store        string
	timeout      time.Duration
	bodyBytes    int
	keep         bool
	quiet        bool

	pgDSN string

	pacingSeconds float64
	flood         int
	quiet5        int

	batchJobs, batchSize, batchClients int
	scheduledJobs, dueJobs             int

	// Issue 20 (issue20.go).
	//
	// knobs are further "key: value" settings per upstream host (issue 20's
	// budget_pacing and adaptive), written one per line under its rate.
	// Today's config rejects keys it does not know, so scenarios only set
	// them when withKnobs is on.
	knobs                       map[string][]string
	withKnobs                   bool
	budgetJobs, budgetLimit     int
	budgetConcurrent            int
	budgetWindow, budgetLatency time.Duration
	budgetRPS                   float64
	adaptiveSeconds             float64
	adaptiveBase                time.Duration

	// Issue 21's scale curve (scale.go).
	scaleBacklogs []int
	pacingRates   []float64
	scaleBody     int
	scaleCSV      string
	scaleSettle   time.Duration
	scaleRef      bool

	// rounds repeats the core scenarios in turn (rounds.go).
	rounds int
}

func main() {
	if addr := os.Getenv("AQUIFER_BENCH_CEILING_ADDR"); addr != "" {
		// Re-executed by the ceiling scenario to serve from its own process.
		if err := serveCeiling(addr); err != nil {
			fmt.Fprintln(os.Stderr, "ceiling server:", err)
			os.Exit(1)
		}
		return
	}
	if addr := os.Getenv(envFloorAddr); addr != "" {
		// Re-executed by the floor scenario (floor.go).
		if err := serveFloor(addr, os.Getenv(envFloorDir), os.Getenv(envFloorSync), os.Getenv(envFloorDispatch) != "false"); err != nil {
			fmt.Fprintln(os.Stderr, "floor server:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var scen, backlogs string
	flag.StringVar(&o.aquiferd, "aquiferd", "./bin/aquiferd", "aquiferd binary to start for each scenario")
	flag.StringVar(&o.addr, "addr", "", "use an already running aquiferd at this base URL instead (no RSS figures)")
	flag.IntVar(&o.jobs, "n", 20000, "jobs per scenario")
	flag.IntVar(&o.clients, "c", 64, "concurrent clients")
	flag.IntVar(&o.backlog, "backlog", 100000, "jobs queued in the backlog scenario")
	flag.StringVar(&scen, "scenario", "ceiling,ingest,e2e,floor,backlog", "scenarios: ceiling, ingest, e2e, floor, backlog, pacing, fairness, listing, cluster, batch, scheduled, due, budget, adaptive, scale (comma-separated) or all (all but budget, adaptive and scale); cluster needs Postgres and uses at most 1,000 jobs; scale fills each store to -scale-backlogs (minutes per store)")
	flag.StringVar(&o.sync, "sync", "full", "AQUIFER_SQLITE_SYNC for the daemon: full or normal")
	flag.StringVar(&o.store, "store", "sqlite", "AQUIFER_STORE_BACKEND for the daemon: sqlite, pebble or postgres; a comma-separated list runs each scenario on each")
	flag.StringVar(&o.pgDSN, "pg-dsn", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"Postgres for -store postgres (each scenario gets a fresh schema, dropped afterwards)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up waiting for a scenario after this long")
	flag.IntVar(&o.bodyBytes, "body", 64, "bytes of request body per job")
	flag.BoolVar(&o.keep, "keep", false, "keep the daemon's data directories")
	flag.BoolVar(&o.quiet, "q", false, "no progress bars")
	flag.Float64Var(&o.pacingSeconds, "pacing-seconds", 5, "seconds of work queued per rate in the pacing scenario")
	var pacingRates string
	flag.StringVar(&pacingRates, "pacing-rates", "20,200,2000", "pacing scenario: the configured rates, rps (at least 10 jobs each)")
	flag.IntVar(&o.flood, "flood", 5000, "jobs the noisy tenant floods in the fairness scenario")
	flag.IntVar(&o.quiet5, "quiet-jobs", 5, "jobs the quiet tenant sends in the fairness scenario")
	flag.DurationVar(&o.listInterval, "list-interval", 100*time.Millisecond,
		"pause between the listing scenario's GET /jobs (0: back to back); 100ms is ten times a dashboard's refresh")
	flag.IntVar(&o.batchJobs, "batch-jobs", 100000, "jobs the batch scenario sends in batches")
	flag.IntVar(&o.batchSize, "batch-size", 500, "jobs per POST /jobs/batch")
	flag.IntVar(&o.batchClients, "batch-clients", 4, "concurrent batch senders (at most -c)")
	flag.IntVar(&o.scheduledJobs, "scheduled-jobs", 1000000, "jobs the scheduled scenario schedules an hour ahead")
	flag.IntVar(&o.dueJobs, "due-jobs", 5000, "jobs the due scenario schedules 2–8 s ahead")
	flag.BoolVar(&o.withKnobs, "with-knobs", true,
		"budget and adaptive: write issue 20's knobs (budget_pacing: false, adaptive: true) into the daemon's config; false for an aquiferd that predates them (both rows then run its default)")
	flag.IntVar(&o.budgetJobs, "budget-jobs", 400, "jobs queued per run of the budget scenario (the issue's full run is 2000: 200 s per run)")
	flag.IntVar(&o.budgetLimit, "budget-limit", 100, "budget scenario: requests the simulated API allows per window")
	flag.DurationVar(&o.budgetWindow, "budget-window", 10*time.Second, "budget scenario: the simulated API's window (whole seconds)")
	flag.DurationVar(&o.budgetLatency, "budget-latency", 50*time.Millisecond, "budget scenario: how long the simulated API takes to answer")
	flag.Float64Var(&o.budgetRPS, "budget-rps", 50, "budget scenario: the upstream's configured rps ceiling")
	flag.IntVar(&o.budgetConcurrent, "budget-concurrent", 8, "budget scenario: the upstream's max_concurrent")
	flag.Float64Var(&o.adaptiveSeconds, "adaptive-seconds", 40, "adaptive scenario: seconds per run; the backend's capacity halves at half time")
	flag.DurationVar(&o.adaptiveBase, "adaptive-base", 50*time.Millisecond,
		"adaptive scenario: the backend's unloaded latency (its maximum is 40 ÷ this per second)")
	flag.StringVar(&backlogs, "scale-backlogs", "0,100000,1000000", "scale scenario: queued jobs at each step, rising")
	flag.IntVar(&o.scaleBody, "scale-body", 1024, "scale scenario: bytes of request body per job (the fill's, ingest's and e2e's)")
	flag.StringVar(&o.scaleCSV, "scale-csv", "", "scale scenario: also write its rows to this CSV file")
	flag.BoolVar(&o.scaleRef, "scale-reference", true,
		"scale scenario: judge each step against a fresh daemon with an empty store, measured just before and after each of the step's measurements while the step's daemon is paused (false: against the store's first step)")
	flag.DurationVar(&o.scaleSettle, "scale-settle", 3*time.Minute,
		"scale scenario: after each fill, wait at most this long for the daemon to stay under a tenth of a core for 2 s (the store's compactions of the fill)")
	flag.IntVar(&o.rounds, "rounds", 1,
		"run the scenarios this many times in turn, then print the median and range of each issue 21 ratio over the rounds (ceiling, ingest, e2e, floor, backlog and listing only)")
	flag.Parse()
	var err error
	o.pacingRates, err = parseRates(pacingRates)
	if err == nil {
		o.scaleBacklogs, err = parseBacklogs(backlogs)
	}
	if err == nil && o.scaleBody < 0 {
		err = fmt.Errorf("-scale-body %d: want 0 or more bytes", o.scaleBody)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "aquifer-bench:", err)
		os.Exit(2)
	}
	if scen == "all" {
		scen = "ceiling,ingest,e2e,floor,backlog,pacing,fairness,listing,cluster,batch,scheduled,due"
	}
	for _, s := range strings.Split(scen, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.scenarios = append(o.scenarios, s)
		}
	}
	if err := checkRounds(o.rounds, o.scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "aquifer-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := run
	if o.rounds > 1 {
		run = runRounds
	}
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "aquifer-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	fmt.Printf("aquifer-bench: %d jobs, %d clients, store=%s sync=%s, scenarios=%s\n\n",
		o.jobs, o.clients, o.store, o.sync, strings.Join(o.scenarios, ","))
	var (
		results  []result
		paced    []pacingResult
		fairness []fairnessResult
		budget   []budgetResult
		adaptive []adaptiveResult
		cluster  *clusterResult
		opts     []optionsResult
		scale    []scaleRow
	)
	// report prints what was measured, also when a later scenario fails.
	report := func() {
		if len(results) > 0 {
			printTable(os.Stdout, results)
			printTargets(os.Stdout, evaluateTargets(results, o.clients), o.clients)
			printFloor(os.Stdout, compareFloor(results))
		}
		if len(paced) > 0 {
			printPacing(os.Stdout, paced)
		}
		if len(fairness) > 0 {
			printFairness(os.Stdout, fairness)
		}
		if len(budget) > 0 {
			printBudget(os.Stdout, o, budget)
		}
		if len(adaptive) > 0 {
			printAdaptive(os.Stdout, o, adaptive)
		}
		if cluster != nil {
			printCluster(os.Stdout, cluster)
		}
		if len(opts) > 0 {
			printOptions(os.Stdout, opts)
		}
		if len(scale) > 0 {
			printScale(os.Stdout, scale)
		}
	}
	stores := strings.Split(o.store, ",")
	for _, s := range o.scenarios {
		if s == "cluster" { // Postgres only, once
			r, err := runCluster(ctx, o)
			if err != nil {
				report()
				return fmt.Errorf("%s: %w", s, err)
			}
			cluster = r
			continue
		}
		if slices.Contains(roundScenarios, s) { // rows of the main table (rounds.go)
			r, err := runCore(ctx, o, s, stores)
			results = append(results, r...)
			if err != nil {
				report()
				return err
			}
			continue
		}
		for _, store := range stores {
			o := o
			o.store = strings.TrimSpace(store)
			var err error
			switch s {
			case "pacing":
				paced, err = runPacing(ctx, o)
			case "fairness":
				fairness, err = runFairness(ctx, o)
			case "budget":
				budget, err = runBudget(ctx, o)
			case "adaptive":
				adaptive, err = runAdaptive(ctx, o)
			case "scale":
				var rows []scaleRow
				rows, err = runScale(ctx, o)
				scale = append(scale, rows...)
			case "batch", "scheduled", "due":
				var or []optionsResult
				switch s {
				case "batch":
					or, err = runBatch(ctx, o)
				case "scheduled":
					or, err = runScheduled(ctx, o)
				default:
					or, err = runDue(ctx, o)
				}
				if len(stores) > 1 {
					for i := range or {
						or[i].scenario = o.store + ": " + or[i].scenario
					}
				}
				opts = append(opts, or...)
			default:
				return fmt.Errorf("unknown scenario %q", s)
			}
			if err != nil {
				report()
				return fmt.Errorf("%s on %s: %w", s, o.store, err)
			}
		}
	}
	report()
	if len(scale) > 0 && o.scaleCSV != "" {
		if err := saveScaleCSV(o.scaleCSV, scale); err != nil {
			return err
		}
	}
	return nil
}
