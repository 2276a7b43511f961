package httplimit

import (
	"encoding/base64"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// HeaderMode chooses which rate-limit header fields SetHeaders writes. The
// zero value is HeadersBoth.
type HeaderMode int

// The header modes, named in configuration files by ParseHeaderMode's
// names.
const (
	// HeadersBoth writes the IETF draft's fields and the legacy ones.
	HeadersBoth HeaderMode = iota
	// HeadersIETF writes RateLimit-Policy and RateLimit only.
	HeadersIETF
	// HeadersLegacy writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset only.
	HeadersLegacy
	// HeadersNone writes no rate-limit fields. Retry-After on 429 is not a
	// rate-limit field: WriteTooManyRequests writes it in every mode.
	HeadersNone
)

var headerModeNames = [...]string{"both", "ietf", "legacy", "none"}

// ParseHeaderMode returns the HeaderMode named s: "both", "ietf",
// "legacy" or "none".
func ParseHeaderMode(s string) (HeaderMode, error) {
	for i, name := range headerModeNames {
		if s == name {
			return HeaderMode(i), nil
		}
	}
	return 0, fmt.Errorf("httplimit: header mode %q is not one of both, ietf, legacy, none", s)
}

// String returns the mode's name as ParseHeaderMode accepts it.
func (m HeaderMode) String() string {
	if m < 0 || int(m) >= len(headerModeNames) {
		return "HeaderMode(" + strconv.Itoa(int(m)) + ")"
	}
	return headerModeNames[m]
}

// SetHeaders writes the rate-limit header fields of a decision to h,
// replacing any already there. results[i] belongs to limits[i]; binding
// is the index of the binding result (sluice.MultiResult.Binding); pk is
// the partition key, or nil to send none; now is the time of the decision.
//
// HeadersBoth and HeadersIETF write, with one list item per limit in the
// order given (draft-ietf-httpapi-ratelimit-headers-10):
//
//	RateLimit-Policy: "name";q=<quota>;w=<window in seconds>[;pk=:<base64>:]
//	RateLimit: "name";r=<Remaining>;t=<seconds, rounded up>[;pk=:<base64>:]
//
// The name is the draft's policy identifier, an sf-string in which
// characters outside printable ASCII are written as '?'. It is the limit's
// Name (config names every limit of a named rule, "login-1m"); a limit
// without one is named by its Period as config would without the rule's
// prefix ("1s", "1h30m", "500ms"). Every item gets a distinct name: a name
// an earlier item already has (compared as written, after the '?'
// replacement) gets the first of "-2", "-3"... that no other item has, so
// that a name given to a later limit is never taken from it. A limit's
// RateLimit item has the name of its RateLimit-Policy item.
//
// q and w state a pace, not a capacity: a client that sends evenly, q
// requests per w seconds, starting at any instant on a key with nothing
// spent, is never denied by the limit, however long it keeps on. w is the
// Period in whole seconds, rounded up, and at least 1; q is the most
// requests that fit in w at the fastest even pace the algorithm sustains,
// rounded down:
//
//   - token_bucket and gcra regain one token per Limit.Interval
//     (Period/Limit rounded up to the microsecond): q = ⌊w / Interval⌋.
//     The Burst is not the quota: it is how many an idle client may send
//     at once, not a rate.
//   - fixed_window and sliding_log admit Limit per window or per Period, and
//     no even pace of at most Limit per Period puts more into either:
//     q = ⌊w × Limit / Period⌋, the Limit itself for a Period of whole
//     seconds.
//   - sliding_window's estimate denies a pace of exactly Limit per Period
//     (a full previous window still weighs on each window's first
//     request), and sustains Limit-1 per Period with its spacing rounded up
//     to the microsecond: q = ⌊w / ⌈Period/(Limit-1)⌉⌋. With Limit 1 the
//     pace is one per 2×Period, so w is 2×Period rounded up and q is 1.
//
// A concurrency limit is no pace: its item is q=<Limit> with the draft's
// quota unit qu="concurrent-requests" and no w, and it is named
// "concurrent" when it has no Name.
//
// For example:
//
//	token_bucket   20/1s burst 100  q=20;w=1     (not q=100: five times too fast)
//	token_bucket   3/1s             q=2;w=1      (a token per 333334µs: q=3 would drain the bucket)
//	token_bucket   10/100ms         q=100;w=1
//	gcra           7/5h             q=6;w=18000  (a token per 2571428572µs)
//	fixed_window   5/1500ms         q=6;w=2
//	fixed_window   10/500ms         q=20;w=1
//	sliding_log    20/1h            q=20;w=3600
//	sliding_window 5/1m             q=4;w=60
//	sliding_window 4/1s             q=2;w=1      (333334µs apart: 3 per second can be denied)
//	sliding_window 1/1s             q=1;w=2
//
// Rounding q down costs less than one request per window, so q/w is
// always more than half the pace, and nearly all of it when q is large. q
// is not what the limit admits at once: with a sub-second Period, a Period
// that is not whole seconds, or a Burst below Limit, q requests sent
// together may be denied in part; RateLimit's r says how many the client
// may send now. A limit that is not valid (no positive Limit or Period, an
// unknown Algorithm) gets q=Capacity, and w=Period rounded up if positive.
//
// r is the result's Remaining. t is, for a limit that denied the request,
// the time until it would admit it (RetryAfter), so that no t points past
// Retry-After as the draft asks; for the others, the time until the limit
// is fully recovered (ResetAfter).
//
// HeadersBoth and HeadersLegacy write, from the binding result:
//
//	X-RateLimit-Limit: <Limit>
//	X-RateLimit-Remaining: <Remaining>
//	X-RateLimit-Reset: <now+ResetAfter in Unix seconds, rounded up>
//
// SetHeaders never writes Retry-After: WriteTooManyRequests does, so that
// a denial a shadow rule lets through carries none. It writes the numbers
// it is given: do not pass Degraded results, whose numbers the store did
// not make. Entries beyond the shorter of limits and results are
// ignored, and a binding out of range writes no legacy fields.
func SetHeaders(h http.Header, mode HeaderMode, limits []sluice.Limit, results []sluice.Result, binding int, now time.Time, pk []byte) {
	n := min(len(limits), len(results))
	if n == 0 {
		return
	}
	// Every value is written into one buffer and made one string, and
	// the fields' value slices share one array (each capped at its one
	// value, so that an Add appends elsewhere): two allocations for the
	// values instead of two per field.
	var (
		buf   = make([]byte, 0, 128)
		keys  [5]string
		ends  [5]int
		count int
	)
	field := func(key string) { keys[count], ends[count] = key, len(buf); count++ }
	if mode == HeadersBoth || mode == HeadersIETF {
		names := policyNames(limits[:n])
		for i := range n {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			q, w := policyQuota(limits[i])
			buf = appendSFString(buf, names[i])
			buf = append(buf, ";q="...)
			buf = appendSFInt(buf, q)
			if w > 0 { // w must be positive; it is optional
				buf = append(buf, ";w="...)
				buf = appendSFInt(buf, w)
			}
			if limits[i].Algorithm == sluice.Concurrency {
				buf = append(buf, `;qu="concurrent-requests"`...)
			}
			buf = appendPartitionKey(buf, pk)
		}
		field(canonPolicy)
		for i := range n {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			r := results[i]
			buf = appendSFString(buf, names[i])
			buf = append(buf, ";r="...)
			buf = appendSFInt(buf, int64(r.Remaining))
			buf = append(buf, ";t="...)
			t := r.ResetAfter
			if !r.Allowed {
				t = r.RetryAfter // when this limit admits the request: never after Retry-After
			}
			buf = appendSFInt(buf, ceilSeconds(t))
			buf = appendPartitionKey(buf, pk)
		}
		field(canonRateLimit)
	}
	if (mode == HeadersBoth || mode == HeadersLegacy) && binding >= 0 && binding < n {
		r := results[binding]
		buf = strconv.AppendInt(buf, int64(r.Limit), 10)
		field(canonLimit)
		buf = strconv.AppendInt(buf, int64(max(r.Remaining, 0)), 10)
		field(canonRemaining)
		buf = strconv.AppendInt(buf, resetEpoch(now, r.ResetAfter), 10)
		field(canonReset)
	}
	if count == 0 {
		return
	}
	all, vals := string(buf), make([]string, count)
	from := 0
	for i := range count {
		vals[i] = all[from:ends[i]]
		from = ends[i]
		h[keys[i]] = vals[i : i+1 : i+1]
	}
}

// SetHeaders's field names in their canonical form, as http.Header.Set
// stores them, made once: Set would canonicalize them (a new string for
// each of these mixed-case names) on every response.
var (
	canonPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	canonRateLimit = http.CanonicalHeaderKey("RateLimit")
	canonLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	canonRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	canonReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
)

// policyQuota returns the q and w of l's RateLimit-Policy item, as
// SetHeaders documents; w is 0, to be left out, when l has no Period.
func policyQuota(l sluice.Limit) (q, w int64) {
	if l.Algorithm == sluice.Concurrency {
		return int64(l.Limit), 0 // requests in flight at once: no window
	}
	p, n := l.Period.Microseconds(), int64(l.Limit)
	// The pace: one request per num/den µs.
	var num, den int64 = 0, 1
	switch l.Algorithm {
	case "", sluice.TokenBucket, sluice.GCRA:
		num = int64(l.Interval() / time.Microsecond)
	case sluice.FixedWindow, sluice.SlidingLog:
		num, den = p, n
	case sluice.SlidingWindow:
		if n == 1 {
			num = 2 * p
		} else if n > 1 {
			num = (p + n - 2) / (n - 1) // ⌈p/(n-1)⌉
		}
	}
	if p <= 0 || n <= 0 || num <= 0 {
		return int64(l.Capacity()), ceilSeconds(l.Period)
	}
	w = max(ceilSeconds(l.Period), 1)
	if q = evenQuota(w, num, den); q == 0 { // sliding_window's 1 per 2×Period
		w = (num + den*1e6 - 1) / (den * 1e6)
		q = evenQuota(w, num, den)
	}
	return q, w
}

// evenQuota returns how many requests spaced num/den µs apart fit in w
// seconds, ⌊w×10⁶×den/num⌋, at most sfMaxInt.
func evenQuota(w, num, den int64) int64 {
	hi, lo := bits.Mul64(uint64(w)*1e6, uint64(den))
	if hi >= uint64(num) {
		return sfMaxInt // the quotient would not fit in 64 bits
	}
	q, _ := bits.Div64(hi, lo, uint64(num))
	return int64(min(q, sfMaxInt))
}

// policyNames returns the policy name of each limit, distinct as
// SetHeaders documents.
func policyNames(limits []sluice.Limit) []string {
	names := make([]string, len(limits))
	for i, l := range limits {
		names[i] = sfPrintable(l.Name)
	}
	if distinctNames(names) {
		return names // the usual case: a policy names every limit, apart
	}
	given := make(map[string]bool, len(limits))
	for _, name := range names {
		if name != "" {
			given[name] = true
		}
	}
	used := make(map[string]bool, len(limits))
	for i, l := range limits {
		base := names[i]
		if base == "" {
			base = strings.ReplaceAll(policy.CompactDuration(l.Period), "µ", "u") // named as a policy file names a limit, less the rule
			if l.Algorithm == sluice.Concurrency {
				base = "concurrent"
			}
		}
		name := base
		for k := 2; used[name] || name != names[i] && given[name]; k++ {
			name = base + "-" + strconv.Itoa(k)
		}
		names[i] = name
		used[name] = true
	}
	return names
}

// RetryAfterSeconds returns the Retry-After of a wait d: whole seconds,
// rounded up, and at least 1, so that a client that waits it is never
// early and never retries at once.
func RetryAfterSeconds(d time.Duration) int {
	return int(min(max(ceilSeconds(d), 1), math.MaxInt))
}

// ceilSeconds returns d in whole seconds, rounded up; 0 when d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// resetEpoch returns now+d in Unix seconds, rounded up: the first whole
// second at which the limit has recovered.
func resetEpoch(now time.Time, d time.Duration) int64 {
	t := now.Add(max(d, 0))
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// sfMaxInt is the largest RFC 9651 Integer (15 digits).
const sfMaxInt = 999_999_999_999_999

// appendSFInt appends v as an RFC 9651 Integer, clamped to the draft's
// non-negative values and the Integer's 15 digits.
func appendSFInt(b []byte, v int64) []byte {
	return strconv.AppendInt(b, min(max(v, 0), sfMaxInt), 10)
}

// appendSFString appends s as an RFC 9651 String: quoted, with '"' and
// '\' escaped and every character outside printable ASCII written as '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', byte(c))
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, byte(c))
		}
	}
	return append(b, '"')
}

// appendPartitionKey appends the pk parameter, an RFC 9651 Byte Sequence,
// unless pk is empty.
func appendPartitionKey(b []byte, pk []byte) []byte {
	if len(pk) == 0 {
		return b
	}
	b = append(b, ";pk=:"...)
	b = base64.StdEncoding.AppendEncode(b, pk)
	return append(b, ':')
}

// distinctNames reports whether names are all given and all different.
// A response lists a handful of limits: comparing pairs costs less than a
// map.
func distinctNames(names []string) bool {
	for i, name := range names {
		if name == "" || slices.Contains(names[:i], name) {
			return false
		}
	}
	return true
}

// sfPrintable returns s with every character outside printable ASCII
// replaced by '?', as appendSFString writes it.
func sfPrintable(s string) string {
	return strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e {
			return '?'
		}
		return c
	}, s)
}
