//go:build !linux

package proc

import "os/exec"

// DieWithParent does nothing where the kernel cannot tie a child's life to
// its parent's: the caller stops the server on every exit it sees.
func DieWithParent(*exec.Cmd) {}
