package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/redistest"
)

// TestOpenBackendWithoutMetrics: a command without /metrics (the proxy)
// opens its store with nil metrics, in memory and on Redis, and decides.
func TestOpenBackendWithoutMetrics(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := redistest.Start(t)
	for name, r := range map[string]config.Redis{
		"in-memory": {},
		"redis":     {URL: "redis://" + srv.Addr, OnError: "deny", Timeout: sluice.DefaultStoreTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := openBackend(r, nil, log)
			if err != nil {
				t.Fatal(err)
			}
			defer b.close()
			for i, want := range []bool{true, false} {
				res, err := b.lim.Allow(context.Background(), "k", sluice.PerMinute(1))
				if err != nil || res.Allowed != want {
					t.Errorf("decision %d: allowed %v, %v; want %v", i+1, res.Allowed, err, want)
				}
			}
		})
	}
}
