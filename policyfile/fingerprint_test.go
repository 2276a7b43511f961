package policyfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFingerprint: a touch leaves the policy file's fingerprint as it
// was, so it reloads nothing; a change of content, even of the same size,
// changes it.
func TestFingerprint(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: old, key: ip, limit: 100, period: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := fingerprintOf(cfg)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(cfg, later, later); err != nil {
		t.Fatal(err)
	}
	if after := fingerprintOf(cfg); after != before {
		t.Errorf("touch changed the fingerprint: %+v, then %+v", before, after)
	}
	if err := os.WriteFile(cfg, []byte("rules:\n  - {name: new, key: ip, limit: 100, period: 1m}\n"), 0o600); err != nil { // same size
		t.Fatal(err)
	}
	if after := fingerprintOf(cfg); after == before {
		t.Error("new content of the same size left the fingerprint as it was")
	}
	if missing := fingerprintOf(cfg + ".gone"); missing.err == "" || missing == before {
		t.Errorf("a missing file's fingerprint %+v, want one with an error", missing)
	}
}
