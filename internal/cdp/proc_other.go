//go:build !unix

package cdp

import "os/exec"

// ownGroup does nothing without process groups.
func ownGroup(*exec.Cmd) {}

// killGroup kills cmd.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
