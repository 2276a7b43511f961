package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/testing/proc"
)

// hogEnv set to 1 makes this program a hog process (spin) instead.
const hogEnv = "SLUICE_STRESS_HOG"

// spin keeps one CPU busy until the process is killed: one thread, never
// blocking, at the priority it was started with (the tests').
func spin() {
	runtime.GOMAXPROCS(1)
	x := uint64(1)
	for {
		// xorshift: work the compiler cannot remove, no memory traffic.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if x == 0 {
			fmt.Println(x)
		}
	}
}

// hog is the busy processes beside the tests.
type hog struct {
	start time.Time
	procs []*hogProc
	once  sync.Once
	load  hogLoad
}

type hogProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// hogLoad is what the hog did: its processes' CPU time over the time
// they ran.
type hogLoad struct {
	procs int
	wall  time.Duration
	cpu   time.Duration // user and system time of all the processes
}

// String says how busy the hog kept the machine: in CPUs, 1 a core.
func (l hogLoad) String() string {
	if l.procs == 0 {
		return "no hog"
	}
	return fmt.Sprintf("%d hog processes: %v of CPU in %v, %.2f CPUs on average (%.0f%% of a core each)",
		l.procs, l.cpu.Round(time.Second), l.wall.Round(time.Second), l.cpus(), 100*l.cpus()/float64(l.procs))
}

func (l hogLoad) cpus() float64 {
	if l.wall <= 0 {
		return 0
	}
	return l.cpu.Seconds() / l.wall.Seconds()
}

// startHog starts n hog processes: this program again, with hogEnv set.
// Each dies with this process if it dies first.
func startHog(n int) (*hog, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("hog: %w", err)
	}
	h := &hog{start: time.Now()}
	for range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), hogEnv+"=1")
		proc.DieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			h.stop()
			return nil, fmt.Errorf("start a hog process: %w", err)
		}
		p := &hogProc{cmd: cmd, done: make(chan struct{})}
		go func() {
			_ = cmd.Wait()
			close(p.done)
		}()
		h.procs = append(h.procs, p)
	}
	return h, nil
}

// exited names a hog process that has exited, if one has.
func (h *hog) exited() string {
	for _, p := range h.procs {
		select {
		case <-p.done:
			return fmt.Sprintf("hog process %d exited (%v)", p.cmd.Process.Pid, p.cmd.ProcessState)
		default:
		}
	}
	return ""
}

// stop kills every hog process by its pid, waits for it, and returns the
// CPU time they took (the kernel's count, from wait). It may be called
// more than once.
func (h *hog) stop() hogLoad {
	h.once.Do(func() {
		h.load = hogLoad{procs: len(h.procs), wall: time.Since(h.start)}
		for _, p := range h.procs {
			_ = p.cmd.Process.Kill()
			<-p.done
			h.load.cpu += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
		}
	})
	return h.load
}
