//go:build unix && !linux

package cdp

import "syscall"

// dieWithParent does nothing where the kernel cannot tie a child's life
// to its parent's: Close kills the browser.
func dieWithParent(*syscall.SysProcAttr) {}
