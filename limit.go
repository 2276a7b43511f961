package sluice

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Algorithm names a rate-limiting algorithm. The zero value means TokenBucket.
type Algorithm string

// The algorithms every store implements with identical semantics.
const (
	// FixedWindow counts requests in windows aligned to the Unix epoch and
	// admits a request while count+cost <= Limit. Cheapest; a client can send
	// 2×Limit around a window boundary.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindow weights the previous window's count by the part of it still
	// inside the sliding period: estimate = prev×(1−elapsed/Period) + current.
	// Nearly as cheap as FixedWindow, without most of the boundary burst.
	SlidingWindow Algorithm = "sliding_window"
	// SlidingLog keeps one timestamp per admitted request and admits while the
	// requests in (now−Period, now] plus cost fit in Limit. Exact, but its
	// memory grows with Limit.
	SlidingLog Algorithm = "sliding_log"
	// TokenBucket refills Limit tokens per Period up to Burst and admits a
	// request while at least cost tokens are left. Allows bursts while
	// enforcing an average rate: the default for most APIs.
	TokenBucket Algorithm = "token_bucket"
	// GCRA (generic cell rate algorithm) admits exactly what TokenBucket admits
	// for the same Limit, Period and Burst, keeping less state: one time,
	// with the token interval it is measured in.
	GCRA Algorithm = "gcra"
	// Concurrency limits how many requests of a key are in flight at
	// once, not how many arrive per period: a request holds one slot of
	// Limit from the moment it is admitted until it releases it
	// (Reservation.Release), whatever its cost, and is denied while every
	// slot is held. Each slot is a lease: it expires Period after it was
	// taken or last renewed (Reservation.Renew, KeepAlive), so that the
	// slots of a process that died free themselves. Period is that lease
	// (zero: DefaultSlotTTL), and, unlike a rate limit's, it is not part
	// of the limit's Identity. Limit is at most MaxLogLimit: the stores
	// keep one entry per slot held.
	Concurrency Algorithm = "concurrency"
)

// Algorithms lists the rate-limiting algorithms, in documentation order:
// every algorithm but Concurrency, which limits requests in flight rather
// than requests per period.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, GCRA}

// DefaultSlotTTL is the lease of a Concurrency limit's slots when its
// Period is zero: a slot neither renewed nor released in that time is
// free again.
const DefaultSlotTTL = 30 * time.Second

// ParseAlgorithm returns the Algorithm named s (one of Algorithms, or
// Concurrency), or an error listing the names it accepts.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms {
		if string(a) == s {
			return a, nil
		}
	}
	if s == string(Concurrency) {
		return Concurrency, nil
	}
	return "", fmt.Errorf("%w: algorithm %q is not one of %s", ErrInvalidLimit, s, AlgorithmNames())
}

// AlgorithmNames lists the names ParseAlgorithm accepts, comma-separated,
// in documentation order (Algorithms, then concurrency), for messages and
// help texts.
func AlgorithmNames() string {
	names := make([]string, 0, len(Algorithms)+1)
	for _, a := range Algorithms {
		names = append(names, string(a))
	}
	return strings.Join(append(names, string(Concurrency)), ", ")
}

// String returns the algorithm's name; the zero value prints as token_bucket.
func (a Algorithm) String() string {
	if a == "" {
		return string(TokenBucket)
	}
	return string(a)
}

// bursty reports whether the algorithm has a Burst distinct from its Limit.
func (a Algorithm) bursty() bool { return a == "" || a == TokenBucket || a == GCRA }

// Errors returned for requests that can never be valid. Limiter methods wrap
// them with a message that says what is wrong; test with errors.Is.
var (
	// ErrInvalidLimit reports a Limit that cannot be enforced as written.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidCost reports a negative cost, or a cost larger than the
	// limit could ever admit at once (a request that would wait forever).
	ErrInvalidCost = errors.New("invalid cost")
)

// Bounds on the parameters of a Limit. Within them every time, count and
// token amount the stores compute is an integer below 2^53, exact in the
// float64 numbers of Redis' Lua (sliding_window's weighting is float64 in
// both stores, rounded identically).
const (
	// MaxLimit bounds Limit and Burst.
	MaxLimit = 1 << 40
	// MaxLogLimit bounds the Limit of SlidingLog, which stores one entry per
	// admitted request: a larger log would make one key, and one request of
	// a large cost, a burden on the store. Use SlidingWindow or TokenBucket
	// for large limits.
	MaxLogLimit = 10_000
	// MinPeriod and MaxPeriod bound Period.
	MinPeriod = time.Millisecond
	MaxPeriod = 10 * 365 * 24 * time.Hour
)

// maxState bounds Burst × Interval in microseconds (2^51 µs is 71 years):
// gcra adds up to twice that to a time (about 2^50.6 µs since 1970), and
// the sum must stay below 2^53.
const maxState = 1 << 51

