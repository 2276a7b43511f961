package linear

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
)

// LedgerLimit is the limit of a Ledger key: a sliding log so large (the
// largest a sliding log may be) and so long that it admits every decision
// of a run of up to 3,333 decisions and forgets none, so that the store's
// log holds, at each decision's instant, one entry per unit of cost for
// each time the store applied it.
var LedgerLimit = sluice.Per(10000, 24*time.Hour).Using(sluice.SlidingLog)

// Ledger returns a key named name under LedgerLimit. A run on it alone,
// at the fake clock, with fewer than Span/Step decisions a round (so
// that each decision has an instant of its own) over less than a day of
// fake time (Rounds × Tick), can be accounted for decision by decision
// (Count).
func Ledger(name string) Key {
	return Key{Name: name, Limits: []sluice.Limit{LedgerLimit}}
}

// An Account says how many times a store applied each decision of a run
// on a Ledger key, by what the decision's client was told.
type Account struct {
	// Answered[n] counts the decisions that answered and were applied n
	// times (1 for each, if the store is right); Failed[n] those that
	// failed (0 or 1 for each: indeterminate).
	Answered, Failed []int
	// Extra is the cost applied beyond once for each decision. Phantom
	// is the cost of the failed decisions never applied, which the model
	// may nonetheless take as applied: when Extra exceeds Phantom, no
	// order of the decisions explains a determinate answer after them,
	// and porcupine must find the history Illegal.
	Extra, Phantom int
}

// Count accounts for the decisions of h on key, a Ledger key, from
// units: the number of entries of the store's log at each instant, in µs
// since the Unix epoch. It fails when two decisions share an instant,
// when an instant's entries are not a whole number of its decision's
// cost, or when an instant has entries and no decision.
func Count(h History, key string, units map[int64]int) (Account, error) {
	var a Account
	seen := map[int64]bool{}
	for _, op := range h {
		in := op.Input.(Input)
		if in.Key != key {
			continue
		}
		if seen[in.Now] {
			return a, fmt.Errorf("two decisions on %q at %s: more than a round's Span/Step − 1 decisions on one key", key, since(in.Now))
		}
		seen[in.Now] = true
		u := units[in.Now]
		if u%in.Cost != 0 {
			return a, fmt.Errorf("%d entries at %s for a decision of cost %d", u, since(in.Now), in.Cost)
		}
		n, failed := u/in.Cost, op.Output.(Output).Err != ""
		if failed {
			a.Failed = tally(a.Failed, n)
		} else {
			a.Answered = tally(a.Answered, n)
		}
		a.Extra += max(n-1, 0) * in.Cost
		if failed && n == 0 {
			a.Phantom += in.Cost
		}
	}
	for at, u := range units {
		if !seen[at] && u > 0 {
			return a, fmt.Errorf("%d entries at %s, where no decision was sent", u, since(at))
		}
	}
	return a, nil
}

// tally adds one to c[n], growing c as needed.
func tally(c []int, n int) []int {
	for len(c) <= n {
		c = append(c, 0)
	}
	c[n]++
	return c
}

// Provable reports whether the account proves the run over-applied: more
// extra cost than the failed decisions never applied could stand for.
func (a Account) Provable() bool { return a.Extra > a.Phantom }

// String reports the account: "answered: 410 once, 2 twice; failed: 3
// never, 5 once; extra cost 4, phantom 6".
func (a Account) String() string {
	return fmt.Sprintf("answered: %s; failed: %s; extra cost %d, phantom %d", times(a.Answered), times(a.Failed), a.Extra, a.Phantom)
}

// times formats c, counts by how many times applied.
func times(c []int) string {
	var parts []string
	for n, k := range c {
		if k == 0 {
			continue
		}
		switch n {
		case 0:
			parts = append(parts, fmt.Sprintf("%d never", k))
		case 1:
			parts = append(parts, fmt.Sprintf("%d once", k))
		case 2:
			parts = append(parts, fmt.Sprintf("%d twice", k))
		default:
			parts = append(parts, fmt.Sprintf("%d %d times", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
