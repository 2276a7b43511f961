// Package proc holds what the packages that start helper processes
// (redis-server, nginx) on loopback share: a free port, and a child that
// dies with its parent.
package proc

import "net"

// FreePort asks the kernel for a free loopback port. Another process may
// take it before the caller binds it: retry on failure.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
