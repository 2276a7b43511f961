package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// redis returns the redis section, with defaults.
func (p *parser) redis(f field) Redis {
	r := DefaultRedis()
	if f.val == nil {
		return r
	}
	m, ok := p.mapping(f, "redis", redisFields, true)
	if !ok {
		return r
	}
	if e, ok := m["url"]; ok {
		if s, ok := p.str(e, "a Redis URL"); ok {
			if validRedisURL(s) {
				r.URL = s
			} else {
				// Not quoted back: the URL may hold a password.
				p.errorf(e.val.Line, e.path, "is not a Redis URL; write redis://[user:password@]host:port/db, rediss://... for TLS, or unix:///path/to/redis.sock (leave url out for the in-memory store)")
			}
		}
	}
	if e, ok := m["on_error"]; ok {
		if s, ok := p.oneOf(e, sluice.OutagePolicies...); ok {
			r.OnError = s
		}
	}
	if e, ok := m["timeout"]; ok {
		if d, ok := p.duration(e); ok {
			if d <= 0 {
				p.errorf(e.val.Line, e.path, "must be positive, got %s; %s", d, durationHelp)
			} else {
				r.Timeout = d
			}
		}
	}
	if e, ok := m["deny_cache"]; ok {
		if b, ok := p.boolean(e); ok {
			r.DenyCache = b
		}
	}
	if e, ok := m["batch"]; ok {
		if n, ok := p.integer(e, "the most concurrent decisions one Redis script call carries (1: no coalescing)"); ok {
			if n < 1 {
				p.errorf(e.val.Line, e.path, "must be at least 1 (1: no coalescing), got %d", n)
			} else {
				r.Batch = n
			}
		}
	}
	p.redisWait(m, &r)
	if e, ok := m["replicas"]; ok {
		if e.val.Value == "auto" {
			r.Replicas = 0
		} else if n, ok := p.integer(e, `auto (learned from the replicas' heartbeats in Redis), or the number of replicas sharing the limits`); ok {
			if n < 1 {
				p.errorf(e.val.Line, e.path, "must be auto or at least 1, got %d", n)
			} else {
				r.Replicas = n
			}
		}
	}
	return r
}

// redisWait reads wait_replicas and wait_timeout of the redis section m
// into r, whose Timeout is read: the WAIT's timeout must leave the decision
// time under it.
func (p *parser) redisWait(m map[string]field, r *Redis) {
	bad := false // wait_replicas is wrong: wait_timeout is not judged by it
	if e, ok := m["wait_replicas"]; ok {
		n, ok := p.integer(e, "how many replicas must hold a decision's write before it is answered (0: none)")
		switch {
		case !ok:
			bad = true
		case n < 0:
			bad = true
			p.errorf(e.val.Line, e.path, "must be 0 (answer at once, the default) or a number of replicas, got %d", n)
		default:
			r.WaitReplicas = n
		}
	}
	t, ok := m["wait_timeout"]
	if !ok {
		if r.WaitReplicas == 0 {
			return
		}
		if r.WaitTimeout = defaultWaitTimeout(r.Timeout); r.WaitTimeout >= r.Timeout {
			e := m["wait_replicas"]
			p.errorf(e.val.Line, e.path, "needs a redis.timeout of 2ms or more, to wait for the replicas within (wait_timeout, default half of it), got %s", r.Timeout)
		}
		return
	}
	d, ok := p.duration(t)
	switch {
	case !ok:
	case bad:
	case r.WaitReplicas == 0:
		p.errorf(t.val.Line, t.path, "applies only with wait_replicas of 1 or more; set wait_replicas, or leave wait_timeout out")
	case d <= 0 || d%time.Millisecond != 0:
		p.errorf(t.val.Line, t.path, "must be a positive whole number of milliseconds (Redis's WAIT counts in milliseconds), got %s; write one such as %s", d, defaultWaitTimeout(r.Timeout))
	case d >= r.Timeout:
		p.errorf(t.val.Line, t.path, "%s is not under redis.timeout (%s): the store timeout would cut the decision first; write less, such as %s (half of it)", d, r.Timeout, defaultWaitTimeout(r.Timeout))
	default:
		r.WaitTimeout = d
	}
}

// defaultWaitTimeout is wait_timeout when the file leaves it out: half of
// the store timeout, in whole milliseconds, at least 1ms.
func defaultWaitTimeout(timeout time.Duration) time.Duration {
	return max(timeout/2/time.Millisecond*time.Millisecond, time.Millisecond)
}

func validRedisURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "redis", "rediss":
		return u.Host != ""
	case "unix":
		return u.Path != ""
	}
	return false
}

// memory returns the memory section, with defaults.
func (p *parser) memory(f field) Memory {
	mem := Memory{MaxKeys: memory.DefaultCapacity}
	if f.val == nil {
		return mem
	}
	m, ok := p.mapping(f, "memory", memoryFields, true)
	if !ok {
		return mem
	}
	if e, ok := m["max_keys"]; ok {
		const want = "the most entries (client key × limit) the in-memory store holds, at least 1"
		if n, ok := p.integer(e, want); ok {
			if n < 1 {
				p.errorf(e.val.Line, e.path, "must be at least 1, got %d; leave it out for the default, %d", n, memory.DefaultCapacity)
			} else {
				mem.MaxKeys = n
			}
		}
	}
	return mem
}

// http returns the http section, with defaults.
func (p *parser) http(f field) HTTP {
	h := HTTP{Headers: "both", IPv6Prefix: policy.DefaultIPv6Prefix}
	if f.val == nil {
		return h
	}
	m, ok := p.mapping(f, "http", httpFields, true)
	if !ok {
		return h
	}
	if e, ok := m["headers"]; ok {
		if s, ok := p.oneOf(e, "both", "ietf", "legacy", "none"); ok {
			h.Headers = s
		}
	}
	if e, ok := m["problem_json"]; ok {
		h.ProblemJSON, _ = p.boolean(e)
	}
	if e, ok := m["policy_key"]; ok {
		h.PolicyKey, _ = p.boolean(e)
	}
	if e, ok := m["ipv6_prefix"]; ok {
		if n, ok := p.integer(e, "the prefix length by which ip keys group IPv6 clients, 1 to 128"); ok {
			if n < 1 || n > 128 {
				p.errorf(e.val.Line, e.path, "must be 1 to 128, got %d; /64 (the default) is what one subscriber gets, /56 or /48 group whole sites", n)
			} else {
				h.IPv6Prefix = n
			}
		}
	}
	if e, ok := m["trusted_proxies"]; ok {
		items, _ := p.list(e, "IP addresses and CIDR prefixes")
		for _, item := range items {
			s, ok := p.str(item, "an IP address or a CIDR prefix such as 10.0.0.0/8")
			if !ok {
				continue
			}
			pre, err := parseProxy(s)
			if err != nil {
				p.errorf(item.val.Line, item.path, "%q is not an IP address or a CIDR prefix; write one such as 10.0.0.0/8, 192.168.1.10 or fd00::/8", s)
				continue
			}
			h.TrustedProxies = append(h.TrustedProxies, pre)
		}
	}
	return h
}

// parseProxy returns the prefix s, or the single address s as a /32 or
// /128. Host bits after the prefix length are cleared.
func parseProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return pre.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zone in %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
