package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// ErrInvalidKey reports a client key that its rule's key source could not
// have produced, such as a key that is not an IP address for a KeyIP rule.
var ErrInvalidKey = errors.New("invalid client key")

// ErrDuplicateCheck reports a decision that names one rule twice for one
// client: it could not spend once under each.
var ErrDuplicateCheck = errors.New("duplicate check")

// Every client key is stored in the namespace of where it came from, so
// that no client can pick a value that collides with another source's:
// "ip:" for an address (a KeyIP rule, or the fallback of IPIfMissing),
// "k:" for a header or query value and the key a caller names (the key
// of a check naming a header, query or request rule), "fn:" for a
// WithKey function's key, "d:" for a composite key of a check
// (Check.Composite: an Envoy descriptor's several entries), and "global"
// alone; "settled:" holds the claims of Tickets (Engine.Resume).
// The same rule and client thus share one count through every door: the
// middleware, the proxy, POST /v1/check and Envoy's gRPC.
const (
	nsIP     = "ip:"
	nsValue  = "k:"
	nsFunc   = "fn:"
	nsJoined = "d:"
	globalNS = "global"

	nsSettled = "settled:"
)

// storageKey returns the stored form of client key v of source src.
func storageKey(src Source, v string) string {
	switch src {
	case KeyIP:
		return nsIP + v
	case KeyGlobal:
		return globalNS
	}
	return nsValue + v
}

// clientAddr returns the client's address as KeyIP rules key it: IPv4
// whole, IPv6 as its prefix of the set's length ("2001:db8:1:2::/64"), or
// "unknown" when the connection has none (a Unix socket): such clients
// then share one bucket.
func (s *RuleSet) clientAddr(r *http.Request) string {
	a, ok := ClientIP(r, s.trusted)
	if !ok {
		return "unknown"
	}
	return s.addrKey(a)
}

// addrKey returns the client key of address a.
func (s *RuleSet) addrKey(a netip.Addr) string {
	if a.Is4() || s.ipv6Bits >= 128 {
		return a.String()
	}
	p, _ := a.Prefix(s.ipv6Bits)
	return p.String()
}

// httpKey returns the client key of r under rule (before namespacing),
// its storage key, or ok = false when r lacks the key the rule needs. A
// header or query value that is not valid UTF-8 is an error wrapping
// ErrInvalidKey: a key is text, the same through every door, and the JSON
// API and gRPC cannot carry such bytes (encoding/json would replace them
// with U+FFFD, making distinct keys share a count).
func (s *RuleSet) httpKey(r *http.Request, rule *Rule) (key, stored string, ok bool, err error) {
	if f := s.funcs[rule.Name]; f != nil {
		if k, ok := f(r); ok {
			return k, nsFunc + k, true, nil
		}
		// Without a function key, the rule's own key source applies.
	}
	switch rule.Key.Source {
	case KeyGlobal:
		return globalNS, globalNS, true, nil
	case KeyHeader, KeyQuery:
		var v string
		if rule.Key.Source == KeyHeader {
			v = r.Header.Get(rule.Key.Name)
		} else {
			v = r.URL.Query().Get(rule.Key.Name)
		}
		if v != "" {
			if !utf8.ValidString(v) {
				return "", "", false, fmt.Errorf("%w: rule %q is keyed by %s, and its value is not valid UTF-8", ErrInvalidKey, rule.Name, rule.Key)
			}
			return v, storageKey(rule.Key.Source, v), true, nil
		}
		if rule.MissingKey == IPIfMissing {
			ip := s.clientAddr(r)
			return ip, storageKey(KeyIP, ip), true, nil
		}
		return "", "", false, nil
	}
	// KeyIP: a rule keyed by request is never matched to a request
	// (Compile puts it in no group).
	ip := s.clientAddr(r)
	return ip, storageKey(KeyIP, ip), true, nil
}

// checkKey returns the storage key of client key v given for rule by a
// caller of Check: an address for a KeyIP rule (grouped by its IPv6
// prefix, as requests are), any non-empty valid UTF-8 value for header,
// query and request rules, anything (ignored) for a global rule.
func (s *RuleSet) checkKey(rule *Rule, v string, composite bool) (key, stored string, err error) {
	switch {
	case rule.Key.Source == KeyGlobal:
		return globalNS, globalNS, nil
	case !utf8.ValidString(v):
		return "", "", fmt.Errorf("%w: rule %q: the key is not valid UTF-8", ErrInvalidKey, rule.Name)
	case composite && rule.Key.Source == KeyIP:
		return "", "", fmt.Errorf("%w: rule %q is keyed by ip, and a composite key names no single address; %s", ErrInvalidKey, rule.Name, namedHint)
	case composite:
		return v, nsJoined + v, nil
	case v == "":
		return "", "", fmt.Errorf("%w: rule %q is keyed by %s and needs a key", ErrInvalidKey, rule.Name, rule.Key)
	case rule.Key.Source == KeyIP:
		a, perr := netip.ParseAddr(v)
		if perr != nil {
			if p, err := netip.ParsePrefix(v); err == nil && (p.Addr().Is6() && p.Bits() == s.ipv6Bits) {
				// The prefix a decision reports as the key: the same
				// form as its addresses (a /128 is its address).
				k := s.addrKey(p.Masked().Addr())
				return k, storageKey(KeyIP, k), nil
			}
			return "", "", fmt.Errorf("%w: rule %q is keyed by ip, and %q is not an IP address; %s", ErrInvalidKey, rule.Name, v, namedHint)
		}
		k := s.addrKey(a.Unmap().WithZone(""))
		return k, storageKey(KeyIP, k), nil
	}
	return v, storageKey(rule.Key.Source, v), nil
}

// namedHint tells a caller of Check how to key a rule by the keys it
// names, for the errors of a key that a KeyIP rule refuses.
var namedHint = "write key: " + KeyRequest.String() + " for keys your callers name"

// MaskKey returns how a client key is shown where it would otherwise be
// shown in the clear (the dashboard, sluice top, sampled denial logs):
// "#" and the first 12 hexadecimal digits of its SHA-256. The same key
// always masks the same, so an operator who knows a key can find it, and
// a reader who does not cannot read one off the page. A mask cannot be
// undone: only a process that holds the key can tell which key it masks
// (the operator API finds it among the keys its top tracks).
func MaskKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return maskPrefix + hex.EncodeToString(sum[:maskBytes])
}

// The form of a masked key: maskPrefix and maskBytes bytes of SHA-256 in
// lower-case hexadecimal.
const (
	maskPrefix = "#"
	maskBytes  = 6
)

// IsMaskedKey reports whether s has the form of a key MaskKey masked: "#"
// and 12 lower-case hexadecimal digits.
func IsMaskedKey(s string) bool {
	hexDigits, ok := strings.CutPrefix(s, maskPrefix)
	if !ok || len(hexDigits) != 2*maskBytes {
		return false
	}
	for i := 0; i < len(hexDigits); i++ {
		if c := hexDigits[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
