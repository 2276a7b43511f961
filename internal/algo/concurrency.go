package algo

import "slices"

// concurrency mirrors concurrency.lua. State: Log, the slots held, two
// integers each: the instant (µs) its lease ends, then the slot (a hash
// of its name in the memory store, never 0), ascending by the first. A
// slot whose lease ends at or before now is free. A take of a cost above
// 0 holds one slot, slot, until its lease of ttl µs ends or it is
// released; a take of cost 0 reads the state. Under a lowered limit more
// slots may be held than the limit: a take waits for the oldest leases to
// end until one fits.
func concurrency(st *State, now, limit, ttl, cost, slot int64, out *Outcome) {
	live := leasesAfter(st.Log, now)
	n := int64(len(live) / 2)
	reset := int64(0)
	if n > 0 {
		reset = live[len(live)-2] - now
	}
	if cost > 0 && n+1 > limit {
		// The k-th lease to end must end before a slot is free.
		k := n + 1 - limit
		out.R, out.Next, out.TTL = result(false, limit, max(limit-n, 0), reset, live[2*k-2]-now), *st, 0
		return
	}
	if cost == 0 {
		out.R, out.Next, out.TTL = result(true, limit, max(limit-n, 0), reset, 0), State{}, 0
		if n > 0 {
			out.Next, out.TTL = State{Set: true, Log: live}, reset
		}
		return
	}
	next := holdLease(live, slot, now+ttl)
	reset = max(reset, ttl)
	out.R, out.Next, out.TTL = result(true, limit, limit-n-1, reset, 0), State{Set: true, Log: next}, reset
}

// leasesAfter returns the leases of log (a concurrency state's) that end
// after now.
func leasesAfter(log []int64, now int64) []int64 {
	lo, hi := 0, len(log)/2
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); log[2*m] <= now {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return log[2*lo:]
}

// holdLease returns a new log of the leases of live with slot's ending
// at end: moved there if live holds it, added otherwise, in order.
func holdLease(live []int64, slot, end int64) []int64 {
	next := make([]int64, 0, len(live)+2)
	for i := 0; i < len(live); i += 2 {
		if live[i+1] != slot {
			next = append(next, live[i], live[i+1])
		}
	}
	return insertLease(next, slot, end)
}

// insertLease inserts the lease (end, slot) into log, after those that
// end at or before end.
func insertLease(log []int64, slot, end int64) []int64 {
	i := len(log)
	for i > 0 && log[i-2] > end {
		i -= 2
	}
	return slices.Insert(log, i, end, slot)
}

// Release returns st, a Concurrency limit's state at now, without the
// lease of slot (0: the lease that ends first), which a release frees if
// it is still held. ok is false when nothing changes; otherwise the store
// stores next for ttl µs (ttl <= 0: deletes it).
func (sp *Spec) Release(st State, now, slot int64) (next State, ttl int64, ok bool) {
	live := leasesAfter(st.Log, now)
	at := -1
	for i := 0; i < len(live); i += 2 {
		if slot == 0 || live[i+1] == slot {
			at = i
			break
		}
	}
	if at < 0 {
		return st, 0, false
	}
	return leases(slices.Delete(slices.Clone(live), at, at+2), now)
}

// Renew returns st, a Concurrency limit's state at now, with the lease of
// slot moved to end one lease (the limit's Period) from now, and whether
// slot was held: a slot no longer held is not taken again (ok false, and
// nothing changes).
func (sp *Spec) Renew(st State, now, slot int64) (next State, ttl int64, ok bool) {
	live := leasesAfter(st.Log, now)
	for i := 0; i < len(live); i += 2 {
		if live[i+1] == slot {
			return leases(holdLease(live, slot, now+sp.period), now)
		}
	}
	return st, 0, false
}

// leases returns the state of the live leases log at now, and how long it
// lives: until its last lease ends.
func leases(log []int64, now int64) (State, int64, bool) {
	if len(log) == 0 {
		return State{}, 0, true
	}
	return State{Set: true, Log: log}, log[len(log)-2] - now, true
}

// Concurrent reports whether sp is a Concurrency limit's.
func (sp *Spec) Concurrent() bool { return sp.alg == concurrencyKind }
