package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/internal/service/loadgen"
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
	tls                         *clientTLSFlags
	// Made by check:
	rate       float64          // of rateText
	keyTmpl    loadgen.Template // of key
	descriptor []loadgen.Entry  // of entries
	kind       string           // "http <url>" or "grpc <addr>"
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("bench", "Drive a running sluice serve with decisions, over HTTP (POST /v1/check) or\n"+
		"Envoy's gRPC ShouldRateLimit, at a concurrency, a rate and a spread of client keys,\n"+
		"and report decisions per second, latency percentiles and how many were allowed,\n"+
		"denied or failed. Keys are used in turn, {n} in --key or --descriptor standing for\n"+
		"the key's number and {ip} for an IPv4 address made of it (10.x.y.z).", stdout)
	var b benchFlags
	fs.stringVar(&b.http, "http", "SLUICE_BENCH_HTTP", "", "base URL of serve's HTTP listener, such as http://127.0.0.1:8080, or https:// for a serve with --tls-cert (this or --grpc)")
	fs.stringVar(&b.grpc, "grpc", "SLUICE_BENCH_GRPC", "", "address of serve's gRPC listener, such as 127.0.0.1:8081 (this or --http), over TLS when a --tls-* flag is given")
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
	b.tls = addClientTLSFlags(fs, "SLUICE_BENCH_")
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
	if err := writeSummary(stdout, res, &b); err != nil {
		return err
	}
	if res.Errors > 0 && res.Errors == res.Sent {
		return fmt.Errorf("every request failed; the first: %v", res.FirstErr)
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
	b.kind = "http " + b.http
	b.keyTmpl = loadgen.ParseTemplate(b.key)
	ip := b.keyTmpl.HasIP()
	if b.grpc != "" {
		b.kind, ip = "grpc "+b.grpc, false
		for _, kv := range strings.Split(b.entries, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("--descriptor %q: want key=value pairs separated by commas", b.entries)
			}
			e := loadgen.Entry{Key: k, Value: loadgen.ParseTemplate(v)}
			b.descriptor, ip = append(b.descriptor, e), ip || e.Value.HasIP()
		}
	}
	if ip && b.keys > loadgen.MaxIPKeys {
		return fmt.Errorf("--keys %d: {ip} makes at most %d distinct addresses", b.keys, loadgen.MaxIPKeys)
	}
	return nil
}

// The bounds of --rate: one request in about 17 minutes, and more than a
// process sends.
const (
	minBenchRate = 1e-3
	maxBenchRate = 1e7
)

// target returns the decision of one request to the service, and how to
// release its connections.
func (b *benchFlags) target() (loadgen.Func, func(), error) {
	if b.grpc != "" {
		creds, err := b.tls.grpcCredentials()
		if err != nil {
			return nil, nil, err
		}
		conn, err := grpc.NewClient(b.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, nil, usageError{fmt.Errorf("--grpc %q: %w", b.grpc, err)}
		}
		return loadgen.GRPC(conn, b.domain, b.descriptor, b.keys, b.timeout), func() { conn.Close() }, nil
	}
	tlsConfig, err := b.tls.config("--http", b.http)
	if err != nil {
		return nil, nil, err
	}
	tr := &http.Transport{MaxIdleConns: b.concurrency, MaxIdleConnsPerHost: b.concurrency, IdleConnTimeout: time.Minute, TLSClientConfig: tlsConfig}
	client := &http.Client{Transport: tr, Timeout: b.timeout}
	return loadgen.HTTPCheck(client, b.http, b.rule, b.keyTmpl, b.keys), tr.CloseIdleConnections, nil
}

// run sends the requests and returns what they got.
func (b *benchFlags) run(ctx context.Context, target loadgen.Func, progress io.Writer) *loadgen.Result {
	o := loadgen.Options{Concurrency: b.concurrency, Requests: b.requests, Duration: b.duration, Keys: b.keys, Rate: b.rate}
	if b.progress {
		o.Progress = progress
	}
	return loadgen.Run(ctx, o, target)
}

// writeSummary writes the summary of r in b.format.
func writeSummary(w io.Writer, r *loadgen.Result, b *benchFlags) error {
	perSecond := r.PerSecond()
	if b.format == "json" {
		out := map[string]any{
			"target": b.kind, "concurrency": b.concurrency, "keys": b.keys, "rate": b.rate,
			"requests": r.Sent, "seconds": r.Elapsed.Seconds(), "decisions_per_second": perSecond,
			"allowed": r.Allowed, "denied": r.Denied, "errors": r.Errors,
			"p50_us": r.Quantile(0.50).Microseconds(), "p90_us": r.Quantile(0.90).Microseconds(),
			"p99_us": r.Quantile(0.99).Microseconds(), "max_us": r.Quantile(1).Microseconds(),
		}
		if r.FirstErr != nil {
			out["first_error"] = r.FirstErr.Error()
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
	fmt.Fprintf(w, "requests     %d in %s: %.0f decisions/s\n", r.Sent, r.Elapsed.Round(time.Millisecond), perSecond)
	fmt.Fprintf(w, "allowed      %d\ndenied       %d\nerrors       %d\n", r.Allowed, r.Denied, r.Errors)
	us := func(q float64) time.Duration { return r.Quantile(q).Round(time.Microsecond) }
	fmt.Fprintf(w, "latency      p50 %s  p90 %s  p99 %s  max %s\n", us(0.50), us(0.90), us(0.99), us(1))
	if r.FirstErr != nil {
		fmt.Fprintf(w, "first error  %v\n", r.FirstErr)
	}
	return nil
}
