package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/bench/internal/peers"
)

// keySpace is how many client keys the Redis runs cycle through.
const keySpace = peers.KeySpace

var keys = peers.Keys

// maxSamples bounds the latencies a run records, 32 MiB of them: each
// caller keeps its first maxSamples/callers (at least minSamples).
const (
	maxSamples = 1 << 22
	minSamples = 1 << 10
)

// loadResult is what a load run saw.
type loadResult struct {
	decisions, admitted, denied, errors int64
	firstErr                            error
	elapsed                             time.Duration
	clientCPU                           time.Duration // this process's user+system CPU over the run
	lat                                 []time.Duration
}

// rate returns decisions per second.
func (r loadResult) rate() float64 { return float64(r.decisions) / r.elapsed.Seconds() }

// quantile returns the q quantile of the run's latencies (0 without any).
func (r loadResult) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q * float64(len(r.lat)))
	return r.lat[min(i, len(r.lat)-1)]
}

// load runs callers goroutines that call allow in a loop for dur, each
// starting at its own place in ks and cycling through it, and counts and
// times their calls. It ends early when ctx does; a caller stops at its
// first error.
func load(ctx context.Context, allow allowFunc, ks []string, callers int, dur time.Duration) loadResult {
	var (
		stop               atomic.Bool
		decisions, allowed atomic.Int64
		denied, errs       atomic.Int64
		errOnce            sync.Once
		res                loadResult
		wg                 sync.WaitGroup
		start              = make(chan struct{})
		lats               = make([][]time.Duration, callers)
	)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit := max(minSamples, maxSamples/callers)
			lat := make([]time.Duration, 0, min(limit, 4096))
			i := c * 397
			<-start
			var n, a, d int64
			for !stop.Load() {
				k := ks[i%len(ks)]
				i++
				t0 := time.Now()
				ok, err := allow(ctx, k)
				if len(lat) < limit {
					lat = append(lat, time.Since(t0))
				}
				n++
				switch {
				case err != nil:
					errs.Add(1)
					errOnce.Do(func() { res.firstErr = err })
					stop.Store(true)
				case ok:
					a++
				default:
					d++
				}
			}
			decisions.Add(n)
			allowed.Add(a)
			denied.Add(d)
			lats[c] = lat
		}()
	}
	cpu0 := processCPU()
	t0 := time.Now()
	close(start)
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		stop.Store(true)
		<-done
	}
	timer.Stop()
	res.elapsed = time.Since(t0)
	res.clientCPU = processCPU() - cpu0
	res.decisions, res.admitted, res.denied, res.errors = decisions.Load(), allowed.Load(), denied.Load(), errs.Load()
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	slices.Sort(res.lat)
	return res
}

// processCPU returns this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
