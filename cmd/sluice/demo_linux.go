package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process when sluice dies, even
// by SIGKILL, so that a demo never leaves its redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
