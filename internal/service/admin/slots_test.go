package admin_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/store/storetest"
)

// slotsRules: ten slots for the whole fleet, two of them kept for
// critical jobs; three slots per uploader; and a rule without slots.
const slotsRules = `
rules:
  - {name: jobs, key: global, algorithm: concurrency, limit: 10, ttl: 1h, priority: {reserve: {critical: 20%}}}
  - {name: uploads, key: request, algorithm: concurrency, limit: 3, ttl: 1h}
  - {name: login, match: POST /login, key: ip, limit: 5, period: 1m}
`

// slotsEngine returns an engine under slotsRules on store, its sheds
// counted by m.
func slotsEngine(t *testing.T, m *metrics.Metrics, store sluice.Store) *policy.Engine {
	t.Helper()
	f, err := config.Parse("sluice.yaml", []byte(slotsRules))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return policy.New(sluice.New(store, sluice.WithHooks(m.Hooks())), set, policy.WithObserver(m.Decision), policy.WithShedObserver(m.Shed),
		policy.WithLogger(slog.New(slog.DiscardHandler)))
}

// TestStatsSlots: the stats show, for the concurrency limit of a rule
// keyed global, the slots in use as the store holds them (the whole
// capacity, not the lowest class's share), and as they are released;
// for a rule keyed by client, its slots per key; the classes of a rule
// that sheds by class, and what it shed by class; and a store that
// cannot be read, said so.
func TestStatsSlots(t *testing.T) {
	m := metrics.New()
	e := slotsEngine(t, m, memory.New())
	h := admin.New(admin.WithEngine(func() *policy.Engine { return e }), admin.WithMetrics(m))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	stats := func() admin.Stats {
		code, _, body := get(t, h, admin.StatsPath)
		if code != 200 {
			t.Fatalf("stats: %d %s", code, body)
		}
		return decode[admin.Stats](t, body)
	}
	if st := stats(); len(st.Slots) != 2 || st.Slots[0].InUse == nil || *st.Slots[0].InUse != 0 {
		t.Fatalf("slots before any job: %+v, want jobs' 0 in use and uploads'", st.Slots)
	}

	var held []*policy.Decision
	check := func(class string, want bool) {
		t.Helper()
		d, err := e.Check(ctx, policy.Check{Rule: "jobs", Class: class})
		if err != nil || d.Allowed != want {
			t.Fatalf("a %s job: %+v, %v; want allowed %v", class, d, err, want)
		}
		if d.Allowed {
			held = append(held, d)
		}
	}
	for range 8 {
		check("", true) // the default class's 80%
	}
	for range 3 {
		check("", false) // shed
	}
	check("critical", true)
	check("critical", true)
	check("critical", false) // the pool is full: denied, not shed
	if d, err := e.Check(ctx, policy.Check{Rule: "uploads", Key: "u1"}); err != nil || !d.Allowed {
		t.Fatalf("an upload: %+v, %v", d, err)
	}

	var st admin.Stats
	waitFor(t, func() bool {
		st = stats()
		for _, rs := range st.Series.Rules {
			if rs.Rule == "jobs" && rs.Shed["default"] == 3 {
				return true
			}
		}
		return false
	})
	want := []admin.SlotsInUse{
		{Rule: "jobs", Limit: "jobs-concurrent", Slots: 10, InUse: ptr(10)},
		{Rule: "uploads", Limit: "uploads-concurrent", Slots: 3, PerKey: true},
	}
	checkSlots(t, st.Slots, want)
	for _, rs := range st.Series.Rules {
		if rs.Rule == "jobs" && (len(rs.Shed) != 1 || rs.Shed["critical"] != 0) {
			t.Errorf("jobs shed %v, want default's 3 alone (the highest class is never shed)", rs.Shed)
		}
	}
	if r := st.Rules[0]; r.Name != "jobs" || len(r.Classes) != 2 || r.Classes[0] != "critical" || r.Classes[1] != "default" || st.Rules[1].Classes != nil {
		t.Errorf("rules %+v, want jobs' classes critical, default and none for uploads", st.Rules)
	}

	// Four jobs end: six slots in use.
	for _, d := range held[:4] {
		if err := d.Settle(ctx, func(*policy.Applied) (int, bool) { return 0, false }); err != nil {
			t.Fatal(err)
		}
	}
	want[0].InUse = ptr(6)
	checkSlots(t, stats().Slots, want)

	// A store that cannot be read without deciding: said so.
	m2 := metrics.New()
	blind := slotsEngine(t, m2, storetest.TakeOnly(memory.New()))
	h2 := admin.New(admin.WithEngine(func() *policy.Engine { return blind }), admin.WithMetrics(m2))
	_, _, body := get(t, h2, admin.StatsPath)
	if s := decode[admin.Stats](t, body).Slots; len(s) != 2 || s[0].InUse != nil || s[0].Error == "" {
		t.Errorf("slots over a store that is no Peeker: %+v, want jobs' in use unknown, with the error", s)
	}
}

func ptr(n int) *int { return &n }

// checkSlots fails t unless got is want.
func checkSlots(t *testing.T, got, want []admin.SlotsInUse) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		g, w := got[i], want[i]
		ok = g.Rule == w.Rule && g.Limit == w.Limit && g.Slots == w.Slots && g.PerKey == w.PerKey && g.Error == w.Error &&
			(g.InUse == nil) == (w.InUse == nil) && (g.InUse == nil || *g.InUse == *w.InUse)
	}
	if !ok {
		show := func(ss []admin.SlotsInUse) []string {
			var out []string
			for _, s := range ss {
				n := "null"
				if s.InUse != nil {
					n = strconv.Itoa(*s.InUse)
				}
				out = append(out, s.Rule+"/"+s.Limit+": "+n+" of "+strconv.Itoa(s.Slots)+map[bool]string{true: " per key"}[s.PerKey]+" "+s.Error)
			}
			return out
		}
		t.Errorf("slots %q, want %q", show(got), show(want))
	}
}
