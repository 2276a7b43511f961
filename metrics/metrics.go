// Package metrics exports what sluice decides and how its store behaves as
// Prometheus metrics:
//
//	sluice_decisions_total{rule, outcome}   allowed | denied | denied_by_other | shadow_denied | degraded_allowed | degraded_denied
//	sluice_settled_units_total{rule, kind}  units settles and refunds gave back (refunded) or charged beyond a reserve (charged)
//	sluice_shed_total{rule, class}          requests a rule that sheds by class (priority) shed, by class
//	sluice_slots_held{rule}                 concurrency slots this process's middleware and proxy hold for requests in flight
//	sluice_decision_duration_seconds{door}  latency of a decision as its door serves it: http | grpc | json | proxy
//	sluice_store_duration_seconds{op}       latency of store calls (take, reset, peek, refund, charge, renew)
//	sluice_store_errors_total{op}           failed store calls
//	sluice_fallbacks_total                  decisions the error policy made while the store failed
//	sluice_config_reloads_total{result}     ok | rejected
//	sluice_breaker_open                     1 while a circuit breaker of the store is open, else 0
//	sluice_breaker_opens_total              times a breaker opened
//	sluice_breaker_node_open{node}          1 while the breaker of one node (a Redis Cluster master) is open, else 0
//	sluice_memory_evictions_total           in-memory entries forgotten because the store was full (MemoryStore)
//	sluice_memory_keys                      in-memory entries held
//	sluice_memory_capacity                  most in-memory entries held
//	sluice_envoy_unknown_domain_total       Envoy requests for a domain the configuration does not have (answered OK)
//
// with the Go runtime's and the process's own (go_goroutines,
// process_resident_memory_bytes...).
//
// Every series is there from the first scrape, at zero until its first
// event: every door's latency, every store operation's, both reload
// results, and, once Rules names them, every rule's outcomes, settled
// units and slots held, so that a
// rate() or an alert over a series that has not happened yet reads 0
// rather than nothing (sluice_shed_total's classes are not Rules', and
// appear with their first shed). The labels are rule names, outcomes, doors and
// operations, and the store's nodes (a Cluster's masters, as they
// are named when their breaker changes) only, never a client key: their
// number is the configuration's and the deployment's, not the traffic's.
package metrics

import (
	"errors"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
)

// Metrics holds sluice's collectors in a registry of their own.
type Metrics struct {
	reg          *prometheus.Registry
	decisions    *prometheus.CounterVec
	storeSeconds *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	fallbacks    prometheus.Counter
	reloads      *prometheus.CounterVec
	breakerOpen  prometheus.Gauge
	breakerOpens prometheus.Counter
	breakerNode  *prometheus.GaugeVec
	nodesMu      sync.Mutex          // held by Breaker
	nodes        map[int]nodeBreaker // the last change of each node's breaker
	unknown      prometheus.Counter
	settled      *prometheus.CounterVec
	shed         *prometheus.CounterVec
	slots        *prometheus.GaugeVec
	doorSeconds  *prometheus.HistogramVec
	doors        [len(Doors)]prometheus.Observer
	rules        atomic.Pointer[func() []string] // the rules whose series are shown from the start
	// The children of the vectors that every request touches, looked up
	// once instead of by WithLabelValues (hashing the label values under
	// the vector's lock) per request: sluice_decisions_total's by
	// ruleOutcome, and the store's take, reset, peek, refund and charge
	// series.
	byRule            atomic.Pointer[map[ruleOutcome]prometheus.Counter] // copied on write, read without a lock
	byRuleMu          sync.Mutex                                         // held by writers
	take, reset, peek opSeries
	refund, charge    opSeries
	renew             opSeries
}

// opSeries are a store operation's children of sluice_store_seconds and
// sluice_store_errors_total.
type opSeries struct {
	seconds prometheus.Observer
	errors  prometheus.Counter
}

// The doors, the values of sluice_decision_duration_seconds' door label:
// POST /v1/check and /v1/check/batch (DoorHTTP), Envoy's gRPC
// ShouldRateLimit (DoorGRPC), Envoy's JSON at POST /json (DoorJSON), and
// the reverse proxy's decision before it forwards (DoorProxy).
const (
	DoorHTTP Door = iota
	DoorGRPC
	DoorJSON
	DoorProxy
)

// Door is a way decisions are asked for, a label value of
// sluice_decision_duration_seconds.
type Door uint8

// Doors lists every Door.
var Doors = [...]Door{DoorHTTP, DoorGRPC, DoorJSON, DoorProxy}

var doorNames = [...]string{"http", "grpc", "json", "proxy"}

// String returns the door's label value, such as "grpc".
func (d Door) String() string {
	if int(d) < len(doorNames) {
		return doorNames[d]
	}
	return "Door(" + strconv.Itoa(int(d)) + ")"
}

// ruleOutcome is the key of a sluice_decisions_total child.
type ruleOutcome struct {
	rule    string
	outcome policy.Outcome
}

