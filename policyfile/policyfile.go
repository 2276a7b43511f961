// Package policyfile turns a policy file into a working rate limiter in
// one call: the store its redis section asks for (in-memory, or Redis
// with its error policy and timeout, connecting in the background while
// Redis is down), the Limiter, a policy.Engine with its rules and key
// settings, and middleware that answers as its http section says, all
// reloadable from the file.
//
//	p, err := policyfile.Open("sluice.yaml")
//	if err != nil { ... }        // the file's errors, each with its line
//	defer p.Close()
//	p.Watch(ctx, 5*time.Second, nil) // reload when the file changes
//	http.ListenAndServe(":8080", p.Middleware(mux))
//
// The decision service (sluice serve), the proxy (sluice proxy) and the
// examples are built on it, so a file means the same wherever it is used.
//
// The policy file reference is docs/policy-file.md (https://github.com/sluice-go/sluice/blob/main/docs/policy-file.md).
package policyfile

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// Option configures Open.
type Option func(*settings)

type settings struct {
	log      *slog.Logger
	obs      policy.Observer
	hooks    sluice.Hooks
	redis    func(config.Redis) config.Redis
	rules    []policy.Option
	engine   []policy.EngineOption
	onReload func(err error)
	onMemory func(*memory.Store)
}

// WithLogger sets where the store's changes of state, reloads and
// rejected files, shadow denials and store errors are logged (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.log = l } }

// WithObserver registers f to be told of every rule's outcome (for
// metrics; see policy.WithObserver).
func WithObserver(f policy.Observer) Option { return func(s *settings) { s.obs = f } }

// WithHooks sets the hooks of the Limiter the file configures
// (sluice.WithHooks), for example to time its store calls and hear each
// change of its circuit breakers, one per Redis node
// (metrics.Metrics.Hooks); the breakers' changes are logged anyway.
func WithHooks(h sluice.Hooks) Option {
	return func(s *settings) { s.hooks = h }
}

// WithRedis overrides the file's redis section: f gets the section and
// returns the settings to use, such as a URL given on a command line.
func WithRedis(f func(config.Redis) config.Redis) Option {
	return func(s *settings) { s.redis = f }
}

// WithRuleOptions adds options to every compilation of the file's rules,
// such as policy.WithKey to key a rule by the authenticated user.
func WithRuleOptions(opts ...policy.Option) Option {
	return func(s *settings) { s.rules = append(s.rules, opts...) }
}

// WithEngineOptions adds options to the engine the file's rules are
// decided by, such as policy.WithDenialLog; WithObserver and WithLogger
// are set by their own options.
func WithEngineOptions(opts ...policy.EngineOption) Option {
	return func(s *settings) { s.engine = append(s.engine, opts...) }
}

// WithReloadReport registers f to hear the outcome of each reload: nil
// when the file was applied, else the error that rejected it, the same
// error Reload returns (for metrics and the dashboard's recent reloads).
func WithReloadReport(f func(err error)) Option { return func(s *settings) { s.onReload = f } }

// WithMemoryStore registers f to be handed the in-memory store the file
// configures, the store itself or Redis's local fallback, when it is
// opened: metrics.Metrics.MemoryStore exports its size and evictions.
func WithMemoryStore(f func(*memory.Store)) Option {
	return func(s *settings) { s.onMemory = f }
}

// Policy is a policy file at work: its store, Limiter and engine. It is
// safe for concurrent use. Create it with Open; Close it when done.
type Policy struct {
	path    string
	set     settings
	back    *Backend
	engine  *policy.Engine
	running config.Redis  // the redis section the store was opened with
	memory  config.Memory // the memory section it was opened with
	leasing bool          // the file had lease sections when the store was opened

	mu   sync.Mutex  // serializes reloads
	read fingerprint // the version of the file last read, for Watch; under mu
	file atomic.Pointer[config.File]
	resp atomic.Pointer[[]httplimit.Option]
}

// Open loads the policy file at path and builds what it configures. An
// invalid file is an error listing every problem (a config.Errors); a
// Redis that cannot be reached is not: the file's on_error policy decides
// until it can be.
func Open(path string, opts ...Option) (*Policy, error) {
	// The version is taken before the file is read: a change after it is
	// seen by Watch, even one made before Watch starts.
	fp := fingerprintOf(path)
	f, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return newPolicy(f, fp, opts)
}

// New builds what the loaded file f configures, as Open does; Reload
// reads f.Path again, and Watch reloads it when its content is not what
// it is when New is called.
func New(f *config.File, opts ...Option) (*Policy, error) {
	return newPolicy(f, fingerprintOf(f.Path), opts)
}

