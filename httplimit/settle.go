package httplimit

import (
	"bufio"
	"context"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-go/sluice/policy"
)

// settleWriter is the ResponseWriter a request of a decision that settles
// (policy.Decision.Settled) is answered through: it counts the body's
// bytes, takes the cost headers that rules strip out of the header before
// it is sent, and keeps stripped trailers from being sent.
type settleWriter struct {
	http.ResponseWriter
	d       *policy.Decision
	log     *slog.Logger
	bytes   int64
	wrote   bool
	strip   []string            // the headers (and trailers) to strip, canonical
	stashed map[string][]string // the values of stripped headers, at WriteHeader

	hijacked *hijackedConn // the connection the handler took over, if it did
}

// Hijack lets the handler take over the connection (http.Hijacker), and
// keeps the settle, which releases the decision's slots, for when the
// connection is closed.
func (sw *settleWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(sw.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	sw.hijacked = &hijackedConn{Conn: c, closed: make(chan struct{})}
	return sw.hijacked, rw, nil
}

// hijackedConn is a hijacked connection that says when it is closed.
type hijackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

// Close closes the connection, and tells the middleware once.
func (c *hijackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// newSettleWriter returns the writer for d's request, answered through w,
// logging to log.
func newSettleWriter(w http.ResponseWriter, d *policy.Decision, log *slog.Logger) *settleWriter {
	sw := &settleWriter{ResponseWriter: w, d: d, log: log}
	for _, a := range d.Applied {
		if st := a.Rule.Settle; st != nil && st.Strip && st.CostFrom.Header != "" {
			sw.strip = append(sw.strip, st.CostFrom.Header)
		}
	}
	return sw
}

// WriteHeader strips the cost headers, then writes the header.
func (sw *settleWriter) WriteHeader(code int) {
	if !sw.wrote && code >= 200 { // an informational header is not the response's
		sw.wrote = true
		h := sw.Header()
		for _, name := range sw.strip {
			if v := h.Values(name); len(v) > 0 {
				if sw.stashed == nil {
					sw.stashed = map[string][]string{}
				}
				sw.stashed[name] = v
				h.Del(name)
			}
			dropTrailer(h, name)
		}
	}
	sw.ResponseWriter.WriteHeader(code)
}

// dropTrailer removes name from the trailers h announces.
func dropTrailer(h http.Header, name string) {
	vs := h.Values("Trailer")
	if len(vs) == 0 {
		return
	}
	var keep []string
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" && http.CanonicalHeaderKey(f) != name {
				keep = append(keep, f)
			}
		}
	}
	h.Del("Trailer")
	if len(keep) > 0 {
		h.Set("Trailer", strings.Join(keep, ", "))
	}
}

// Write counts the bytes of the body.
func (sw *settleWriter) Write(b []byte) (int, error) {
	if !sw.wrote {
		sw.WriteHeader(http.StatusOK)
	}
	n, err := sw.ResponseWriter.Write(b)
	sw.bytes += int64(n)
	return n, err
}

// Flush sends what is buffered (a streamed response's events), when the
// writer underneath can.
func (sw *settleWriter) Flush() {
	if !sw.wrote {
		sw.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(sw.ResponseWriter).Flush()
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (sw *settleWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

// cost returns what the response reports its work cost under a's rule:
// its trailer (set once the body is done, a stream's), else its header,
// else, for cost_from bytes, the body's bytes. ok is false when the
// response reports none, or not a whole number.
func (sw *settleWriter) cost(a *policy.Applied) (int, bool) {
	src := a.Rule.Settle.CostFrom
	if src.Header == "" {
		return int(min(sw.bytes, math.MaxInt)), true
	}
	h := sw.Header()
	v := h.Get(http.TrailerPrefix + src.Header)
	if v == "" {
		v = h.Get(src.Header) // a trailer announced with Trailer, or a header not stripped
	}
	if v == "" && len(sw.stashed[src.Header]) > 0 {
		v = sw.stashed[src.Header][0]
	}
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		sw.log.Warn("sluice: a response reports a cost that is no whole number; the reservation keeps its cost", "rule", a.Rule.Name, "header", src.Header, "value", v)
		return 0, false
	}
	return n, true
}

// settle settles the decision at the costs the response reported, and
// keeps stripped trailers from being sent. It runs when the handler has
// returned or panicked (a client gone mid-stream, which a reverse proxy
// aborts), under a context the client's going away does not cancel.
func (sw *settleWriter) settle(ctx context.Context) {
	err := sw.d.Settle(context.WithoutCancel(ctx), sw.cost)
	h := sw.Header()
	for _, name := range sw.strip {
		h.Del(name)
		h.Del(http.TrailerPrefix + name)
		dropTrailer(h, name) // a handler that wrote nothing: its header is not sent yet
	}
	if err != nil {
		sw.log.Error("sluice: settle failed; the reservation keeps its cost", "err", err)
	}
}
