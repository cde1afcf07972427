package main

import (
	"os/exec"
	"syscall"
)

// dieWithBench makes the kernel kill cmd's process (SIGKILL) as soon as the
// bench itself is gone, however it went: a daemon, floor or ceiling server
// that outlived its run would keep its port and load the machine under the
// next run's measurements. (The kernel ties the signal to the thread that
// started the child; Go ends a thread only when a goroutine locked to it
// exits, which the bench never does.) A bench that is interrupted or sent
// SIGTERM stops its children itself and removes their directories first
// (main's signal context).
func dieWithBench(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
