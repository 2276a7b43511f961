package memory

import (
	"testing"
	"unsafe"
)

// CollideHashes makes entry keys' hashes collide (mask keeps a few of
// their bits) until the test ends.
func CollideHashes(t testing.TB, mask uint64) {
	hashMask = mask
	t.Cleanup(func() { hashMask = ^uint64(0) })
}

// Tables returns the number of entries of shard i in its table, the
// table's size and the nodes the shard has handed out.
func (s *Store) Tables(i int) (entries, slots, nodes int) {
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, s := range sh.tab {
		if s != 0 {
			entries++
		}
	}
	return entries, len(sh.tab), int(sh.used)
}

// ShardSize is the size of a shard in bytes.
const ShardSize = unsafe.Sizeof(shard{})
