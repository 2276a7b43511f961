package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/service/admin"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

// dashboardFlags are serve's flags of the dashboard (package admin).
type dashboardFlags struct {
	on     *bool
	listen *string
	// The admin door: the names it answers to, which endpoints need the
	// token.
	hosts *string
	auth  *string
}

// addDashboardFlags defines them on fs.
func addDashboardFlags(fs *cmdFlags) *dashboardFlags {
	return &dashboardFlags{
		on: fs.boolean("dashboard", "SLUICE_DASHBOARD", true,
			"serve the live dashboard at GET / and its read-only JSON at /admin/v1/stats and /admin/v1/top (sluice top), the operator API of sluice inspect and sluice reset (reset only with "+admin.TokenEnv+" set), and count the most limited keys; without authentication but reset's unless --admin-auth all: it shows rule names, (masked) client keys and any key's state to whoever can reach its listener"),
		listen: fs.string("dashboard-listen", "SLUICE_DASHBOARD_LISTEN", "",
			"address of a listener of the dashboard's own, such as 127.0.0.1:8083 (empty: on --listen); keep it on loopback or behind an authenticating proxy"),
		hosts: fs.string("admin-hosts", admin.HostsEnv, "",
			"host names the dashboard and the operator API answer to besides localhost, IP addresses and the name of their listener's address, comma-separated, such as sluice.internal (* for any): a request whose Host is another name is refused with 421 (DNS rebinding), and so is a POST from a page of another origin (403)"),
		auth: fs.string("admin-auth", admin.AuthEnv, admin.AuthWrites.String(),
			"which endpoints of the dashboard need the bearer token of "+admin.TokenEnv+": writes (reset) or all (stats, top and inspect too; the page then asks for the token)"),
	}
}

// door returns the admin options of the door flags, for a dashboard whose
// listener's address is listen, with the token of the environment.
func (f *dashboardFlags) door(listen, token string) ([]admin.Option, error) {
	hosts, err := admin.ParseHosts(*f.hosts)
	if err != nil {
		return nil, usageError{fmt.Errorf("--admin-hosts (%s) %q: %w", admin.HostsEnv, *f.hosts, err)}
	}
	if host, _, err := net.SplitHostPort(listen); err == nil {
		hosts = hosts.With(host)
	}
	auth, err := admin.ParseAuth(*f.auth)
	if err != nil {
		return nil, usageError{fmt.Errorf("--admin-auth (%s) %w", admin.AuthEnv, err)}
	}
	if auth == admin.AuthAll && token == "" {
		return nil, usageError{fmt.Errorf("--admin-auth all needs the token: set %s in sluice serve's environment", admin.TokenEnv)}
	}
	return []admin.Option{admin.WithToken(token), admin.WithHosts(hosts), admin.WithAuth(auth)}, nil
}

// dashboard is the dashboard of one sluice serve. Its methods work on a
// nil *dashboard (turned off): they hand back what they were given.
type dashboard struct {
	listen string
	top    *admin.Top
	h      *admin.Handler
	engine atomic.Pointer[policy.Engine]
	lim    atomic.Pointer[sluice.Limiter]
	envoy  atomic.Pointer[envoy.Config]
}

// open returns the dashboard the flags ask for (nil when off), reading m,
// for the config at path (an envoyproxy/ratelimit one when isEnvoy), on
// mainListen (serve's --listen) unless it has a listener of its own.
func (f *dashboardFlags) open(m *metrics.Metrics, path, mainListen string, isEnvoy, showKeys bool, log *slog.Logger) (*dashboard, error) {
	if !*f.on {
		for _, g := range []struct{ flag, v, def string }{
			{"--dashboard-listen", *f.listen, ""}, {"--admin-hosts", *f.hosts, ""}, {"--admin-auth", *f.auth, admin.AuthWrites.String()},
		} {
			if g.v != g.def {
				return nil, usageError{fmt.Errorf("%s %q with --dashboard=false: turn the dashboard on, or leave out %s", g.flag, g.v, g.flag)}
			}
		}
		return nil, nil
	}
	d := &dashboard{listen: *f.listen, top: admin.NewTop(0)}
	kind := "policy"
	if isEnvoy {
		kind = "envoy"
	}
	listen := cmp.Or(*f.listen, mainListen)
	door, err := f.door(listen, os.Getenv(admin.TokenEnv))
	if err != nil {
		return nil, err
	}
	opts := append(door, admin.WithMetrics(m), admin.WithTop(d.top), admin.WithPlainKeys(showKeys), admin.WithLogger(log),
		admin.WithLimiter(d.lim.Load),
		admin.WithConfig(func() admin.ConfigInfo { return d.config(path, kind) }))
	if isEnvoy {
		opts = append(opts, admin.WithRules(d.envoyRules))
	} else {
		opts = append(opts, admin.WithEngine(d.engine.Load))
	}
	d.h = admin.New(opts...)
	return d, nil
}

