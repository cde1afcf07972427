// Command aquiferd runs Aquifer: a durable, rate-paced HTTP job queue.
//
// Configuration comes from environment variables and an optional YAML file
// (CONFIG_PATH); see docs/CONFIGURATION.md or run `aquiferd -help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "aquiferd:", err)
		os.Exit(1)
	}
}
