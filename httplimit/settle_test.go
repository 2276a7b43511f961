package httplimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/storetest"
)

// budgetYAML is a token budget of 100,000 per hour per API key that
// reserves 4096 and settles from cost_from.
func budgetYAML(costFrom string, strip bool) string {
	return fmt.Sprintf(`
rules:
  - name: tokens
    key: header:X-API-Key
    algorithm: fixed_window
    limit: 100000
    period: 1h
    settle: {cost_from: %q, reserve: 4096, strip: %v}
`, costFrom, strip)
}

// settled serves next behind the middleware under yaml on a real HTTP
// server; done receives once each request's middleware has returned (its
// settle done). left reports what the key k has left.
func settled(t *testing.T, yaml string, next http.Handler) (srv *httptest.Server, done chan struct{}, left func() int) {
	t.Helper()
	clock := storetest.NewClock()
	e := policy.New(newLimiter(clock), compile(t, yaml), quiet)
	mw := httplimit.New(e, httplimit.WithClock(clock.Now))(next)
	done = make(chan struct{}, 16)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		mw.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	left = func() int {
		zero := 0
		d, err := e.Check(context.Background(), policy.Check{Rule: "tokens", Key: "k", Cost: &zero})
		if err != nil {
			t.Fatal(err)
		}
		return d.Applied[0].Result().Remaining
	}
	return srv, done, left
}

// call sends a request with the API key k and reads the whole response.
func call(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	r, _ := http.NewRequest("GET", url, nil)
	r.Header.Set("X-API-Key", "k")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// TestSettleFromResponse: the middleware settles each request at the cost
// its response reports, in a header, a trailer announced or not, or its
// body's bytes; a response that reports none keeps the reserve; a rule
// that strips its header keeps it and its trailer from the client.
func TestSettleFromResponse(t *testing.T) {
	tests := []struct {
		name     string
		costFrom string
		strip    bool
		handler  http.HandlerFunc
		want     int // what the request cost
	}{
		{"header", "header:X-Tokens-Used", false, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "1200")
			_, _ = io.WriteString(w, "answer")
		}, 1200},
		{"header stripped", "header:X-Tokens-Used", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "700")
			w.WriteHeader(http.StatusCreated)
		}, 700},
		{"announced trailer", "header:X-Tokens-Used", false, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Tokens-Used")
			_, _ = io.WriteString(w, "answer")
			w.Header().Set("X-Tokens-Used", "5000") // above the reserve: a debt
		}, 5000},
		{"trailer stripped", "header:X-Tokens-Used", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Tokens-Used, X-Other")
			_, _ = io.WriteString(w, "answer")
			w.Header().Set("X-Tokens-Used", "10")
			w.Header().Set("X-Other", "kept")
		}, 10},
		{"unannounced trailer", "header:X-Tokens-Used", true, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "answer")
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Tokens-Used", "0")
		}, 0},
		{"silent handler, stripped trailer", "header:X-Tokens-Used", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Tokens-Used")
			w.Header().Set("X-Tokens-Used", "5") // writes nothing: net/http sends the header after
		}, 5},
		{"no cost reported", "header:X-Tokens-Used", false, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "answer")
		}, 4096},
		{"not a number", "header:X-Tokens-Used", false, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "lots")
		}, 4096},
		{"bytes", "bytes", false, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("x", 3000))
		}, 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, done, left := settled(t, budgetYAML(tt.costFrom, tt.strip), tt.handler)
			res, _ := call(t, srv.URL)
			<-done
			if got := 100_000 - left(); got != tt.want {
				t.Errorf("the request cost %d, want %d", got, tt.want)
			}
			if res.Header.Get("RateLimit-Policy") == "" {
				t.Error("no RateLimit-Policy header: the request was not limited")
			}
			name := "X-Tokens-Used"
			_, announced := res.Trailer[name] // the client moves an announced trailer's name there
			seen := res.Header.Get(name) != "" || announced || strings.Contains(res.Header.Get("Trailer"), name)
			if tt.strip && seen {
				t.Errorf("the client saw %s (header %v, trailer %v) though the rule strips it", name, res.Header, res.Trailer)
			}
			if tt.name == "trailer stripped" && res.Trailer.Get("X-Other") != "kept" {
				t.Errorf("trailer X-Other: %q, want kept: only the cost's trailer is stripped", res.Trailer.Get("X-Other"))
			}
		})
	}
}

