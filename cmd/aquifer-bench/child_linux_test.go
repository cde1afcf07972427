package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const envChildHelper = "AQUIFER_BENCH_TEST_CHILD_HELPER"

// TestChildrenDieWithTheBench: a child started the way the bench starts
// its daemons is gone soon after the bench is killed outright (SIGKILL,
// which the bench cannot catch).
func TestChildrenDieWithTheBench(t *testing.T) {
	bench := exec.Command(os.Args[0], "-test.run=^TestChildHelper$")
	bench.Env = append(os.Environ(), envChildHelper+"=1")
	out, err := bench.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = bench.Process.Kill()
		t.Fatalf("the stand-in bench said nothing: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "child "))
	if err != nil {
		_ = bench.Process.Kill()
		t.Fatalf("the stand-in bench said %q", line)
	}
	p, _ := os.FindProcess(pid)
	t.Cleanup(func() { _ = p.Kill() })
	if s := procState(pid); s == 0 || s == 'Z' {
		t.Fatalf("the child is not running before the bench dies (state %q)", s)
	}
	_ = bench.Process.Kill()
	_ = bench.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for s := procState(pid); s != 0 && s != 'Z'; s = procState(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the child (pid %d) still runs 5 s after the bench was killed (state %q)", pid, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChildHelper is the stand-in bench of TestChildrenDieWithTheBench: it
// starts a long sleep as the bench starts its children, says its pid, and
// waits to be killed.
func TestChildHelper(t *testing.T) {
	if os.Getenv(envChildHelper) == "" {
		t.Skip("run by TestChildrenDieWithTheBench")
	}
	cmd := exec.Command("sleep", "60")
	dieWithBench(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("child %d\n", cmd.Process.Pid)
	_ = cmd.Wait()
}
