//go:build !linux

package redisproc

import "os/exec"

// dieWithParent does nothing where the kernel cannot tie a child's life to
// its parent's: the caller stops the server on every exit it sees.
func dieWithParent(*exec.Cmd) {}
