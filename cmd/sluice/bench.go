package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchFlags are sluice bench's settings.
type benchFlags struct {
	http, grpc                  string
	rule, key, domain, entries  string
	keys, concurrency, requests int
	rateText                    string
	duration, timeout           time.Duration
	format                      string
	progress                    bool
	// Made by check:
	rate       float64      // of rateText
	descriptor []benchEntry // of entries
	kind       string       // "http <url>" or "grpc <addr>"
}

// benchEntry is one descriptor entry of --descriptor.
type benchEntry struct{ key, value string }

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("bench", "Drive a running sluice serve with decisions, over HTTP (POST /v1/check) or\n"+
		"Envoy's gRPC ShouldRateLimit, at a concurrency, a rate and a spread of client keys,\n"+
		"and report decisions per second, latency percentiles and how many were allowed,\n"+
		"denied or failed. Keys are used in turn, {n} in --key or --descriptor standing for\n"+
		"the key's number and {ip} for an IPv4 address made of it (10.x.y.z).", stdout)
	var b benchFlags
	fs.stringVar(&b.http, "http", "SLUICE_BENCH_HTTP", "", "base URL of serve's HTTP listener, such as http://127.0.0.1:8080 (this or --grpc)")
	fs.stringVar(&b.grpc, "grpc", "SLUICE_BENCH_GRPC", "", "address of serve's gRPC listener, such as 127.0.0.1:8081 (this or --http)")
	fs.stringVar(&b.rule, "rule", "SLUICE_BENCH_RULE", "", "over HTTP: the rule of every check")
	fs.stringVar(&b.key, "key", "SLUICE_BENCH_KEY", "{ip}", "over HTTP: the client key of each check")
	fs.stringVar(&b.domain, "domain", "SLUICE_BENCH_DOMAIN", "sluice", "over gRPC: the request's domain")
	fs.stringVar(&b.entries, "descriptor", "SLUICE_BENCH_DESCRIPTOR", "remote_address={ip}", "over gRPC: the descriptor's entries, key=value,key=value (for a sluice policy file: rule=<name>,<key>=...)")
	fs.intVar(&b.keys, "keys", "SLUICE_BENCH_KEYS", 1000, "distinct client keys, used in turn")
	fs.intVar(&b.concurrency, "concurrency", "SLUICE_BENCH_CONCURRENCY", 64, "requests in flight at once")
	fs.intVar(&b.requests, "requests", "SLUICE_BENCH_REQUESTS", 0, "requests to send in all (0: for --duration)")
	fs.stringVar(&b.rateText, "rate", "SLUICE_BENCH_RATE", "0", "requests per second, paced evenly across the workers, latency counted from when each was due (0: as fast as they are answered)")
	duration := fs.duration("duration", "SLUICE_BENCH_DURATION", 10*time.Second, "how long to send when --requests is 0")
	timeout := fs.duration("timeout", "SLUICE_BENCH_TIMEOUT", 10*time.Second, "how long one request may take; longer is an error")
	fs.stringVar(&b.format, "format", "SLUICE_BENCH_FORMAT", "text", "the summary's format: text or json")
	progress := fs.boolean("progress", "SLUICE_BENCH_PROGRESS", true, "write a progress line to stderr every second")
	if err := fs.parse(args); err != nil {
		return err
	}
	b.duration, b.timeout, b.progress = *duration, *timeout, *progress
	if err := b.check(); err != nil {
		return usageError{err}
	}
	target, closeTarget, err := b.target()
	if err != nil {
		return err
	}
	defer closeTarget()
	res := b.run(ctx, target, stderr)
	if err := res.write(stdout, &b); err != nil {
		return err
	}
	if res.errors > 0 && res.errors == res.sent {
		return fmt.Errorf("every request failed; the first: %v", res.firstErr)
	}
	return nil
}

