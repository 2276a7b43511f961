package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one scheduled request, as its client saw it.
type event struct {
	sched    time.Duration // when it was due, since the load started
	lat      time.Duration // from sched to the end of the answer
	status   int           // HTTP status; 0: a transport error
	degraded bool          // "degraded":true in the body
}

// isError reports whether the client saw an error: anything but 200 and
// 429.
func (e event) isError() bool {
	return e.status != http.StatusOK && e.status != http.StatusTooManyRequests
}

// job is a request due at sched for key number key.
type job struct {
	sched time.Duration
	key   int
}

// load is the open-loop load: rate requests per second scheduled for
// duration, sent by at most workers clients.
type load struct {
	base   string
	client *http.Client
	t0     time.Time
	done   chan struct{} // closed when every request has answered

	mu     sync.Mutex
	events []event         // in the order they answered
	shed   []time.Duration // due times of the requests not sent
	notes  []string        // what the fault schedule did, for the report
}

// newLoad starts the load on base; it ends early when ctx does.
func newLoad(ctx context.Context, base string, s settings) *load {
	l := &load{
		base: base,
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: s.workers, DisableCompression: true},
		},
		t0:   time.Now(),
		done: make(chan struct{}),
	}
	jobs := make(chan job, s.workers)
	var wg sync.WaitGroup
	for range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				l.send(ctx, j)
			}
		}()
	}
	go func() {
		n := int64(s.duration.Seconds() * float64(s.rate))
		for i := range n {
			due := time.Duration(i * int64(time.Second) / int64(s.rate))
			if wait := time.Until(l.t0.Add(due)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				break
			}
			select {
			case jobs <- job{sched: due, key: int(i % int64(s.keys))}:
			default: // every client is busy, and as many requests wait
				l.mu.Lock()
				l.shed = append(l.shed, due)
				l.mu.Unlock()
			}
		}
		close(jobs)
		wg.Wait()
		l.client.CloseIdleConnections()
		close(l.done)
	}()
	return l
}

// send sends one request and records what its client saw.
func (l *load) send(ctx context.Context, j job) {
	body := fmt.Sprintf(`{"rule":"soak","key":"k%d"}`, j.key)
	e := event{sched: j.sched}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/v1/check", strings.NewReader(body))
	var resp *http.Response
	if err == nil { // else a URL that does not parse: a transport error
		req.Header.Set("Content-Type", "application/json")
		resp, err = l.client.Do(req)
	}
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			e.status = resp.StatusCode
			e.degraded = bytes.Contains(b, []byte(`"degraded":true`))
		}
	}
	e.lat = time.Since(l.t0) - j.sched
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// now returns the time since the load started.
func (l *load) now() time.Duration { return time.Since(l.t0) }

// note records what the fault schedule did, for the next report row.
func (l *load) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, fmt.Sprintf("%s "+format, append([]any{l.now().Round(100 * time.Millisecond)}, args...)...))
}

// wait waits until every request has answered.
func (l *load) wait() { <-l.done }

// window is one fault: from start to end (the server back, or going on).
type window struct {
	name       string
	start, end time.Duration
}

// faultLog is what schedule did.
type faultLog struct {
	windows []window
	err     error
}

// schedule breaks Redis at the fractions of the run restart1, restart2
// (SIGKILL, down 1s, started again empty) and hangAt (SIGSTOP for s.hang,
// then SIGCONT), and sends what it did on the channel returned.
func schedule(ctx context.Context, s settings, l *load, r *redisServer) <-chan faultLog {
	out := make(chan faultLog, 1)
	go func() {
		var fl faultLog
		defer func() { out <- fl }()
		until := func(f float64) bool {
			select {
			case <-time.After(time.Until(l.t0.Add(at(s, f)))):
				return true
			case <-ctx.Done():
				return false
			}
		}
		for i, f := range []float64{restart1, restart2} {
			if !until(f) {
				return
			}
			start := l.now()
			l.note("redis SIGKILL (restart %d)", i+1)
			if fl.err = r.restart(ctx, time.Second); fl.err != nil {
				return
			}
			fl.windows = append(fl.windows, window{fmt.Sprintf("restart %d: SIGKILL, down 1s, empty", i+1), start, l.now()})
			l.note("redis back (pid %d)", r.pid())
		}
		if !until(hangAt) {
			return
		}
		start := l.now()
		if fl.err = r.pause(true); fl.err != nil {
			return
		}
		l.note("redis SIGSTOP")
		select {
		case <-time.After(s.hang):
		case <-ctx.Done():
		}
		fl.err = r.pause(false)
		fl.windows = append(fl.windows, window{fmt.Sprintf("hang: SIGSTOP %v, SIGCONT", s.hang), start, l.now()})
		l.note("redis SIGCONT")
	}()
	return out
}

