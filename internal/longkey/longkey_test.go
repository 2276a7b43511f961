package longkey

import (
	"strings"
	"testing"
)

func TestBound(t *testing.T) {
	short := strings.Repeat("k", MaxLen)
	if got := Bound(short); got != short || Hashed(short) {
		t.Errorf("Bound(%d bytes) = %q, want the key as it is", len(short), got)
	}
	if got := Bound(""); got != "" {
		t.Errorf(`Bound("") = %q, want ""`, got)
	}
	long := strings.Repeat("k", 1<<20)
	got := Bound(long)
	if !Hashed(long) || len(got) != HashedLen || got != Hash(long) {
		t.Errorf("Bound(1 MiB key) = %q (%d bytes), want its %d-byte hash", got, len(got), HashedLen)
	}
	// The form the Redis store has always used for long keys (its escape):
	// "%H" and the hex of the first half of the SHA-256.
	const want = "%H" + "c12cb024a2e5551cca0e08fce8f1c5e3" // sha256 of 129 × "a", first 16 bytes
	if got := Hash(strings.Repeat("a", MaxLen+1)); got != want {
		t.Errorf("Hash(129 × a) = %q, want %q", got, want)
	}
	// Keys that differ only past MaxLen stay distinct.
	if Bound(long+"a") == Bound(long+"b") {
		t.Error("two long keys differing in their last byte have the same bound form")
	}
}
