//go:build unix

package cdp

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own, whose id is its
// pid, so that killGroup reaches the helper processes it forks.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// killGroup kills cmd's process group (by its pid) and cmd.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
