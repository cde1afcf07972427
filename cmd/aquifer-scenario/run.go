package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runner is one mode driving jobs through the fake backend.
type runner interface {
	launch(ctx context.Context) error
	counts() outcomeCounts
	reputations() map[string]float64 // member id → reputation; nil: the mode has none
	problems() []string
	stop()
}

// run executes the command: one mode, or both with --compare.
func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	modes := []string{o.mode}
	if o.compare {
		modes = []string{modeAquifer, modeRegular}
	}
	var results []runResult
	for i, mode := range modes {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		csvPath := o.csv
		if csvPath != "" && o.compare {
			ext := filepath.Ext(csvPath)
			csvPath = strings.TrimSuffix(csvPath, ext) + "-" + mode + ext
		}
		r, err := runOnce(ctx, o, mode, csvPath, stdout, stderr)
		if err != nil {
			return fmt.Errorf("%s mode: %w", mode, err)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.compare {
		fmt.Fprintln(stdout)
		compareTable(stdout, o, results)
	}
	return nil
}

// runOnce runs the scenario in one mode against a fresh backend and prints
// its header, per-second table and summary.
func runOnce(ctx context.Context, o options, mode, csvPath string, stdout, stderr io.Writer) (runResult, error) {
	res := runResult{mode: mode}
	specs := population(o.scenario, o.workers)
	be, err := newBackend(specs, o.seed)
	if err != nil {
		return res, err
	}
	defer be.close()

	var cw *csv.Writer
	if csvPath != "" {
		f, err := os.Create(csvPath)
		if err != nil {
			return res, fmt.Errorf("--csv: %w", err)
		}
		defer f.Close()
		if cw, err = newCSV(f); err != nil {
			return res, fmt.Errorf("--csv: %w", err)
		}
	}

	var r runner
	if mode == modeAquifer {
		a, err := newAquiferRun(ctx, o, be, stderr)
		if err != nil {
			return res, err
		}
		r = a
	} else {
		r = newRegularRun(o, be)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			r.stop()
		}
	}
	defer stop()

	for _, l := range headerLines(o, mode, specs) {
		fmt.Fprintln(stdout, l)
	}
	fmt.Fprintln(stdout)
	poolCol := o.pool
	if mode == modeRegular {
		poolCol = "-"
	}
	poolWidth := max(len("pool"), len(poolCol))
	fmt.Fprintln(stdout, tableHeader(specs, poolWidth))

	start := time.Now()
	be.begin(start)
	if err := r.launch(ctx); err != nil {
		return res, err
	}
	seconds := int((o.duration + time.Second - 1) / time.Second)
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	for sec := 1; sec <= seconds; sec++ {
		timer.Reset(time.Until(start.Add(time.Duration(sec) * time.Second)))
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-timer.C:
		}
		c := r.counts()
		reps := r.reputations()
		cells := make([]string, len(specs))
		for i, w := range specs {
			ws := be.workers[i].observe(sec)
			rep := repNone
			if reps != nil {
				var ok bool
				if rep, ok = reps[w.memberID()]; !ok {
					rep = repEvicted
				}
			}
			cells[i] = formatCell(ws, rep)
			if cw != nil {
				if err := cw.Write(csvRow(sec, c, w, ws, rep)); err != nil {
					return res, fmt.Errorf("--csv: %w", err)
				}
			}
		}
		fmt.Fprintln(stdout, formatRow(fmt.Sprint(sec), fmt.Sprint(c.completed), fmt.Sprint(c.failed), poolCol, poolWidth, cells))
		if res.drainedAt == 0 && c.completed+c.failed >= o.jobs {
			res.drainedAt = sec
		}
	}
	res.outcomeCounts = r.counts()
	stop()
	res.remaining = max(o.jobs-res.completed-res.failed, 0)
	res.requests = be.totals()
	res.problems = r.problems()
	fmt.Fprintln(stdout, summaryLine(res))
	for _, p := range res.problems {
		fmt.Fprintln(stdout, "note:", p)
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return res, fmt.Errorf("--csv: %w", err)
		}
		fmt.Fprintf(stdout, "wrote csv=%s\n", csvPath)
	}
	return res, nil
}
