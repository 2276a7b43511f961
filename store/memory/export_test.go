package memory

import "testing"

// CollideHashes makes entry keys' hashes collide (mask keeps a few of
// their bits) until the test ends.
func CollideHashes(t testing.TB, mask uint64) {
	hashMask = mask
	t.Cleanup(func() { hashMask = ^uint64(0) })
}

// Tables returns the sizes of shard i's maps (by hash, and for taken
// hashes) and the nodes it has handed out.
func (s *Store) Tables(i int) (m, dup, nodes int) {
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.m), len(sh.dup), int(sh.used)
}
