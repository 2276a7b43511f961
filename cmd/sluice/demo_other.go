//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing where the kernel cannot tie a child's life to
// its parent's; sluice kills its redis-server on every exit it sees.
func dieWithParent(*exec.Cmd) {}