// New returns Metrics registered in a new registry, with the Go runtime
// and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions by rule and outcome.",
		}, []string{"rule", "outcome"}),
		storeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_duration_seconds",
			Help:    "Latency of store calls.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that failed.",
		}, []string{"op"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_fallbacks_total",
			Help: "Decisions the error policy made because the store failed.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Policy file reloads by result (ok, rejected).",
		}, []string{"result"}),
		breakerOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_breaker_open",
			Help: "1 while a circuit breaker of the store is open (the error policy decides without calling the store, for the keys of its node), else 0.",
		}),
		breakerOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_breaker_opens_total",
			Help: "Times a circuit breaker of the store opened.",
		}),
		breakerNode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_breaker_node_open",
			Help: "1 while the circuit breaker of one node of the store (a Redis Cluster master, by address) is open, else 0.",
		}, []string{"node"}),
		nodes: map[int]nodeBreaker{},
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_envoy_unknown_domain_total",
			Help: "Envoy rate limit requests for a domain the configuration does not have, answered OK as envoyproxy/ratelimit answers them.",
		}),
	}
	m.shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_shed_total",
		Help: "Requests shed by priority class: denied by a rule that sheds by class (priority) as of a class below the highest, by rule and class.",
	}, []string{"rule", "class"})
	m.slots = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_slots_held",
		Help: "Slots of concurrency limits held by this process for the requests in flight through its middleware or reverse proxy, by rule, from the decision until the handler returns. Slots that clients of the decision service (/v1/check) hold are the clients', counted by no process.",
	}, []string{"rule"})
	m.settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_settled_units_total",
		Help: "Units that settles of reservations and refunds gave back (kind refunded) or charged beyond the reserve, a debt (kind charged), by rule: the units asked (a window that ended since the take gives back none).",
	}, []string{"rule", "kind"})
	m.doorSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_decision_duration_seconds",
		Help:    "Latency of decisions as each door serves them, from the request read to the answer written (the reverse proxy: until it forwards or refuses).",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"door"})
	for _, d := range Doors {
		m.doors[d] = m.doorSeconds.WithLabelValues(d.String())
	}
	for _, result := range []string{"ok", "rejected"} {
		m.reloads.WithLabelValues(result)
	}
	m.take = opSeries{m.storeSeconds.WithLabelValues("take"), m.storeErrors.WithLabelValues("take")}
	m.reset = opSeries{m.storeSeconds.WithLabelValues("reset"), m.storeErrors.WithLabelValues("reset")}
	m.peek = opSeries{m.storeSeconds.WithLabelValues("peek"), m.storeErrors.WithLabelValues("peek")}
	m.refund = opSeries{m.storeSeconds.WithLabelValues("refund"), m.storeErrors.WithLabelValues("refund")}
	m.charge = opSeries{m.storeSeconds.WithLabelValues("charge"), m.storeErrors.WithLabelValues("charge")}
	m.renew = opSeries{m.storeSeconds.WithLabelValues("renew"), m.storeErrors.WithLabelValues("renew")}
	m.reg.MustRegister(m.decisions, m.doorSeconds, m.storeSeconds, m.storeErrors, m.fallbacks, m.reloads, m.breakerOpen, m.breakerOpens, m.breakerNode, m.unknown, m.settled, m.shed, m.slots,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Gatherer(), promhttp.HandlerOpts{})
}

// Gatherer returns the metrics' registry, for a reader in process (the
// dashboard) that reads the same series Prometheus scrapes. Like the
// Handler, it first adds the series of every rule Rules names.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if f := m.rules.Load(); f != nil && *f != nil {
			for _, rule := range (*f)() {
				for _, o := range policy.Outcomes {
					m.counter(ruleOutcome{rule, o})
				}
				for _, kind := range settleKinds {
					m.settled.WithLabelValues(rule, kind)
				}
				m.slots.WithLabelValues(rule)
			}
		}
		return m.reg.Gather()
	})
}

// Rules sets where the names of the configuration's rules are read from
// at each scrape (a reload changes them), so that every rule's
// sluice_decisions_total, sluice_settled_units_total and
// sluice_slots_held series are there, at zero, before its first
// decision. A rule a reload removed keeps its series. Rules(nil) names
// none.
func (m *Metrics) Rules(names func() []string) { m.rules.Store(&names) }

// ObserveDoor records a decision served by door d in elapsed. A Door
// that is none of Doors is recorded nowhere.
func (m *Metrics) ObserveDoor(d Door, elapsed time.Duration) {
	if int(d) < len(m.doors) {
		m.doors[d].Observe(elapsed.Seconds())
	}
}

// Time returns h with the latency of each of its requests recorded as
// door d's (see ObserveDoor).
func (m *Metrics) Time(d Door, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		m.ObserveDoor(d, time.Since(start))
	})
}

// Decision counts one rule's outcome in a decision: a policy.Observer.
// Fallbacks are counted once per rule that the error policy decided. The
// client key is not a label: any number of them could be sent.
func (m *Metrics) Decision(rule, _ string, o policy.Outcome) {
	if o == policy.DegradedAllowed || o == policy.DegradedDenied {
		m.fallbacks.Inc()
	}
	k := ruleOutcome{rule, o}
	if p := m.byRule.Load(); p != nil {
		if c, ok := (*p)[k]; ok {
			c.Inc()
			return
		}
	}
	m.counter(k).Inc()
}