// A Limit is Limit requests per Period, enforced by Algorithm.
//
// The zero Algorithm is TokenBucket. Burst applies to TokenBucket and GCRA
// only: it is the bucket's capacity, the number of requests a client that
// has been idle may send at once; zero means Burst = Limit. Name tells apart
// two limits of one algorithm and period that must not share state for the
// same key (for example two rules both keyed by client IP); it may hold
// letters, digits, '-', '_' and '.'. Limits that differ only in Limit or
// Burst share state (see Identity).
//
// Build a Limit with a literal or with the helpers:
//
//	sluice.PerMinute(100).Using(sluice.SlidingWindow)
//	sluice.PerSecond(5).WithBurst(20)
type Limit struct {
	// Algorithm enforces the limit; the zero value is TokenBucket.
	Algorithm Algorithm
	// Limit is the number of requests admitted per Period (1 to MaxLimit;
	// at most MaxLogLimit for SlidingLog).
	Limit int
	// Period is the window, or the time in which a bucket regains Limit
	// tokens (MinPeriod to MaxPeriod, whole microseconds). For
	// Concurrency it is the lease of a slot (zero: DefaultSlotTTL).
	Period time.Duration
	// Burst is the bucket's capacity (TokenBucket and GCRA only); zero
	// means Limit.
	Burst int
	// Name separates limits with equal parameters on one key.
	Name string
}

// PerSecond returns a token-bucket limit of n requests per second.
func PerSecond(n int) Limit { return Per(n, time.Second) }

// PerMinute returns a token-bucket limit of n requests per minute.
func PerMinute(n int) Limit { return Per(n, time.Minute) }

// PerHour returns a token-bucket limit of n requests per hour.
func PerHour(n int) Limit { return Per(n, time.Hour) }

// PerDay returns a token-bucket limit of n requests per 24 hours.
func PerDay(n int) Limit { return Per(n, 24*time.Hour) }

// Per returns a token-bucket limit of n requests per period.
func Per(n int, period time.Duration) Limit {
	return Limit{Algorithm: TokenBucket, Limit: n, Period: period}
}

// Concurrent returns a concurrency limit of n requests in flight at once,
// whose slots are leases of DefaultSlotTTL (see Concurrency); set Period
// for another lease.
func Concurrent(n int) Limit { return Limit{Algorithm: Concurrency, Limit: n} }

// Using returns a copy of l enforced by algorithm a.
func (l Limit) Using(a Algorithm) Limit { l.Algorithm = a; return l }

// WithBurst returns a copy of l with capacity b (TokenBucket and GCRA only).
func (l Limit) WithBurst(b int) Limit { l.Burst = b; return l }

// Named returns a copy of l with the given Name.
func (l Limit) Named(name string) Limit { l.Name = name; return l }

