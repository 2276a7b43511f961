package proc

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel kill cmd's process when its parent dies,
// even by SIGKILL (a killed demo, a test binary stopped by its timeout).
// The kernel ties it to the thread that started the process, and the Go
// runtime ends a thread only when a goroutine locked to it exits locked,
// which sluice never does.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