// settleKinds are the values of sluice_settled_units_total's kind label.
var settleKinds = [...]string{"refunded", "charged"}

// Shed counts a request shed by rule as one of class: a
// policy.ShedObserver.
func (m *Metrics) Shed(rule, class string) { m.shed.WithLabelValues(rule, class).Inc() }

// Slots adds delta to the slots that rule holds for requests in flight
// through this process: a policy.SlotObserver.
func (m *Metrics) Slots(rule string, delta int) { m.slots.WithLabelValues(rule).Add(float64(delta)) }

// Settled counts the units one rule's settle or refund gave back and
// charged: a policy.SettleObserver.
func (m *Metrics) Settled(rule string, refunded, charged int) {
	if refunded > 0 {
		m.settled.WithLabelValues(rule, settleKinds[0]).Add(float64(refunded))
	}
	if charged > 0 {
		m.settled.WithLabelValues(rule, settleKinds[1]).Add(float64(charged))
	}
}

// counter adds k's child to m.byRule. The rules are the configuration's,
// so the map is as bounded as the series themselves (a rule removed by a
// reload keeps its series, as the vector keeps them), and copying it on
// the first decision of each rule and outcome costs nothing that
// matters. A series appears when it is first counted, as with
// WithLabelValues.
func (m *Metrics) counter(k ruleOutcome) prometheus.Counter {
	m.byRuleMu.Lock()
	defer m.byRuleMu.Unlock()
	old := m.byRule.Load()
	if old != nil {
		if c, ok := (*old)[k]; ok {
			return c
		}
	}
	next := make(map[ruleOutcome]prometheus.Counter)
	if old != nil {
		maps.Copy(next, *old)
	}
	c := m.decisions.WithLabelValues(k.rule, k.outcome.String())
	next[k] = c
	m.byRule.Store(&next)
	return c
}

// Breaker records a change of one of the store's circuit breakers: a
// sluice.Hooks Breaker (see Hooks). A node's
// series is named as the change names it: when a node's name changes (a
// Cluster shard's new master), the series of its old name goes. A store
// of one node (which names none) has sluice_breaker_open alone.
func (m *Metrics) Breaker(ch sluice.NodeBreaker) {
	m.nodesMu.Lock()
	defer m.nodesMu.Unlock()
	open := ch.State == sluice.BreakerOpen
	if open {
		m.breakerOpens.Inc()
	}
	if old := m.nodes[ch.Node]; old.name != "" && old.name != ch.Name {
		m.breakerNode.DeleteLabelValues(old.name)
	}
	m.nodes[ch.Node] = nodeBreaker{name: ch.Name, open: open}
	if ch.Name != "" {
		m.breakerNode.WithLabelValues(ch.Name).Set(gauge(open))
	}
	anyOpen := false
	for _, n := range m.nodes {
		anyOpen = anyOpen || n.open
	}
	m.breakerOpen.Set(gauge(anyOpen))
}

// nodeBreaker is the last change of a node's breaker.
type nodeBreaker struct {
	name string
	open bool
}

// gauge returns 1 for true, 0 for false.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Reload counts a policy file reload that err rejected, or that
// succeeded when err is nil (policyfile.WithReloadReport).
func (m *Metrics) Reload(err error) {
	result := "ok"
	if err != nil {
		result = "rejected"
	}
	m.reloads.WithLabelValues(result).Inc()
}

// UnknownDomain counts one Envoy request for a domain the configuration
// does not have: an envoy.WithUnknownDomain. The domain is not a label,
// since it comes from the client and any number of them could be sent;
// envoy.Service logs the domains by name.
func (m *Metrics) UnknownDomain(string) { m.unknown.Inc() }

// Hooks returns the Limiter hooks that record the store's calls
// (sluice_store_duration_seconds and sluice_store_errors_total by op)
// and its breakers' changes (Breaker): install them with sluice.WithHooks
// (policyfile.WithHooks).
func (m *Metrics) Hooks() sluice.Hooks {
	return sluice.Hooks{StoreCall: m.StoreCall, Breaker: m.Breaker}
}

// StoreCall records one store call of op ("take", "reset", "peek",
// "refund", "charge" or "renew") that took d and ended with err: a
// sluice.Hooks StoreCall. Another op, and a call the store cannot make
// (errors.ErrUnsupported), are recorded nowhere.
func (m *Metrics) StoreCall(op string, d time.Duration, err error) {
	var o *opSeries
	switch op {
	case "take":
		o = &m.take
	case "reset":
		o = &m.reset
	case "peek":
		o = &m.peek
	case "refund":
		o = &m.refund
	case "charge":
		o = &m.charge
	case "renew":
		o = &m.renew
	default:
		return
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return // the store cannot: no call was made
	}
	o.seconds.Observe(d.Seconds())
	if err != nil {
		o.errors.Inc()
	}
}
