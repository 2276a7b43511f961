package policyfile_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/policyfile"
)

// TestOpenBackend: OpenBackend builds the store of a redis section, in
// memory and on Redis, with no store wrapper, and decides.
func TestOpenBackend(t *testing.T) {
	srv := redistest.Start(t)
	for name, r := range map[string]config.Redis{
		"in-memory": {},
		"redis":     {URL: "redis://" + srv.Addr, OnError: "deny", Timeout: sluice.DefaultStoreTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := policyfile.OpenBackend(r, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Ready(context.Background()); err != nil {
				t.Errorf("Ready: %v", err)
			}
			for i, want := range []bool{true, false} {
				res, err := b.Limiter.Allow(context.Background(), "k", sluice.PerMinute(1))
				if err != nil || res.Allowed != want || res.Degraded != sluice.NotDegraded {
					t.Errorf("decision %d: allowed %v, degraded %q, %v; want %v by the store", i+1, res.Allowed, res.Degraded, err, want)
				}
			}
		})
	}
}

// TestOpenBackendInvalid: a section that cannot work is an error, and
// the URL's password is not in it.
func TestOpenBackendInvalid(t *testing.T) {
	for name, r := range map[string]config.Redis{
		"on_error": {URL: "redis://127.0.0.1:1", OnError: "maybe"},
		"url":      {URL: "redis://:s3cret@[::1", OnError: "deny"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := policyfile.OpenBackend(r, policyfile.WithLogger(slog.New(slog.DiscardHandler)))
			if err == nil {
				b.Close()
				t.Fatal("OpenBackend: nil error")
			}
			if s := err.Error(); strings.Contains(s, "s3cret") {
				t.Errorf("error %q quotes the password", s)
			}
		})
	}
}

// countStore counts the calls that reach the store it wraps.
type countStore struct {
	sluice.Store
	takes *atomic.Int64
}

func (c countStore) Take(ctx context.Context, req sluice.Request) ([]sluice.Result, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, req)
}

// TestStoreStateLog: the store's changes of state are logged once each:
// failing when Redis goes away (the error policy decides meanwhile) and
// recovered when it is back. WithStore sees every call.
func TestStoreStateLog(t *testing.T) {
	srv := redistest.Start(t)
	path := writeFile(t, "redis: {url: redis://"+srv.Addr+", on_error: allow}\n"+limitRules(100))
	log := &logs{}
	var takes atomic.Int64
	p := open(t, path, log, policyfile.WithStore(func(s sluice.Store) sluice.Store { return countStore{s, &takes} }))
	run(t, p, []step{{"192.0.2.1", true, 99}})
	srv.Stop()
	for i := range 3 {
		if d := check(t, p, "r", "192.0.2.1"); !d.Allowed || d.Degraded != sluice.DegradedAllow {
			t.Errorf("decision %d with Redis down: allowed %v, degraded %q; want admitted by allow", i+1, d.Allowed, d.Degraded)
		}
	}
	if es := log.entries(t, "store failing"); len(es) != 1 || es[0]["level"] != "WARN" {
		t.Errorf("logged %v while Redis is down, want one warning", es)
	}
	srv.Restart(t)
	waitFor(t, func() error {
		if d := check(t, p, "r", "192.0.2.1"); d.Degraded != sluice.NotDegraded {
			return fmt.Errorf("Redis is back, and decisions are still degraded %q", d.Degraded)
		}
		return nil
	})
	if es := log.entries(t, "store recovered"); len(es) != 1 {
		t.Errorf("logged %v after Redis came back, want one line", es)
	}
	if n := takes.Load(); n < 5 {
		t.Errorf("WithStore's wrapper saw %d calls, want every one (at least 5)", n)
	}
}
