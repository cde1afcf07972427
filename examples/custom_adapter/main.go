// Command custom_adapter embeds Aquifer in a program with a front door of
// its own: a line protocol over TCP (see LineAdapter), next to, or instead
// of, the standard REST API.
//
//	go run ./examples/custom_adapter -listen 127.0.0.1:7070 -db data/example.db
//	nc 127.0.0.1 7070
//	ENQUEUE {"user_id":"u","idempotent_key":"k1","url":"https://httpbin.org/get"}
//	OK 0192…
//	WAIT 0192…
//	DONE 0192… completed 200 "{…}"
//
// docs/ADAPTERS.md walks through it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aquiferhq/aquifer/pkg/aquifer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "custom_adapter:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down in order: the front doors,
// then the core, then the store.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("custom_adapter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7070", "address of the line protocol")
	httpAddr := fs.String("http", "", "also serve the REST API on this address (empty: no)")
	db := fs.String("db", "", "SQLite database file (empty: jobs are kept in memory only)")
	rps := fs.Float64("rps", 2, "requests per second to each destination")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(stderr), zapcore.InfoLevel))

	store := aquifer.NewMemoryStore()
	if *db != "" {
		var err error
		if store, err = aquifer.OpenSQLite(ctx, aquifer.SQLiteOptions{Path: *db, Logger: log}); err != nil {
			return err
		}
	}
	line := NewLineAdapter(*listen)
	adapters := []aquifer.Adapter{line}
	if *httpAddr != "" {
		adapters = append(adapters, aquifer.NewHTTPAdapter(*httpAddr, aquifer.HTTPOptions{}))
	}
	aq, err := aquifer.New(aquifer.Options{
		Store:      store,
		CloseStore: true, // closed by Stop (or by New if it fails)
		Logger:     log,
		Rates:      aquifer.RateTable{Defaults: aquifer.Rate{RPS: *rps, MaxConcurrent: 2}},
		Adapters:   adapters,
	})
	if err != nil {
		return err
	}
	if err := aq.Start(ctx); err != nil {
		return err
	}
	log.Info("line protocol listening", zap.Stringer("addr", line.Addr()))
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return aq.Stop(stopCtx)
}
