//go:build integration

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file is the fault harness of faults_test.go: a bounded closed-loop
// load on `sluice serve`'s /v1/check, what each request saw, per-phase
// statistics, go_goroutines sampled from /metrics, and the check that a
// limit is exact again after a fault. Its bounds are stated once, in
// faults_test.go (faultBounds).

// faultEvent is one request of the load, as its client saw it.
type faultEvent struct {
	start, end time.Duration // since the load started
	status     int           // HTTP status; 0: a transport error
	degraded   bool          // "degraded":true in the body, or a 503 (the deny policy's refusal)
	bad503     bool          // a 503 without Retry-After or without code RATE_LIMITER_UNAVAILABLE
}

// faultLoad is a closed-loop load: workers clients, each sending
// {"rule":"load","key":"w<i>"} to /v1/check one request after the other,
// until stop. Every answer is kept (a few seconds of load are a few
// hundred thousand events at most).
type faultLoad struct {
	base    string
	client  *http.Client
	t0      time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
	events  [][]faultEvent // per worker, read after stop
	healAt  atomic.Int64   // ns since t0 when the fault ended; 0: not yet
	healed  atomic.Bool    // a decision started after healAt was not degraded
	lastBad atomic.Int64   // ns since t0 when the last degraded decision ended
	stopped bool
}

// startLoad starts workers clients on d's /v1/check.
func startLoad(d *daemon, workers int) *faultLoad {
	l := &faultLoad{
		base: d.base,
		client: &http.Client{
			Timeout:   20 * time.Second, // far beyond any store deadline: an answer, not a timeout, is expected
			Transport: &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true},
		},
		t0:     time.Now(),
		quit:   make(chan struct{}),
		events: make([][]faultEvent, workers),
	}
	for i := range workers {
		l.wg.Add(1)
		go l.worker(i)
	}
	return l
}

func (l *faultLoad) worker(i int) {
	defer l.wg.Done()
	body := []byte(fmt.Sprintf(`{"rule":"load","key":"w%d"}`, i))
	for {
		select {
		case <-l.quit:
			return
		default:
		}
		ev := l.one(body)
		if heal := l.healAt.Load(); heal != 0 && int64(ev.start) >= heal && ev.status != 0 && !ev.degraded {
			l.healed.Store(true)
		}
		if ev.degraded {
			l.lastBad.Store(int64(ev.end)) // a race between workers moves it by a request at most
		}
		l.events[i] = append(l.events[i], ev)
	}
}

