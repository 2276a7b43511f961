// Package loadgen is the load client of `sluice bench` and of the service
// benchmarks (bench/cmd/servicebench): a number of callers sending
// requests through a pluggable Func, for a count or a duration, as fast as
// answered or evenly paced, and what they saw: decisions per second,
// latency percentiles, allowed, denied and failed. It also has the Funcs
// for sluice's two doors, Envoy's gRPC ShouldRateLimit (GRPC) and POST
// /v1/check (HTTPCheck), so that every service is driven by the same
// client.
package loadgen

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Func makes one decision for key number n: allowed or denied, or an
// error. It is called from many goroutines at once.
type Func func(ctx context.Context, n int) (allowed bool, err error)

// Options say how to drive a Func.
type Options struct {
	// Concurrency is how many callers send at once (at least 1).
	Concurrency int
	// Requests is how many requests to send in all; 0: for Duration.
	Requests int
	// Duration is how long to send when Requests is 0. It ends the
	// sending, not the requests in flight: each finishes and counts.
	Duration time.Duration
	// Keys is how many distinct keys there are, used in turn (at least
	// 1): request i is for key i % Keys.
	Keys int
	// Rate is requests per second, paced evenly across the callers, each
	// request's latency counted from when it was due; 0: as fast as
	// answered.
	Rate float64
	// Progress, when not nil, gets a progress line every second.
	Progress io.Writer
}

// Result is what a run saw.
type Result struct {
	Sent, Allowed, Denied, Errors int64
	Elapsed                       time.Duration
	Latencies                     []time.Duration // sorted
	FirstErr                      error
}

// PerSecond returns the decisions per second of the run (0 for none).
func (r *Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Elapsed.Seconds()
}

// Quantile returns the q quantile of the latencies (0 for none).
func (r *Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[min(int(q*float64(len(r.Latencies))), len(r.Latencies)-1)]
}

// Run sends requests through f as o says and returns what they got. It
// returns when the count is sent or the duration is over and every
// request in flight has answered, or when ctx ends (a request then
// failing for it is not counted).
func Run(ctx context.Context, o Options, f Func) *Result {
	conc, keys := max(o.Concurrency, 1), int64(max(o.Keys, 1))
	var end time.Time
	if o.Requests == 0 {
		end = time.Now().Add(o.Duration)
	}
	var (
		next, allowed, denied, failed atomic.Int64
		firstErr                      atomic.Pointer[error]
		mu                            sync.Mutex
		all                           []time.Duration
		wg                            sync.WaitGroup
	)
	start := time.Now()
	stop := make(chan struct{})
	if o.Progress != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			last, lastAt := int64(0), start
			for {
				select {
				case <-stop:
					return
				case now := <-t.C:
					done := allowed.Load() + denied.Load() + failed.Load()
					fmt.Fprintf(o.Progress, "%5.0fs  %9.0f decisions/s  allowed %d  denied %d  errors %d\n",
						now.Sub(start).Seconds(), float64(done-last)/now.Sub(lastAt).Seconds(), allowed.Load(), denied.Load(), failed.Load())
					last, lastAt = done, now
				}
			}
		}()
	}
	for range conc {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			var timer *time.Timer
			for {
				i := next.Add(1) - 1
				if o.Requests > 0 && i >= int64(o.Requests) || ctx.Err() != nil {
					return
				}
				t0 := time.Time{}
				if o.Rate > 0 {
					// Evenly paced: request i is due at start + i/rate, and
					// its latency counts from then, so that requests held up
					// behind a slow answer count the wait (no coordinated
					// omission).
					t0 = start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
					if !end.IsZero() && t0.After(end) {
						return
					}
					if wait := time.Until(t0); wait > 0 {
						if timer == nil {
							timer = time.NewTimer(wait)
						} else {
							timer.Reset(wait)
						}
						select {
						case <-ctx.Done():
							timer.Stop()
							return
						case <-timer.C:
						}
					}
				}
				if !end.IsZero() && time.Now().After(end) {
					return
				}
				if t0.IsZero() {
					t0 = time.Now()
				}
				ok, err := f(ctx, int(i%keys))
				if err != nil && ctx.Err() != nil {
					return // interrupted, not the service's failure
				}
				mine = append(mine, time.Since(t0))
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				case ok:
					allowed.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	r := &Result{Allowed: allowed.Load(), Denied: denied.Load(), Errors: failed.Load(), Elapsed: time.Since(start), Latencies: all}
	r.Sent = r.Allowed + r.Denied + r.Errors
	if e := firstErr.Load(); e != nil {
		r.FirstErr = *e
	}
	slices.Sort(r.Latencies)
	return r
}

// MaxIPKeys is how many distinct addresses {ip} makes (10.x.y.z).
const MaxIPKeys = 1 << 24

// Template is a key with placeholders: {n} stands for the key's number,
// {ip} for the IPv4 address 10.x.y.z made of it.
type Template struct {
	parts []string // literal text, then a placeholder, alternately
	vars  []string // "{n}" or "{ip}", one after each literal but the last
}

// ParseTemplate returns the template s.
func ParseTemplate(s string) Template {
	var t Template
	for {
		i, j := strings.Index(s, "{n}"), strings.Index(s, "{ip}")
		switch {
		case i < 0 && j < 0:
			t.parts = append(t.parts, s)
			return t
		case j < 0 || i >= 0 && i < j:
			t.parts, t.vars, s = append(t.parts, s[:i]), append(t.vars, "{n}"), s[i+len("{n}"):]
		default:
			t.parts, t.vars, s = append(t.parts, s[:j]), append(t.vars, "{ip}"), s[j+len("{ip}"):]
		}
	}
}

// HasIP reports whether the template holds {ip}.
func (t Template) HasIP() bool { return slices.Contains(t.vars, "{ip}") }

// Expand returns the key of number n.
func (t Template) Expand(n int) string {
	if len(t.vars) == 0 {
		return t.parts[0]
	}
	b := make([]byte, 0, 32)
	for i, p := range t.parts {
		b = append(b, p...)
		if i == len(t.vars) {
			break
		}
		if t.vars[i] == "{n}" {
			b = strconv.AppendInt(b, int64(n), 10)
			continue
		}
		b = append(b, "10."...)
		b = strconv.AppendInt(b, int64(n>>16&255), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(n>>8&255), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(n&255), 10)
	}
	return string(b)
}