// TestSettleStream: a server-sent event stream 5 seconds long, through
// the middleware and a reverse proxy as sluice proxy runs it, is settled
// from the trailer the upstream sends at its end; and a client that goes
// away mid-stream is settled for the bytes it was sent.
func TestSettleStream(t *testing.T) {
	const events = 10
	stream := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "X-Tokens-Used")
		tokens := 0
		for i := range events {
			_, _ = fmt.Fprintf(w, "data: token %d\n\n", i)
			w.(http.Flusher).Flush()
			tokens += 100
			time.Sleep(500 * time.Millisecond)
		}
		w.Header().Set("X-Tokens-Used", strconv.Itoa(tokens))
	}
	upstream := httptest.NewServer(http.HandlerFunc(stream))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	srv, done, left := settled(t, budgetYAML("header:X-Tokens-Used", true), proxy)
	res, body := call(t, srv.URL)
	<-done
	if n := strings.Count(body, "data: "); n != events || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d events of %s, want %d", n, res.Header.Get("Content-Type"), events)
	}
	if got := 100_000 - left(); got != 100*events {
		t.Errorf("the stream cost %d, want %d, its trailer's", got, 100*events)
	}
	if res.Trailer.Get("X-Tokens-Used") != "" {
		t.Errorf("the client saw the trailer %v, which the rule strips", res.Trailer)
	}

	// A client that reads 3 events and goes away: the stream's bytes
	// that reached the middleware's writer are what it is settled at.
	var sent atomic.Int64
	srv, done, left = settled(t, budgetYAML("bytes", false), endless(&sent))
	leaveAfter3(t, srv.URL)
	<-done
	if got := 100_000 - left(); got != int(sent.Load()) || got < 3*len("data: event 000000\n\n") {
		t.Errorf("the client that left after 3 events cost %d, want the %d bytes the handler sent (at least 3 events)", got, sent.Load())
	}
}

// endless streams an event every 20ms until its client goes away,
// counting in sent (when not nil) the bytes its writer took.
func endless(sent *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; r.Context().Err() == nil; i++ {
			n, err := fmt.Fprintf(w, "data: event %06d\n\n", i)
			if sent != nil {
				sent.Add(int64(n))
			}
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// leaveAfter3 reads 3 events of the stream at url, with the API key k,
// and goes away.
func leaveAfter3(t *testing.T, url string) {
	t.Helper()
	r, _ := http.NewRequest("GET", url, nil)
	r.Header.Set("X-API-Key", "k")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	for range 6 { // 3 events of two lines
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSettleProxiedDisconnect: a client that leaves a stream proxied by a
// reverse proxy, which aborts its handler (a panic of
// http.ErrAbortHandler), is settled all the same, at the bytes it was
// sent through the middleware.
func TestSettleProxiedDisconnect(t *testing.T) {
	upstream := httptest.NewServer(endless(nil))
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	var sent atomic.Int64
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(countingWriter{w, &sent}, r)
	})
	srv, done, left := settled(t, budgetYAML("bytes", false), counted)
	leaveAfter3(t, srv.URL)
	<-done
	if got := 100_000 - left(); got != int(sent.Load()) || got < 3*len("data: event 000000\n\n") {
		t.Errorf("the client that left the proxied stream after 3 events cost %d, want the %d bytes the proxy wrote (at least 3 events)", got, sent.Load())
	}
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func (c countingWriter) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

func (c countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