// check validates the flags and parses --rate and --descriptor.
func (b *benchFlags) check() error {
	var err error
	switch {
	case (b.http == "") == (b.grpc == ""):
		return errors.New("give one of --http and --grpc")
	case b.keys < 1:
		return fmt.Errorf("--keys %d: at least 1", b.keys)
	case b.concurrency < 1 || b.concurrency > 10000:
		return fmt.Errorf("--concurrency %d: from 1 to 10000", b.concurrency)
	case b.requests < 0:
		return fmt.Errorf("--requests %d: at least 0", b.requests)
	case b.requests == 0 && b.duration <= 0:
		return fmt.Errorf("--duration %s: positive, when --requests is 0", b.duration)
	case b.format != "text" && b.format != "json":
		return fmt.Errorf("--format %q is not one of text, json", b.format)
	case b.http != "" && b.rule == "":
		return errors.New("--rule is required over HTTP")
	}
	if b.rate, err = strconv.ParseFloat(b.rateText, 64); err != nil || !(b.rate == 0 || b.rate >= minBenchRate && b.rate <= maxBenchRate) {
		return fmt.Errorf("--rate %q: requests per second, from %g to %g, or 0 for as fast as answered", b.rateText, minBenchRate, maxBenchRate)
	}
	if b.timeout <= 0 {
		return fmt.Errorf("--timeout %s: positive", b.timeout)
	}
	if b.keys > maxIPKeys && (strings.Contains(b.key, "{ip}") && b.http != "" || strings.Contains(b.entries, "{ip}") && b.grpc != "") {
		return fmt.Errorf("--keys %d: {ip} makes at most %d distinct addresses", b.keys, maxIPKeys)
	}
	b.kind = "http " + b.http
	if b.grpc != "" {
		b.kind = "grpc " + b.grpc
		for _, kv := range strings.Split(b.entries, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("--descriptor %q: want key=value pairs separated by commas", b.entries)
			}
			b.descriptor = append(b.descriptor, benchEntry{k, v})
		}
	}
	return nil
}

// The bounds of --rate: one request in about 17 minutes, and more than a
// process sends.
const (
	minBenchRate = 1e-3
	maxBenchRate = 1e7
)

// maxIPKeys is how many distinct addresses {ip} makes (10.x.y.z).
const maxIPKeys = 1 << 24

// benchTarget makes one decision for key number n: allowed or denied,
// or an error.
type benchTarget func(ctx context.Context, n int) (allowed bool, err error)

// target returns the decision of one request to the service, and how to
// release its connections.
func (b *benchFlags) target() (benchTarget, func(), error) {
	if b.grpc != "" {
		conn, err := grpc.NewClient(b.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("--grpc %q: %w", b.grpc, err)}
		}
		client := rlsv3.NewRateLimitServiceClient(conn)
		return func(ctx context.Context, n int) (bool, error) {
			d := &commonv3.RateLimitDescriptor{Entries: make([]*commonv3.RateLimitDescriptor_Entry, len(b.descriptor))}
			for i, e := range b.descriptor {
				d.Entries[i] = &commonv3.RateLimitDescriptor_Entry{Key: e.key, Value: expandKey(e.value, n)}
			}
			ctx, cancel := context.WithTimeout(ctx, b.timeout)
			defer cancel()
			resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: b.domain, Descriptors: []*commonv3.RateLimitDescriptor{d}})
			if err != nil {
				return false, err
			}
			return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
		}, func() { conn.Close() }, nil
	}
	tr := &http.Transport{MaxIdleConns: b.concurrency, MaxIdleConnsPerHost: b.concurrency, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr, Timeout: b.timeout}
	url := strings.TrimSuffix(b.http, "/") + "/v1/check"
	rule, _ := json.Marshal(b.rule)
	return func(ctx context.Context, n int) (bool, error) {
		key, _ := json.Marshal(expandKey(b.key, n))
		body := append(append(append(append([]byte(`{"rule":`), rule...), `,"key":`...), key...), '}')
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		io.Copy(io.Discard, resp.Body) // to the end: the connection is reused
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}, tr.CloseIdleConnections, nil
}

// expandKey writes key number n into template: {n} as the number, {ip}
// as the IPv4 address 10.x.y.z of it.
func expandKey(template string, n int) string {
	if !strings.Contains(template, "{") {
		return template
	}
	ip := fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
	return strings.NewReplacer("{n}", strconv.Itoa(n), "{ip}", ip).Replace(template)
}

