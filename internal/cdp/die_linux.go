package cdp

import "syscall"

// dieWithParent has the kernel kill the browser when the test binary
// dies, even by SIGKILL.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
