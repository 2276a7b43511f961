package policy

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns the address of the client that sent r.
//
// Without trusted proxies it is r.RemoteAddr's host. When the immediate
// peer (RemoteAddr) is inside trusted, ClientIP walks the forwarding chain
// from the right, skipping addresses inside trusted, and returns the
// right-most address that is not trusted. Every proxy appends the address
// it received the request from, so the right-most entries are written by
// trusted proxies and whatever the client sent itself is further left: a
// client cannot spoof its way to a fresh bucket by sending its own
// X-Forwarded-For. The chain is every X-Forwarded-For field line, in order,
// split at commas; when the request has no X-Forwarded-For element, it is
// the for= values of the RFC 7239 Forwarded field lines.
//
// The walk ends early at a hop that is not an IP address (for=unknown, an
// obfuscated identifier such as for=_hidden, a Forwarded element without
// for=, garbage): nothing to its left can be verified, so ClientIP returns
// the last address it accepted, which is the nearest trusted proxy that
// reported the unknown hop (or the peer, when that hop is the right-most).
// A chain made entirely of trusted addresses likewise yields its left-most
// address. Empty elements are skipped.
//
// Addresses are returned in one form per client, so that they key one
// bucket: IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are unmapped to
// IPv4, IPv6 zones are dropped, and ports are ignored. Hops may be IPv4,
// IPv6, [IPv6], [IPv6]:port or IPv4:port, quoted or not, with surrounding
// spaces. Prefixes in trusted should be written in IPv4 form for IPv4
// proxies; an IPv4-mapped prefix (::ffff:10.0.0.0/104) is accepted too.
//
// Trust the headers your proxies write: if they append to Forwarded only,
// they must also drop a client's X-Forwarded-For, which ClientIP otherwise
// prefers. ok is false only when RemoteAddr holds no valid address.
func ClientIP(r *http.Request, trusted []netip.Prefix) (addr netip.Addr, ok bool) {
	peer, ok := parseHop(r.RemoteAddr, false)
	if !ok {
		return netip.Addr{}, false
	}
	if !trustedAddr(trusted, peer) {
		return peer, true
	}
	walk := hopWalk{trusted: trusted, addr: peer}
	if xff := r.Header.Values("X-Forwarded-For"); hasXFFElement(xff) {
		walk.xff(xff)
	} else {
		walk.forwarded(r.Header.Values("Forwarded"))
	}
	return walk.addr, true
}

// hopWalk is a right-to-left walk over a forwarding chain.
type hopWalk struct {
	trusted []netip.Prefix
	addr    netip.Addr // the last hop accepted: the answer so far
	done    bool
}

// hop takes the next hop to the left; ok is false when it names no address.
func (w *hopWalk) hop(a netip.Addr, ok bool) {
	if !ok {
		w.done = true
		return
	}
	w.addr = a
	w.done = !trustedAddr(w.trusted, a)
}

// xff walks X-Forwarded-For field lines. It scans from the right without
// splitting, so a huge header costs no allocation.
func (w *hopWalk) xff(lines []string) {
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		line := lines[i]
		for !w.done {
			j := strings.LastIndexByte(line, ',')
			if elem := trimOWS(line[j+1:]); elem != "" {
				w.hop(parseHop(elem, true))
			}
			if j < 0 {
				break
			}
			line = line[:j]
		}
	}
}

// forwarded walks RFC 7239 Forwarded field lines. Elements are found from
// the right too, so that a malformed element a client sent (an unclosed
// quote) cannot change how the proxies' elements to its right are read.
func (w *hopWalk) forwarded(lines []string) {
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		line := lines[i]
		for !w.done {
			j := lastUnquotedComma(line)
			if elem := line[j+1:]; trimOWS(elem) != "" {
				v, ok := forwardedFor(elem)
				var a netip.Addr
				if ok {
					a, ok = parseHop(v, true)
				}
				w.hop(a, ok)
			}
			if j < 0 {
				break
			}
			line = line[:j]
		}
	}
}

