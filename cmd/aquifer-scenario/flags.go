package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/aquiferhq/aquifer/internal/domain"
)

// Modes.
const (
	modeAquifer = "aquifer"
	modeRegular = "regular"
)

// scenarios lists the worker populations, in the order they are documented.
var scenarios = []string{"steady", "weighted", "flapping", "backpressure", "recovering", "mixed", "harsh"}

// maxWorkers keeps the table readable and the loopback server sane.
const maxWorkers = 1000

// options are the parsed command line (BEHAVIOR.md §27.1, plus --compare and --seed).
type options struct {
	workers    int
	jobs       int
	duration   time.Duration
	rps        float64
	mode       string
	pool       string
	scenario   string
	enqueueRPS float64
	heartbeat  time.Duration
	csv        string
	verbose    bool
	compare    bool
	seed       uint64
}

// usageError is a bad command line: main exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// parseFlags parses and validates args (without the program name). Flag
// syntax errors are reported by the flag package on stderr; every error it
// returns is a *usageError, or flag.ErrHelp for -h.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("aquifer-scenario", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.workers, "workers", 10, "logical workers behind the fake backend (> 0)")
	fs.IntVar(&o.jobs, "jobs", 500, "jobs to send (> 0)")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long to run and print per-second observations")
	fs.Float64Var(&o.rps, "rps", 50, "configured rate: Aquifer's defaults.rps (pools are not capped by it: a pool runs at the sum of its members), or the round-robin dispatch rate in regular mode")
	fs.StringVar(&o.mode, "mode", modeAquifer, "aquifer (embedded Aquifer with a pool) or regular (plain round-robin balancer)")
	fs.StringVar(&o.pool, "pool", "scenario-workers", "pool id")
	fs.StringVar(&o.scenario, "scenario", "mixed", "worker population: steady, weighted, flapping, backpressure, recovering, mixed or harsh")
	fs.Float64Var(&o.enqueueRPS, "enqueue-rps", 0, "enqueue pacing in aquifer mode; 0 = as fast as possible")
	fs.DurationVar(&o.heartbeat, "heartbeat", 2*time.Second, "member re-registration period in aquifer mode; 0 disables heartbeats")
	fs.StringVar(&o.csv, "csv", "", "write per-second per-worker rows to this CSV file (with --compare: <name>-aquifer<ext> and <name>-regular<ext>)")
	fs.BoolVar(&o.verbose, "verbose", false, "show Aquifer's own logs on stderr")
	fs.BoolVar(&o.compare, "compare", false, "run the scenario in both modes (same seed, fresh backend each) and print the summaries side by side")
	fs.Uint64Var(&o.seed, "seed", 1, "seed for the simulated workers' randomness")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: aquifer-scenario [flags]\n\n"+
			"Runs a fake backend of logical workers behind an embedded Aquifer pool (or a plain\n"+
			"round-robin balancer) and prints per-second traffic, failures, advertised rates and\n"+
			"reputation.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	return o, o.validate(explicit)
}

// validate checks every flag; explicit names the flags given on the command
// line.
func (o *options) validate(explicit map[string]bool) error {
	switch {
	case o.workers <= 0:
		return usagef("--workers must be greater than 0, got %d", o.workers)
	case o.workers > maxWorkers:
		return usagef("--workers must be at most %d, got %d", maxWorkers, o.workers)
	case o.jobs <= 0:
		return usagef("--jobs must be greater than 0, got %d", o.jobs)
	case o.duration <= 0:
		return usagef("--duration must be positive, got %s", o.duration)
	case o.duration < time.Second:
		return usagef("--duration must be at least 1s (observations are per second), got %s", o.duration)
	case math.IsNaN(o.rps) || math.IsInf(o.rps, 0) || o.rps < domain.MinRPS:
		return usagef("--rps must be a number >= %g, got %g", domain.MinRPS, o.rps)
	case o.mode != modeAquifer && o.mode != modeRegular:
		return usagef("--mode must be %q or %q, got %q", modeAquifer, modeRegular, o.mode)
	case o.compare && explicit["mode"]:
		return usagef("--compare runs both modes; drop --mode")
	case !validScenario(o.scenario):
		return usagef("--scenario must be one of %v, got %q", scenarios, o.scenario)
	case math.IsNaN(o.enqueueRPS) || math.IsInf(o.enqueueRPS, 0) || o.enqueueRPS < 0:
		return usagef("--enqueue-rps must be 0 (as fast as possible) or a positive number, got %g", o.enqueueRPS)
	case o.heartbeat < 0:
		return usagef("--heartbeat must be 0 (off) or positive, got %s", o.heartbeat)
	}
	if err := domain.ValidatePoolID("--pool", o.pool); err != nil {
		return usagef("%s", err.Error())
	}
	return nil
}

func validScenario(s string) bool {
	for _, v := range scenarios {
		if v == s {
			return true
		}
	}
	return false
}