// newPolicy is New of f, read as version fp.
func newPolicy(f *config.File, fp fingerprint, opts []Option) (*Policy, error) {
	p := &Policy{path: f.Path, read: fp}
	p.set = defaults()
	for _, o := range opts {
		o(&p.set)
	}
	set, resp, err := p.compile(f)
	if err != nil {
		return nil, err
	}
	p.running = p.set.redis(f.Redis)
	p.memory = f.Memory
	var blocks func(sluice.Limit) int
	if f.Leases != nil {
		p.leasing = true
		blocks = func(l sluice.Limit) int { return p.file.Load().Leases[l.Name] } // the file as last loaded: reloads apply
	}
	p.file.Store(f)
	if p.back, err = openBackend(p.running, p.memory, p.set, blocks); err != nil {
		return nil, err
	}
	p.engine = policy.New(p.back.Limiter, set, append(p.set.engine, policy.WithObserver(p.set.obs), policy.WithLogger(p.set.log))...)
	p.resp.Store(&resp)
	return p, nil
}

func defaults() settings {
	return settings{log: slog.Default(), obs: func(string, string, policy.Outcome) {}, redis: func(r config.Redis) config.Redis { return r }, onReload: func(error) {},
		onMemory: func(*memory.Store) {}}
}

// compile returns f's rules compiled and its response options.
func (p *Policy) compile(f *config.File) (*policy.RuleSet, []httplimit.Option, error) {
	set, err := f.Compile(p.set.rules...)
	if err != nil {
		return nil, nil, err
	}
	resp, err := httplimit.FromConfig(f.HTTP)
	if err != nil {
		return nil, nil, err
	}
	return set, resp, nil
}

// Engine returns the engine that decides under the file's rules: what the
// doors (the middleware, the decision service, Envoy's gRPC) decide with.
func (p *Policy) Engine() *policy.Engine { return p.engine }

// Limiter returns the Limiter over the file's store.
func (p *Policy) Limiter() *sluice.Limiter { return p.back.Limiter }

// File returns the file as last loaded.
func (p *Policy) File() *config.File { return p.file.Load() }

// Ready reports whether decisions can be made: under on_error: deny,
// whether Redis runs a decision (on a reserved key, within the store
// timeout); otherwise always nil, since the error policy answers while it
// does not.
func (p *Policy) Ready(ctx context.Context) error { return p.back.Ready(ctx) }

// Close releases the store's connections.
func (p *Policy) Close() { p.back.Close() }

// Middleware returns next limited by the file's rules, answering as its
// http section says (see httplimit.New). Reloads apply to it.
func (p *Policy) Middleware(next http.Handler) http.Handler {
	type gen struct {
		opts *[]httplimit.Option
		h    http.Handler
	}
	var cur atomic.Pointer[gen]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts := p.resp.Load()
		g := cur.Load()
		if g == nil || g.opts != opts {
			g = &gen{opts: opts, h: httplimit.New(p.engine, *opts...)(next)}
			cur.Store(g)
		}
		g.h.ServeHTTP(w, r)
	})
}

// Reload reads the file again. A valid file replaces the rules, then the
// http section, each atomically: decisions in flight finish under the
// rules they started with (a request decided in between may be answered
// with the old section's headers under the new rules). An invalid one is returned as an error and leaves
// everything as it was. The redis section cannot change at run time: a
// file whose section differs still has its rules applied, with a warning
// that the store keeps its settings until a restart.
func (p *Policy) Reload() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.read = fingerprintOf(p.path)
	f, err := config.Load(p.path)
	if err == nil {
		var set *policy.RuleSet
		var resp []httplimit.Option
		if set, resp, err = p.compile(f); err == nil {
			p.engine.Update(set)
			p.resp.Store(&resp)
			p.file.Store(f)
			if p.set.redis(f.Redis) != p.running {
				// Never log the URLs: they may hold a password.
				p.set.log.Warn("the redis section changed; the store keeps its old settings until a restart", "config", p.path)
			}
			if f.Leases != nil && !p.leasing {
				p.set.log.Warn("lease sections added by a reload apply after a restart (the store was opened without leases)", "config", p.path)
			}
			if f.Memory != p.memory {
				p.set.log.Warn("the memory section changed; the store keeps its old settings until a restart", "config", p.path)
			}
		}
	}
	p.set.onReload(err)
	return err
}

// Watch reloads the file on every signal from hup (nil: none) and, when
// interval is positive, whenever its content changes from the version
// last read (by Open or Reload, so a change made before Watch is called
// is seen too), until ctx ends. It logs each reload, and each error of a
// rejected file on a line of its own, saying that the old rules keep
// serving.
func (p *Policy) Watch(ctx context.Context, interval time.Duration, hup <-chan os.Signal) {
	p.mu.Lock()
	last := p.read
	p.mu.Unlock()
	watchFile(ctx, p.path, last, interval, hup, func(trigger string) {
		if err := p.Reload(); err != nil {
			Rejected(p.set.log, p.path, trigger, err)
			return
		}
		p.set.log.Info("config reloaded", "config", p.path, "trigger", trigger, "rules", len(p.File().Rules))
	})
}

// Rejected logs a file that failed to load, one line per error.
func Rejected(log *slog.Logger, path, trigger string, err error) {
	var errs config.Errors
	if !errors.As(err, &errs) {
		log.Error("config rejected; the old rules keep serving", "config", path, "trigger", trigger, "error", err.Error())
		return
	}
	for _, e := range errs {
		log.Error("config rejected; the old rules keep serving", "config", path, "trigger", trigger, "error", e.Error())
	}
}
