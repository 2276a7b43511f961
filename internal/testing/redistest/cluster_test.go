package redistest

import (
	"fmt"
	"testing"
)

// TestCluster: the cluster forms with every master owning slots, and
// BeginMigration, MoveKeys and Finish move a slot and its keys.
func TestCluster(t *testing.T) {
	c := StartCluster(t)
	owners := map[string]bool{}
	for _, slot := range []int{0, 8000, 16383} {
		owners[c.Owner(t, slot)] = true
	}
	if len(owners) != len(c.Addrs) {
		t.Errorf("slots 0, 8000 and 16383 are served by %v; want one per master of %v", owners, c.Addrs)
	}
	slot := c.KeySlot(t, "{m}")
	from := c.Owner(t, slot)
	for i := range 5 {
		c.Do(t, from, "SET", fmt.Sprintf("{m}%d", i), "v")
	}
	to := c.Addrs[0]
	if to == from {
		to = c.Addrs[1]
	}
	m := c.BeginMigration(t, slot, to)
	if n := m.MoveKeys(t, 2); n != 5 {
		t.Errorf("MoveKeys moved %d keys, want 5", n)
	}
	m.Finish(t)
	if got := c.Owner(t, slot); got != to {
		t.Errorf("after the migration slot %d is served by %s, want %s", slot, got, to)
	}
	if n := c.CountKeysInSlot(t, to, slot); n != 5 {
		t.Errorf("the target holds %d keys of the slot, want 5", n)
	}
	if n := c.CountKeysInSlot(t, from, slot); n != 0 {
		t.Errorf("the source still holds %d keys of the slot", n)
	}
	if v := c.Do(t, to, "GET", "{m}3"); v != "v" {
		t.Errorf("GET on the target = %v, want v", v)
	}
}
