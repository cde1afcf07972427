// Command aquifer-scenario shows how an Aquifer pool treats a group of
// workers that are healthy, weighted, flapping, pushing back, recovering or
// falling over. It starts one loopback backend hosting N logical workers,
// registers them as members of a pool on an embedded Aquifer (SQLite store in
// a temp dir), enqueues jobs to the pool and prints, every second, what each
// worker received and answered, the rate it advertised, its reputation and
// its overload state. --mode regular replaces Aquifer with a plain
// round-robin balancer that retries 5xx but ignores reputation and pacing
// headers; --compare runs both and prints the totals side by side.
//
//	go run ./cmd/aquifer-scenario --scenario mixed --workers 10 --jobs 500 --duration 30s --rps 50
//
// See docs/POOLS.md ("Scenario harness").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	os.Exit(mainExit(os.Args[1:], os.Stdout, os.Stderr))
}

// mainExit runs the command and returns its exit code: 0 success, 1 a
// failed run, 2 a bad command line.
func mainExit(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "aquifer-scenario:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "aquifer-scenario:", err)
		return 1
	}
	return 0
}
