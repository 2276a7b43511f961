package admin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/sluice-go/sluice/internal/httpjson"
)

// HostsEnv is the environment variable of sluice serve's --admin-hosts:
// the host names, besides localhost and IP addresses, that the dashboard
// and the operator API answer to (see Hosts).
const HostsEnv = "SLUICE_ADMIN_HOSTS"

// maxShownHost is the longest Host or Origin an error quotes, in bytes.
const maxShownHost = 100

// Hosts are the host names a Handler answers to, besides those it always
// answers to: localhost, any IP address (the listener's own among them)
// and a request without a Host. A request to any other name is refused
// with 421: that is how DNS rebinding reaches a loopback listener from a
// web page (the attacker's name, resolved to 127.0.0.1, is sent as Host),
// and a browser never sends an IP address in Host for a page of another
// name. A state-changing request (POST) that carries an Origin is also
// refused (403) unless that Origin is the Host it was sent to (the
// dashboard's own page) or one of the names: a cross-site form or script.
// "*" turns both checks off, for a proxy in front that checks them.
//
// The zero Hosts holds no name. Make one with ParseHosts.
type Hosts struct {
	any   bool     // "*": every Host and Origin
	names []string // lower case, without a trailing dot, sorted
}

// ParseHosts reads a comma-separated list of host names, such as
// "sluice.internal,dashboard.example.com", or "*" for any: names without
// a scheme, port or path, matched whole and in any case (a request's port
// is not checked). IP addresses are accepted, and always allowed anyway.
// Spaces around names and empty items are ignored.
func ParseHosts(list string) (Hosts, error) {
	var hs Hosts
	for item := range strings.SplitSeq(list, ",") {
		name := strings.ToLower(strings.TrimSpace(item))
		switch {
		case name == "":
			continue
		case name == "*":
			hs.any = true
			continue
		}
		if err := checkHostName(name); err != nil {
			return Hosts{}, fmt.Errorf("host %q: %w", strings.TrimSpace(item), err)
		}
		if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
			continue // always allowed
		}
		name = strings.TrimSuffix(name, ".")
		if !slices.Contains(hs.names, name) {
			hs.names = append(hs.names, name)
		}
	}
	slices.Sort(hs.names)
	return hs, nil
}

// checkHostName says what makes name (lower case) no host name.
func checkHostName(name string) error {
	switch {
	case strings.Contains(name, "://"):
		return errors.New("list host names, not URLs: drop the scheme")
	case strings.ContainsAny(name, "/?#"):
		return errors.New("list host names, without a path")
	case strings.HasPrefix(name, "["):
		if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err != nil || !strings.HasSuffix(name, "]") {
			return errors.New("not an IPv6 address in brackets; list names without a port")
		}
		return nil
	case strings.Contains(name, ":"):
		if _, err := netip.ParseAddr(name); err == nil {
			return nil
		}
		return errors.New("list names without a port (a request's port is not checked)")
	case strings.Contains(name, "*"):
		return errors.New(`"*" alone allows every host; a name cannot hold one`)
	}
	trimmed := strings.TrimSuffix(name, ".")
	if trimmed == "" || len(trimmed) > 253 {
		return errors.New("a host name is 1 to 253 characters long")
	}
	for label := range strings.SplitSeq(trimmed, ".") {
		if label == "" || len(label) > 63 {
			return errors.New("each dot-separated label of a host name is 1 to 63 characters long")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a letter, digit, hyphen or underscore", c)
			}
		}
	}
	return nil
}

// String returns the names, comma-separated, as ParseHosts reads them
// back ("*" for any).
func (hs Hosts) String() string {
	if hs.any {
		return strings.Join(append([]string{"*"}, hs.names...), ",")
	}
	return strings.Join(hs.names, ",")
}

// With returns hs with name added, when it is a host name (not an IP
// address, nor empty): sluice serve adds the host of its listener's
// address, which its operator chose.
func (hs Hosts) With(name string) Hosts {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || checkHostName(name) != nil || isLiteral(name) || slices.Contains(hs.names, name) {
		return hs
	}
	hs.names = append(slices.Clone(hs.names), name)
	slices.Sort(hs.names)
	return hs
}

// allowsHost reports whether a request whose Host is host may be
// answered.
func (hs Hosts) allowsHost(host string) bool {
	name := hostOnly(host)
	return hs.any || name == "" || isLiteral(name) || name == "localhost" || slices.Contains(hs.names, name)
}

// allowsOrigin reports whether a state-changing request with the Origin
// origin, sent to host, may be answered: without an Origin, from the
// page of the same host and port, or from a page of one of the names.
func (hs Hosts) allowsOrigin(origin, host string) bool {
	if origin == "" || hs.any {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" (a sandboxed or file: page) among them
	}
	return strings.EqualFold(u.Host, host) || slices.Contains(hs.names, hostOnly(u.Host))
}

// hostOnly returns the host of a Host field or an origin's host, without
// its port or brackets, in lower case and without a trailing dot.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// isLiteral reports whether name is an IP address.
func isLiteral(name string) bool {
	_, err := netip.ParseAddr(name)
	return err == nil
}

// describe says which hosts are allowed, for an error.
func (hs Hosts) describe() string {
	s := "localhost and IP addresses"
	if len(hs.names) > 0 {
		s = "localhost, IP addresses and " + strings.Join(hs.names, ", ")
	}
	return s
}

// guard answers a request whose Host, or whose Origin for a method other
// than GET and HEAD, hs does not allow, and passes any other to next.
func (hs Hosts) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hs.allowsHost(r.Host) {
			httpjson.Error(w, http.StatusMisdirectedRequest, "HOST_NOT_ALLOWED", fmt.Sprintf(
				"Host %q is not a name this dashboard answers to (a guard against DNS rebinding): it answers to %s; allow more names with %s (sluice serve --admin-hosts), comma-separated, or * for any",
				cutAtRune(r.Host, maxShownHost), hs.describe(), HostsEnv))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !hs.allowsOrigin(r.Header.Get("Origin"), r.Host) {
			httpjson.Error(w, http.StatusForbidden, "ORIGIN_NOT_ALLOWED", fmt.Sprintf(
				"a %s from a page of Origin %q is refused (a guard against cross-site requests): only the dashboard's own page (Origin of Host %q) and %s may send one; allow more names with %s (sluice serve --admin-hosts)",
				r.Method, cutAtRune(r.Header.Get("Origin"), maxShownHost), cutAtRune(r.Host, maxShownHost), namesOr(hs.names, "no other"), HostsEnv))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// namesOr returns names, comma-separated, or none when there are none.
func namesOr(names []string, none string) string {
	if len(names) == 0 {
		return none
	}
	return strings.Join(names, ", ")
}
