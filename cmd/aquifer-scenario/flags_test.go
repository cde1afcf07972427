package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{workers: 10, jobs: 500, duration: 30 * time.Second, rps: 50, mode: modeAquifer,
		pool: "scenario-workers", scenario: "mixed", heartbeat: 2 * time.Second, seed: 1}
	if o != want {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
}

func TestParseFlagsExample(t *testing.T) {
	o, err := parseFlags(strings.Fields("--scenario harsh --workers 4 --jobs 40 --duration 5s --rps 20 --mode regular "+
		"--pool p.1 --enqueue-rps 10 --heartbeat 0 --csv out.csv --verbose --seed 7"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{workers: 4, jobs: 40, duration: 5 * time.Second, rps: 20, mode: modeRegular, pool: "p.1",
		scenario: "harsh", enqueueRPS: 10, csv: "out.csv", verbose: true, seed: 7}
	if o != want {
		t.Fatalf("%+v, want %+v", o, want)
	}
	if o, err = parseFlags([]string{"--compare"}, io.Discard); err != nil || !o.compare {
		t.Fatalf("--compare: %+v %v", o, err)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	cases := []struct {
		args string
		want string // the message must name the flag
	}{
		{"--workers 0", "--workers must be greater than 0"},
		{"--workers -3", "--workers must be greater than 0"},
		{"--workers 1001", "--workers must be at most 1000"},
		{"--jobs 0", "--jobs must be greater than 0"},
		{"--duration 0s", "--duration must be positive"},
		{"--duration 500ms", "--duration must be at least 1s"},
		{"--rps 0", "--rps must be a number >= 0.5"},
		{"--rps NaN", "--rps must be a number"},
		{"--rps -Inf", "--rps must be a number"},
		{"--mode fancy", `--mode must be "aquifer" or "regular", got "fancy"`},
		{"--compare --mode regular", "--compare runs both modes"},
		{"--scenario calm", `--scenario must be one of [steady weighted flapping backpressure recovering mixed harsh], got "calm"`},
		{"--enqueue-rps -1", "--enqueue-rps must be 0"},
		{"--heartbeat -1s", "--heartbeat must be 0 (off) or positive"},
		{"--pool bad/id", "--pool may contain only"},
		{"--pool=", "--pool is required"},
		{"--workers ten", `invalid value "ten" for flag -workers`},
		{"--nope", "flag provided but not defined: -nope"},
		{"extra", `unexpected argument "extra"`},
	}
	for _, c := range cases {
		_, err := parseFlags(strings.Fields(c.args), io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: error %v, want a usage error", c.args, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %q, want it to contain %q", c.args, err, c.want)
		}
	}
}

func TestParseFlagsHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"usage: aquifer-scenario", "-scenario", "-compare", "-seed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

func TestMainExitCodes(t *testing.T) {
	var stderr strings.Builder
	if code := mainExit([]string{"--jobs", "0"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--jobs") {
		t.Fatalf("bad flag: exit %d, want 2; stderr %q", code, stderr.String())
	}
	if code := mainExit([]string{"-help"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("-help: exit %d, want 0", code)
	}
}