// benchResult is what a run saw.
type benchResult struct {
	sent, allowed, denied, errors int64
	elapsed                       time.Duration
	latencies                     []time.Duration // sorted
	firstErr                      error
}

// run sends the requests and returns what they got.
func (b *benchFlags) run(ctx context.Context, target benchTarget, progress io.Writer) *benchResult {
	// The duration ends the sending, not the requests in flight: each
	// finishes and counts (a context deadline would fail them).
	var end time.Time
	if b.requests == 0 {
		end = time.Now().Add(b.duration)
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
	if b.progress {
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
					fmt.Fprintf(progress, "%5.0fs  %9.0f decisions/s  allowed %d  denied %d  errors %d\n",
						now.Sub(start).Seconds(), float64(done-last)/now.Sub(lastAt).Seconds(), allowed.Load(), denied.Load(), failed.Load())
					last, lastAt = done, now
				}
			}
		}()
	}
	for range b.concurrency {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for {
				i := next.Add(1) - 1
				if b.requests > 0 && i >= int64(b.requests) || ctx.Err() != nil {
					return
				}
				t0 := time.Time{}
				if b.rate > 0 {
					// Evenly paced: request i is due at start + i/rate, and
					// its latency counts from then, so that requests held up
					// behind a slow answer count the wait (no coordinated
					// omission).
					t0 = start.Add(time.Duration(float64(i) / b.rate * float64(time.Second)))
					if !end.IsZero() && t0.After(end) {
						return
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Until(t0)):
					}
				}
				if !end.IsZero() && time.Now().After(end) {
					return
				}
				if t0.IsZero() {
					t0 = time.Now()
				}
				ok, err := target(ctx, int(i%int64(b.keys)))
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
	r := &benchResult{allowed: allowed.Load(), denied: denied.Load(), errors: failed.Load(), elapsed: time.Since(start), latencies: all}
	r.sent = r.allowed + r.denied + r.errors
	if e := firstErr.Load(); e != nil {
		r.firstErr = *e
	}
	slices.Sort(r.latencies)
	return r
}

// quantile returns the q quantile of the sorted latencies (0 for none).
func (r *benchResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(int(q*float64(len(r.latencies))), len(r.latencies)-1)]
}

// write writes the summary in b.format.
func (r *benchResult) write(w io.Writer, b *benchFlags) error {
	perSecond := float64(r.sent) / r.elapsed.Seconds()
	if b.format == "json" {
		out := map[string]any{
			"target": b.kind, "concurrency": b.concurrency, "keys": b.keys, "rate": b.rate,
			"requests": r.sent, "seconds": r.elapsed.Seconds(), "decisions_per_second": perSecond,
			"allowed": r.allowed, "denied": r.denied, "errors": r.errors,
			"p50_us": r.quantile(0.50).Microseconds(), "p90_us": r.quantile(0.90).Microseconds(),
			"p99_us": r.quantile(0.99).Microseconds(), "max_us": r.quantile(1).Microseconds(),
		}
		if r.firstErr != nil {
			out["first_error"] = r.firstErr.Error()
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	rate := "as fast as answered"
	if b.rate > 0 {
		rate = strconv.FormatFloat(b.rate, 'f', -1, 64) + "/s"
	}
	fmt.Fprintf(w, "target       %s, %d in flight, %d keys, %s\n", b.kind, b.concurrency, b.keys, rate)
	fmt.Fprintf(w, "requests     %d in %s: %.0f decisions/s\n", r.sent, r.elapsed.Round(time.Millisecond), perSecond)
	fmt.Fprintf(w, "allowed      %d\ndenied       %d\nerrors       %d\n", r.allowed, r.denied, r.errors)
	us := func(q float64) time.Duration { return r.quantile(q).Round(time.Microsecond) }
	fmt.Fprintf(w, "latency      p50 %s  p90 %s  p99 %s  max %s\n", us(0.50), us(0.90), us(0.99), us(1))
	if r.firstErr != nil {
		fmt.Fprintf(w, "first error  %v\n", r.firstErr)
	}
	return nil
}
