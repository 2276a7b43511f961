// Package testutil holds the helpers the tests of several packages
// repeat: a buffer a process writes while the test reads it, a bounded
// wait for a condition, and the path of a Go tool of tools/go.mod.
//
// It imports no testing package (it takes TB, which *testing.T and
// *testing.B satisfy), so that a program such as sluice demo may use
// Buffer without linking the test framework.
package testutil

import (
	"bytes"
	"sync"
	"time"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Buffer is a bytes.Buffer safe for concurrent writes (a process's
// output, a logger) and reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Poll is how often WaitFor and Until call their condition.
const Poll = 10 * time.Millisecond

// WaitFor calls cond every Poll until it returns nil, and fails t with
// cond's last error once within has passed. It bounds a wait; it asserts
// no speed.
func WaitFor(t TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", within, err)
		}
		time.Sleep(Poll)
	}
}

// Until calls cond every Poll until it returns true, and fails t naming
// what it waited for once within has passed.
func Until(t TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(Poll)
	}
}
