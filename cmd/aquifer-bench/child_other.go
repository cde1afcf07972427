//go:build !linux

package main

import "os/exec"

// dieWithBench does nothing here: only Linux can kill a child when its
// parent dies. An interrupted or terminated bench still stops its children
// (main's signal context).
func dieWithBench(*exec.Cmd) {}