// hasXFFElement reports whether X-Forwarded-For lines hold any element.
func hasXFFElement(lines []string) bool {
	for _, l := range lines {
		if strings.Trim(l, " \t,") != "" {
			return true
		}
	}
	return false
}

// TrustedPeer reports whether r's immediate peer, the host of
// r.RemoteAddr, is inside trusted, as ClientIP decides it: an IPv4 peer
// is inside an IPv4-mapped prefix (::ffff:10.0.0.0/104) too. A proxy asks
// it before passing on the forwarding headers r came with.
func TrustedPeer(r *http.Request, trusted []netip.Prefix) bool {
	peer, ok := parseHop(r.RemoteAddr, false)
	return ok && trustedAddr(trusted, peer)
}

// trustedAddr reports whether a (unmapped, without zone) is inside trusted.
func trustedAddr(trusted []netip.Prefix, a netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
		if a.Is4() && p.Addr().Is4In6() && p.Bits() >= 96 {
			if netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Contains(a) {
				return true
			}
		}
	}
	return false
}

// zoneID reports whether z may be an IPv6 zone in a hop: RFC 6874's
// ZoneID, unreserved characters and percent signs only (netip accepts
// any, a space too: "::% 0" is no address a proxy wrote).
func zoneID(z string) bool {
	for i := 0; i < len(z); i++ {
		switch c := z[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '%':
		default:
			return false
		}
	}
	return true
}

// parseHop parses one hop: an IP address with an optional port, IPv6
// possibly in brackets. The address is unmapped and loses its zone. A
// hop of a header (header) must have a zone of RFC 6874's characters
// (zoneID); RemoteAddr's, which the server wrote, is taken as netip
// parses it.
func parseHop(s string, header bool) (netip.Addr, bool) {
	s = trimOWS(s)
	host := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.LastIndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && rest[0] != ':' {
			return netip.Addr{}, false
		}
		host = s[1:end]
	case strings.Count(s, ":") == 1: // IPv4:port; the port may be obfuscated
		host = s[:strings.IndexByte(s, ':')]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (header && !zoneID(a.Zone())) {
		return netip.Addr{}, false
	}
	if host != s && !strings.HasPrefix(s, "[") && !a.Is4() {
		return netip.Addr{}, false // "::1:80" parsed as "::1" would be wrong
	}
	if strings.HasPrefix(s, "[") && a.Is4() {
		return netip.Addr{}, false // brackets hold IPv6 only
	}
	return a.WithZone("").Unmap(), true
}

// forwardedFor returns the for= value of a Forwarded element, unquoted.
// ok is false when there is none, or more than one, or it is malformed.
func forwardedFor(elem string) (v string, ok bool) {
	found := false
	for elem != "" {
		var pair string
		pair, elem = cutUnquoted(elem, ';')
		name, val, isPair := strings.Cut(pair, "=")
		if !isPair || !strings.EqualFold(trimOWS(name), "for") {
			continue
		}
		if found {
			return "", false
		}
		found = true
		if v, ok = unquoteValue(trimOWS(val)); !ok {
			return "", false
		}
	}
	return v, found
}

// cutUnquoted splits s at the first sep outside a quoted string.
func cutUnquoted(s string, sep byte) (before, after string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// lastUnquotedComma returns the index of the last comma of s outside a
// quoted string, scanning from the right, or -1.
func lastUnquotedComma(s string) int {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			if !quoted {
				quoted = true
				continue
			}
			n := 0 // backslashes before it: an odd number escapes it
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				quoted = false
			}
		case ',':
			if !quoted {
				return i
			}
		}
	}
	return -1
}

// unquoteValue returns a token as is and a quoted-string's content.
func unquoteValue(s string) (string, bool) {
	if !strings.HasPrefix(s, `"`) {
		return s, !strings.ContainsAny(s, "\"\\")
	}
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	if !strings.ContainsAny(s, "\"\\") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i++; i == len(s) {
				return "", false
			}
			b.WriteByte(s[i])
		case '"':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// trimOWS removes the optional whitespace (spaces and tabs) of HTTP fields.
func trimOWS(s string) string { return strings.Trim(s, " \t") }
