// Package longkey bounds the length of client keys that the stores keep, so
// that a hostile client cannot bloat a store's memory with huge keys: a key
// longer than MaxLen is kept as a fixed-length hash of itself. Every store
// uses the same form, so the memory and Redis stores agree on it.
package longkey

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxLen is the length in bytes of the longest key kept as it is.
const MaxLen = 128

// HashedLen is the length of Hash's result.
const HashedLen = 2 + 2*16

// Bound returns key when it is at most MaxLen bytes long, and Hash(key)
// otherwise. The result is at most MaxLen bytes long. A short key may equal
// the hash of a long one: a store that keeps short keys as they are must
// tell the two kinds apart (Hashed), as the Redis store does by
// percent-encoding '%' in short keys.
func Bound(key string) string {
	if !Hashed(key) {
		return key
	}
	return Hash(key)
}

// Hashed reports whether Bound replaces key by its hash.
func Hashed(key string) bool { return len(key) > MaxLen }

// Hash returns the fixed-length form of a key: "%H" and the hexadecimal of
// the first 16 bytes of its SHA-256, HashedLen bytes in all.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "%H" + hex.EncodeToString(sum[:16])
}