// report prints a row every s.interval until the load is done, then one
// for the rest.
func report(ctx context.Context, s settings, l *load, d *daemon) {
	fmt.Printf("%8s %7s %7s %7s %6s %8s %6s %9s %9s %9s %8s %6s  %s\n",
		"time", "answers", "200", "429", "errors", "degraded", "shed", "p50", "p99", "max", "RSS", "gorout", "events")
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	var seen, shed int
	row := func(last bool) {
		l.mu.Lock()
		if last && seen == len(l.events) {
			l.mu.Unlock()
			return // the last tick printed everything
		}
		evs := slices.Clone(l.events[seen:])
		seen = len(l.events)
		nShed := len(l.shed) - shed
		shed = len(l.shed)
		notes := l.notes
		l.notes = nil
		l.mu.Unlock()
		st := summarize(evs)
		mem := "?"
		if b, err := rss(d.pid()); err == nil {
			mem = mb(b)
		}
		g := "?"
		if n, err := d.goroutines(); err == nil {
			g = fmt.Sprint(n)
		}
		line := fmt.Sprintf("%8s %7d %7d %7d %6d %8d %6d %9s %9s %9s %8s %6s  %s",
			l.now().Round(time.Second), st.n, st.ok, st.denied, st.errors, st.degraded, nShed,
			short(st.p50), short(st.p99), short(st.max), mem, g, strings.Join(notes, "; "))
		fmt.Println(strings.TrimRight(line, " "))
	}
	for {
		select {
		case <-tick.C:
			row(false)
		case <-l.done:
			row(true)
			return
		case <-ctx.Done():
			return
		}
	}
}

// stats summarize events.
type stats struct {
	n, ok, denied, errors, degraded int
	p50, p99, max                   time.Duration
}

func summarize(evs []event) stats {
	var s stats
	lat := make([]time.Duration, 0, len(evs))
	for _, e := range evs {
		s.n++
		switch {
		case e.isError():
			s.errors++
		case e.status == http.StatusOK:
			s.ok++
		default:
			s.denied++
		}
		if e.degraded {
			s.degraded++
		}
		lat = append(lat, e.lat)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.p50, s.p99, s.max = lat[int(0.50*float64(len(lat)-1))], lat[int(0.99*float64(len(lat)-1))], lat[len(lat)-1]
	}
	return s
}

// recovery returns, of the events due and answered from end until the
// next fault (next), the time from end to the answer of the first that was
// not degraded (ok false if none was), and to the answer of the last that
// was degraded (0 if none was).
func recovery(evs []event, end, next time.Duration) (first time.Duration, ok bool, last time.Duration) {
	first = -1
	for _, e := range evs {
		if e.sched < end || e.sched+e.lat >= next || e.status == 0 {
			continue
		}
		at := e.sched + e.lat - end
		if !e.degraded && (first < 0 || at < first) {
			first, ok = at, true
		}
		if e.degraded && at > last {
			last = at
		}
	}
	return first, ok, last
}

// summary prints the summary table and returns how many errors the
// clients saw.
func summary(w io.Writer, s settings, l *load, windows []window, ferr error, d *daemon, rssStart, rssEnd int64, goStart, goEnd int) int {
	l.mu.Lock()
	evs := slices.Clone(l.events)
	shed := slices.Clone(l.shed)
	l.mu.Unlock()
	sort.Slice(evs, func(i, j int) bool { return evs[i].sched < evs[j].sched })
	in := func(from, to time.Duration) []event {
		lo := sort.Search(len(evs), func(i int) bool { return evs[i].sched >= from })
		hi := sort.Search(len(evs), func(i int) bool { return evs[i].sched >= to })
		return evs[lo:hi]
	}
	shedIn := func(from, to time.Duration) int {
		n := 0
		for _, t := range shed {
			if t >= from && t < to {
				n++
			}
		}
		return n
	}
	fmt.Fprintf(w, "\nsummary: %v at %d/s, on_error local, %d clients at most\n\n", s.duration, s.rate, s.workers)
	fmt.Fprintf(w, "| %-34s | %8s | %7s | %6s | %8s | %6s | %9s | %9s | %-26s |\n",
		"window", "lasted", "answers", "errors", "degraded", "shed", "p99", "max", "recovery (last degraded)")
	fmt.Fprintf(w, "|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", dashes(36), dashes(10), dashes(9), dashes(8), dashes(10), dashes(8), dashes(11), dashes(11), dashes(28))
	rowf := func(name string, from, to time.Duration, rec string) {
		st := summarize(in(from, to))
		fmt.Fprintf(w, "| %-34s | %8s | %7d | %6d | %8d | %6d | %9s | %9s | %-26s |\n",
			name, (to - from).Round(100*time.Millisecond), st.n, st.errors, st.degraded, shedIn(from, to), short(st.p99), short(st.max), rec)
	}
	for i, win := range windows {
		next := s.duration
		if i+1 < len(windows) {
			next = windows[i+1].start
		}
		first, ok, last := recovery(evs, win.end, next)
		rec := "none seen"
		if ok {
			rec = fmt.Sprintf("%s (%s)", short(first), short(last))
		}
		rowf(win.name, win.start, win.end, rec)
	}
	rowf("whole run", 0, s.duration, "")
	total := summarize(evs)
	fmt.Fprintf(w, "\nrequests %d answered (%d allowed, %d denied), %d errors, %d degraded, %d shed; p50 %s, p99 %s, max %s\n",
		total.n, total.ok, total.denied, total.errors, total.degraded, len(shed), short(total.p50), short(total.p99), short(total.max))
	fmt.Fprintf(w, "sluice RSS %s at start, %s at end; goroutines %d at start, %d at end\n", mb(rssStart), mb(rssEnd), goStart, goEnd)
	counts := d.logCounts()
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprint(w, "sluice log lines:")
	for _, k := range keys {
		fmt.Fprintf(w, " %q x%d;", k, counts[k])
	}
	fmt.Fprintln(w)
	if ferr != nil {
		fmt.Fprintf(w, "fault schedule failed: %v\n", ferr)
		return total.errors + 1
	}
	return total.errors
}

// mb formats a byte count in MB.
func mb(b int64) string { return fmt.Sprintf("%.1fMB", float64(b)/(1<<20)) }

// short formats a latency for a table.
func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func dashes(n int) string { return strings.Repeat("-", n) }