// Capacity returns the most requests l can admit at one instant: Burst (or
// Limit when Burst is zero) for TokenBucket and GCRA, Limit for the window
// algorithms. It is the Result.Limit of every decision under l.
func (l Limit) Capacity() int {
	if l.Algorithm.bursty() && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Normalized returns l with its defaults filled in: Algorithm TokenBucket
// for the zero Algorithm, Burst the capacity for TokenBucket and GCRA
// (Limit when Burst is zero) and zero for the other algorithms, which have
// no burst, and a Concurrency limit's Period its lease (SlotTTL). Two valid limits enforce the same thing if and only if their
// Normalized forms are equal; they share state if their Identity is.
func (l Limit) Normalized() Limit {
	if l.Algorithm == "" {
		l.Algorithm = TokenBucket
	}
	if l.Algorithm.bursty() {
		l.Burst = l.Capacity()
	} else {
		l.Burst = 0
	}
	if l.Algorithm == Concurrency {
		l.Period = l.SlotTTL()
	}
	return l
}

// SlotTTL returns the lease of a Concurrency limit's slots: Period, or
// DefaultSlotTTL when Period is zero. It is zero for the other
// algorithms.
func (l Limit) SlotTTL() time.Duration {
	switch {
	case l.Algorithm != Concurrency:
		return 0
	case l.Period == 0:
		return DefaultSlotTTL
	}
	return l.Period
}

// Identity returns the storage identity of l: its Name, its Algorithm
// (TokenBucket for the zero value) and its Period, and nothing else. Two
// valid limits share state for a key, in every store, if and only if
// their identities are equal. Limits that must not share state need
// distinct Names.
//
// Limit and Burst are not part of it, so that a limit raised or lowered
// (a reloaded policy file, a plan's new quota) keeps what every client has
// spent under it, in every algorithm: a client that spent 80 of 100 per
// hour has 70 left when the limit becomes 150, and under 50 is denied
// until its window ends, its log entries expire or its bucket's debt has
// drained below the new capacity (at the new rate: a token bucket or GCRA
// converts its debt to the tokens it owes, rounding against the client by
// at most a microsecond). A new algorithm, period or name starts from
// fresh state: their state means something else (a count per window of
// another length, a log instead of a bucket), so it is not read.
//
// A Concurrency limit's Period, its slots' lease, is not part of it
// either (its Identity's Period is zero): the slots held stay held when
// the lease changes, each until its own lease ends.
func (l Limit) Identity() Limit {
	if l.Algorithm == Concurrency {
		return Limit{Algorithm: Concurrency, Name: l.Name}
	}
	return Limit{Algorithm: l.Normalized().Algorithm, Period: l.Period, Name: l.Name}
}

// Interval returns the time in which TokenBucket and GCRA regain one token:
// Period/Limit rounded up to the microsecond, so that their long-run rate
// never exceeds Limit per Period. It is exact when Period is a whole
// multiple of Limit microseconds (100 per minute, 5 per second); otherwise
// the rate is slightly lower (3 per second: one every 333334µs), and
// Validate rejects limits it would slow by more than 1%.
func (l Limit) Interval() time.Duration {
	p := l.Period.Microseconds()
	n := int64(l.Limit)
	if n <= 0 {
		return 0
	}
	return time.Duration((p+n-1)/n) * time.Microsecond
}

// String describes l, for example "token_bucket 5/1s burst 20", or
// "concurrency 20 ttl 30s".
func (l Limit) String() string {
	s := fmt.Sprintf("%s %d/%s", l.Algorithm, l.Limit, l.Period)
	if l.Algorithm == Concurrency {
		s = fmt.Sprintf("%s %d ttl %s", l.Algorithm, l.Limit, l.SlotTTL())
	}
	if l.Algorithm.bursty() && l.Burst > 0 && l.Burst != l.Limit {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	if l.Name != "" {
		s = l.Name + ": " + s
	}
	return s
}

// LimitError is the error Limit.Validate returns: which field of a Limit
// cannot be enforced as written, and why. It wraps ErrInvalidLimit; get it
// with errors.As to report the field.
type LimitError struct {
	// Limit is the limit that failed validation.
	Limit Limit
	// Field is the field to change: "algorithm", "limit", "period",
	// "burst" or "name". A capacity too large for its token interval is
	// the fault of Burst, or of Limit when Burst is zero (the capacity is
	// then the limit).
	Field string
	// Reason says what is wrong, without the limit, for example "limit
	// must be at least 1, got 0".
	Reason string
}

// Error returns "invalid limit (<limit>): <reason>".
func (e *LimitError) Error() string {
	return fmt.Sprintf("%s (%s): %s", ErrInvalidLimit, e.Limit, e.Reason)
}

// Unwrap returns ErrInvalidLimit.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

// Validate reports why l cannot be enforced, or nil. The error is a
// *LimitError, which wraps ErrInvalidLimit.
func (l Limit) Validate() error {
	if l.valid() {
		return nil
	}
	return l.invalid()
}

// valid reports whether Validate finds nothing wrong with l, cheaply: it
// is the conjunction of the negated checks of invalid, for the decisions
// that validate their limit every time.
func (l Limit) valid() bool {
	bursty := true
	switch l.Algorithm {
	case "", TokenBucket, GCRA:
	case FixedWindow, SlidingWindow, SlidingLog:
		bursty = false
	case Concurrency:
		if l.Period == 0 {
			l.Period = DefaultSlotTTL
		}
		bursty = false
	default:
		return false
	}
	if l.Limit <= 0 || int64(l.Limit) > MaxLimit || (l.Algorithm == SlidingLog || l.Algorithm == Concurrency) && l.Limit > MaxLogLimit ||
		l.Period < MinPeriod || l.Period > MaxPeriod || l.Period%time.Microsecond != 0 ||
		l.Burst < 0 || int64(l.Burst) > MaxLimit || l.Burst != 0 && !bursty {
		return false
	}
	if bursty {
		p, n := l.Period.Microseconds(), int64(l.Limit)
		interval := (p + n - 1) / n // l.Interval()
		capacity := n
		if l.Burst > 0 {
			capacity = int64(l.Burst)
		}
		if hi, lo := bits.Mul64(uint64(capacity), uint64(interval)); hi != 0 || lo > maxState || interval*n*100 > p*101 {
			return false
		}
	}
	for i := 0; i < len(l.Name); i++ {
		if c := l.Name[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// invalid reports why l cannot be enforced, or nil: Validate, in full.
func (l Limit) invalid() error {
	bad := func(field, format string, args ...any) error {
		return &LimitError{Limit: l, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if l.Algorithm != "" && l.Algorithm != Concurrency && !slices.Contains(Algorithms, l.Algorithm) {
		return bad("algorithm", "algorithm %q is not one of %s", l.Algorithm, AlgorithmNames())
	}
	if l.Algorithm == Concurrency {
		return l.invalidConcurrency(bad)
	}
	switch {
	case l.Limit <= 0:
		return bad("limit", "limit must be at least 1, got %d", l.Limit)
	case int64(l.Limit) > MaxLimit:
		return bad("limit", "limit must be at most %d, got %d", int64(MaxLimit), l.Limit)
	case l.Algorithm == SlidingLog && l.Limit > MaxLogLimit:
		return bad("limit", "sliding_log keeps one entry per admitted request and allows a limit of at most %d, got %d; use sliding_window or token_bucket", MaxLogLimit, l.Limit)
	case l.Period < MinPeriod:
		return bad("period", "period must be at least %s, got %s", MinPeriod, l.Period)
	case l.Period > MaxPeriod:
		return bad("period", "period must be at most %s, got %s", MaxPeriod, l.Period)
	case l.Period%time.Microsecond != 0:
		return bad("period", "period must be a whole number of microseconds, got %s", l.Period)
	case l.Burst < 0:
		return bad("burst", "burst must not be negative, got %d", l.Burst)
	case int64(l.Burst) > MaxLimit:
		return bad("burst", "burst must be at most %d, got %d", int64(MaxLimit), l.Burst)
	case l.Burst != 0 && !l.Algorithm.bursty():
		return bad("burst", "burst applies to token_bucket and gcra only; %s admits at most limit per window", l.Algorithm)
	}
	if l.Algorithm.bursty() {
		interval := int64(l.Interval() / time.Microsecond)
		// Capacity × interval > maxState, in 128 bits: the same as
		// Capacity > maxState/interval, without a division.
		if hi, lo := bits.Mul64(uint64(l.Capacity()), uint64(interval)); hi != 0 || lo > maxState {
			// Without a burst this is about Period + Limit µs, which
			// MaxPeriod and MaxLimit keep below 2^51: the "limit" case only
			// keeps the field right should those bounds grow.
			field := "burst"
			if l.Burst == 0 {
				field = "limit"
			}
			return bad(field, "burst × period/limit exceeds 2^51 µs (71 years); use a smaller burst or a shorter period")
		}
		// A token every Period/Limit, rounded up to whole microseconds: at
		// most 1% slower than asked (3000 per second: 333.33µs → 334µs, 0.2%).
		if p := l.Period.Microseconds(); interval*int64(l.Limit)*100 > p*101 {
			return bad("limit", "a token every %s/%d is %.2fµs, and whole microseconds (%dµs) would refill more than 1%% slower; use a limit that divides the period's microseconds, or sliding_window",
				l.Period, l.Limit, float64(p)/float64(l.Limit), interval)
		}
	}
	return l.invalidName(bad)
}

// invalidConcurrency is invalid of a Concurrency limit.
func (l Limit) invalidConcurrency(bad func(field, format string, args ...any) error) error {
	switch ttl := l.SlotTTL(); {
	case l.Limit <= 0:
		return bad("limit", "limit must be at least 1 request in flight, got %d", l.Limit)
	case l.Limit > MaxLogLimit:
		return bad("limit", "concurrency keeps one entry per slot held and allows a limit of at most %d, got %d", MaxLogLimit, l.Limit)
	case ttl < MinPeriod:
		return bad("period", "a slot's lease (the period) must be at least %s, got %s", MinPeriod, ttl)
	case ttl > MaxPeriod:
		return bad("period", "a slot's lease (the period) must be at most %s, got %s", MaxPeriod, ttl)
	case ttl%time.Microsecond != 0:
		return bad("period", "a slot's lease (the period) must be a whole number of microseconds, got %s", ttl)
	case l.Burst != 0:
		return bad("burst", "burst applies to token_bucket and gcra only; concurrency admits at most limit in flight")
	}
	return l.invalidName(bad)
}

// invalidName reports a Name of characters other than letters, digits,
// '-', '_' and '.'.
func (l Limit) invalidName(bad func(field, format string, args ...any) error) error {
	for _, r := range l.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return bad("name", "name %q may hold only letters, digits, '-', '_' and '.'", l.Name)
		}
	}
	return nil
}

// ValidateCost reports why a request of cost n could never be admitted by
// l (a negative cost, or one above l's Capacity), or nil. The error wraps
// ErrInvalidCost. A Concurrency limit admits any cost: a request holds one
// slot whatever its cost.
func (l Limit) ValidateCost(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: cost must not be negative, got %d", ErrInvalidCost, n)
	}
	if c := l.Capacity(); n > c && l.Algorithm != Concurrency {
		return fmt.Errorf("%w: cost %d exceeds the capacity %d of %s; it could never be admitted", ErrInvalidCost, n, c, l)
	}
	return nil
}