// observer returns next, and, with the dashboard on, the most limited
// keys' count too.
func (d *dashboard) observer(next policy.Observer) policy.Observer {
	if d == nil {
		return next
	}
	return func(rule, key string, o policy.Outcome) {
		next(rule, key, o)
		d.top.Observe(rule, key, o)
	}
}

// reloaded returns next, and, with the dashboard on, the recent reloads'
// record too: a policyfile.WithReloadReport.
func (d *dashboard) reloaded(next func(error)) func(error) {
	if d == nil {
		return next
	}
	return func(err error) {
		next(err)
		d.h.Reloaded(err)
	}
}

// envoyApply returns apply, and, with the dashboard on, the dashboard's
// view of the envoyproxy/ratelimit config too.
func (d *dashboard) envoyApply(apply func(*envoy.Config)) func(*envoy.Config) {
	if d == nil {
		return apply
	}
	return func(c *envoy.Config) {
		apply(c)
		d.envoy.Store(c)
	}
}

// serve starts sampling until ctx ends and serves the dashboard: on mux,
// or on a listener of its own of ls. It returns the log attributes that
// say where, and how to stop its listener.
func (d *dashboard) serve(ctx context.Context, mux *http.ServeMux, ls *listeners, e *policy.Engine, lim *sluice.Limiter, cfg *envoy.Config, log *slog.Logger) (attrs []any, stop func(), err error) {
	if d == nil {
		return []any{"dashboard", "off"}, func() {}, nil
	}
	d.engine.Store(e)
	d.lim.Store(lim)
	if cfg != nil {
		d.envoy.Store(cfg)
	}
	go d.h.Run(ctx)
	if d.listen == "" {
		d.h.Register(mux)
		return []any{"dashboard", "on --listen"}, func() {}, nil
	}
	stop, addr, err := ls.serveAside("--dashboard-listen", d.listen, d.h, log)
	if err != nil {
		return nil, nil, err
	}
	return []any{"dashboard", addr}, stop, nil
}

// config says what the dashboard shows of the config at path.
func (d *dashboard) config(path, kind string) admin.ConfigInfo {
	info := admin.ConfigInfo{Path: path, Kind: kind}
	if c := d.envoy.Load(); c != nil {
		info.Summary = "envoy config: " + count(len(c.Domains), "domain") + ", " + count(len(c.Limits()), "limit")
	} else if e := d.engine.Load(); e != nil {
		info.Summary = count(len(e.Rules().Rules()), "rule")
	}
	return info
}

// envoyRules shows each rate limit of the envoyproxy/ratelimit config as
// a rule named as its decisions are observed (the limit's name).
func (d *dashboard) envoyRules() []admin.RuleInfo {
	c := d.envoy.Load()
	if c == nil {
		return nil
	}
	var out []admin.RuleInfo
	for _, p := range c.Limits() {
		n := p.Node()
		rl := n.RateLimit
		info := admin.RuleInfo{Name: rl.Limit.Name, Match: p.Domain + ": " + p.String(), Key: "descriptor", Cost: 1, Shadow: n.ShadowMode}
		switch {
		case rl.Unlimited:
			info.Name = p.Domain + "." + p.String()
			info.Limits = []admin.LimitInfo{{Name: "unlimited", Algorithm: "unlimited"}}
		default:
			l := admin.LimitOf(rl.Limit)
			l.Period = strconv.FormatUint(uint64(max(rl.UnitMultiplier, 1)), 10) + " " + rl.Unit
			if rl.UnitMultiplier <= 1 {
				l.Period = rl.Unit
			}
			info.Limits = []admin.LimitInfo{l}
		}
		out = append(out, info)
	}
	return out
}

// engineOf returns p's engine, or nil without a policy file.
func engineOf(p *policyfile.Policy) *policy.Engine {
	if p == nil {
		return nil
	}
	return p.Engine()
}