// one sends one check and classifies its answer.
func (l *faultLoad) one(body []byte) faultEvent {
	ev := faultEvent{start: time.Since(l.t0)}
	resp, err := l.client.Post(l.base+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		ev.end = time.Since(l.t0)
		return ev
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	ev.end = time.Since(l.t0)
	if err != nil {
		return ev // a torn answer is a transport error
	}
	ev.status = resp.StatusCode
	switch ev.status {
	case http.StatusOK, http.StatusTooManyRequests:
		ev.degraded = bytes.Contains(b, []byte(`"degraded":true`))
	case http.StatusServiceUnavailable:
		ev.degraded = true
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		ev.bad503 = err != nil || ra < 1 || !bytes.Contains(b, []byte("RATE_LIMITER_UNAVAILABLE"))
	}
	return ev
}

// now returns the time since the load started.
func (l *faultLoad) now() time.Duration { return time.Since(l.t0) }

// markHealed records that the fault ended now.
func (l *faultLoad) markHealed() time.Duration {
	at := l.now()
	l.healAt.Store(int64(at))
	return at
}

// quietFor returns how long no decision has degraded.
func (l *faultLoad) quietFor() time.Duration { return l.now() - time.Duration(l.lastBad.Load()) }

// stop ends the load and waits for its workers.
func (l *faultLoad) stop() {
	if l.stopped {
		return
	}
	l.stopped = true
	close(l.quit)
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

// all returns every event, by start time.
func (l *faultLoad) all() []faultEvent {
	var out []faultEvent
	for _, evs := range l.events {
		out = append(out, evs...)
	}
	slices.SortFunc(out, func(a, b faultEvent) int { return int(a.start - b.start) })
	return out
}

// phaseStats is what the clients saw of the requests started in one
// phase.
type phaseStats struct {
	n, transport, degraded, bad503 int
	codes                          map[int]int
	p50, p99, max                  time.Duration
}

// stats summarizes the events of one phase of a fault from inject to
// heal: before, those answered before inject; during, those in flight at
// some time from inject to heal; after, those sent after heal. Each event
// is in one phase.
func stats(evs []faultEvent, phase string, inject, heal time.Duration) phaseStats {
	in := map[string]func(e faultEvent) bool{
		"before": func(e faultEvent) bool { return e.end < inject },
		"during": func(e faultEvent) bool { return e.end >= inject && e.start < heal },
		"after":  func(e faultEvent) bool { return e.start >= heal },
	}[phase]
	s := phaseStats{codes: map[int]int{}}
	var lat []time.Duration
	for _, e := range evs {
		if !in(e) {
			continue
		}
		s.n++
		lat = append(lat, e.end-e.start)
		if e.status == 0 {
			s.transport++
			continue
		}
		s.codes[e.status]++
		if e.degraded {
			s.degraded++
		}
		if e.bad503 {
			s.bad503++
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
		s.p50, s.p99, s.max = q(0.50), q(0.99), lat[len(lat)-1]
	}
	return s
}

// other counts the answers that are neither 200, 429 nor 503.
func (s phaseStats) other() int {
	n := 0
	for code, c := range s.codes {
		if code != 200 && code != 429 && code != 503 {
			n += c
		}
	}
	return n
}

func (s phaseStats) String() string {
	return fmt.Sprintf("n=%d 200=%d 429=%d 503=%d other=%d err=%d degraded=%d p50=%s p99=%s max=%s",
		s.n, s.codes[200], s.codes[429], s.codes[503], s.other(), s.transport, s.degraded,
		round(s.p50), round(s.p99), round(s.max))
}

// round shortens a duration for a summary row.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// recovery returns, of the requests started at or after heal, the time
// from heal to the end of the first that was not degraded (ok false when
// none was), and to the end of the last that was (0 when none was).
func recovery(evs []faultEvent, heal time.Duration) (first time.Duration, ok bool, lastDegraded time.Duration) {
	for _, e := range evs {
		if e.start < heal || e.status == 0 {
			continue
		}
		if !e.degraded && !ok {
			first, ok = e.end-heal, true
		}
		if e.degraded && e.end-heal > lastDegraded {
			lastDegraded = e.end - heal
		}
	}
	return first, ok, lastDegraded
}

// goroutines returns go_goroutines from d's /metrics.
func goroutines(d *daemon) (int, error) {
	v, err := metric(d, "go_goroutines")
	return int(v), err
}

// storeTakes returns how many store calls (takes) d's Limiter has made,
// every decision that asked the store and every probe of the breaker, and
// how many of them failed (sluice_store_duration_seconds_count and
// sluice_store_errors_total of op take).
func storeTakes(t *testing.T, d *daemon) (calls, failed int) {
	t.Helper()
	c, err := metric(d, `sluice_store_duration_seconds_count{op="take"}`)
	if err != nil {
		t.Fatal(err)
	}
	f, err := metric(d, `sluice_store_errors_total{op="take"}`)
	if err != nil {
		t.Fatal(err)
	}
	return int(c), int(f)
}

// metric returns the value of the series name (with its labels, if it
// has any) from d's /metrics.
func metric(d *daemon, name string) (float64, error) {
	text, err := metricsText(d)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// sampler polls go_goroutines every 100ms until stop, keeping the largest
// value seen.
type sampler struct {
	max  atomic.Int64
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func sampleGoroutines(d *daemon) *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := goroutines(d); err == nil && int64(n) > s.max.Load() {
				s.max.Store(int64(n))
			}
			select {
			case <-s.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the largest count seen. It may be
// called more than once.
func (s *sampler) stop() int {
	s.once.Do(func() { close(s.quit) })
	<-s.done
	return int(s.max.Load())
}

// exactCheck sends concurrent checks of rule exact (limit n) for one fresh
// key, 3n at once, and returns how many were admitted, denied and
// degraded, and any other answer.
func exactCheck(d *daemon, key string, n int) (admitted, denied, degraded int, others []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	body := fmt.Sprintf(`{"rule":"exact","key":%q}`, key)
	start := make(chan struct{})
	for range 3 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				others = append(others, err.Error())
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case bytes.Contains(b, []byte(`"degraded":true`)) || resp.StatusCode == 503:
				degraded++
			case resp.StatusCode == 200:
				admitted++
			case resp.StatusCode == 429:
				denied++
			default:
				others = append(others, fmt.Sprintf("%d %s", resp.StatusCode, b))
			}
		}()
	}
	close(start)
	wg.Wait()
	return admitted, denied, degraded, others
}

// waitGoroutines polls go_goroutines until it is at most limit, for up to
// within, and returns the last count.
func waitGoroutines(t *testing.T, d *daemon, limit int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, err := goroutines(d)
		if err != nil {
			t.Fatalf("go_goroutines: %v", err)
		}
		if n <= limit || time.Now().After(deadline) {
			return n
		}
		time.Sleep(pollInterval)
	}
}

// logValues returns, for each log line of d so far whose msg contains msg,
// the value of its attribute key.
func (d *daemon) logValues(msg, key string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, line := range d.lines {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && strings.Contains(fmt.Sprint(entry["msg"]), msg) {
			out = append(out, fmt.Sprint(entry[key]))
		}
	}
	return out
}

// checkAnswers checks what must hold of every phase of a fault, whatever
// it is, as runFault does: no transport error and no answer other than
// 200, 429 or 503; 503 only under deny, each well formed; every answer
// within faultBounds.answer.
func checkAnswers(t *testing.T, who, policy string, phases map[string]phaseStats) {
	t.Helper()
	for name, p := range phases {
		if p.transport != 0 || p.other() != 0 {
			t.Errorf("%s, %s phase: %d transport errors, %d answers neither 200, 429 nor 503: %s", who, name, p.transport, p.other(), p)
		}
		if p.codes[503] != 0 && policy != "deny" {
			t.Errorf("%s, %s phase: %d answers 503 under on_error %s, which never refuses: %s", who, name, p.codes[503], policy, p)
		}
		if p.bad503 != 0 {
			t.Errorf("%s, %s phase: %d answers 503 without Retry-After or code RATE_LIMITER_UNAVAILABLE", who, name, p.bad503)
		}
		if p.max > faultBounds.answer {
			t.Errorf("%s, %s phase: slowest answer %v, want within %v (the store deadline and slack): %s", who, name, p.max, faultBounds.answer, p)
		}
	}
}
