package policy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/policy"
)

// proxies are the trusted prefixes of the ClientIP tests: a private IPv4
// network, one IPv6 network, one IPv4 proxy written as an IPv4-mapped
// prefix, and loopback.
var proxies = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
	netip.MustParsePrefix("::ffff:192.168.1.0/120"),
	netip.MustParsePrefix("127.0.0.1/32"),
}

// ipRequest returns a request from remote with the given field lines.
func ipRequest(remote string, xff, fwd []string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	if xff != nil {
		r.Header["X-Forwarded-For"] = xff
	}
	if fwd != nil {
		r.Header["Forwarded"] = fwd
	}
	return r
}

func TestClientIP(t *testing.T) {
	lines := func(l ...string) []string { return l }
	tests := []struct {
		name     string
		remote   string
		xff, fwd []string
		trusted  []netip.Prefix
		want     string // "" for ok == false
	}{
		// No trusted proxies: the peer, whatever the headers say.
		{"peer ipv4", "203.0.113.7:5555", nil, nil, nil, "203.0.113.7"},
		{"peer ipv6", "[2001:db8::7]:5555", nil, nil, nil, "2001:db8::7"},
		{"peer without port", "203.0.113.7", nil, nil, nil, "203.0.113.7"},
		{"peer ipv6 without port", "2001:db8::7", nil, nil, nil, "2001:db8::7"},
		{"peer bracketed without port", "[2001:db8::7]", nil, nil, nil, "2001:db8::7"},
		{"peer ipv4-mapped", "[::ffff:203.0.113.7]:5555", nil, nil, nil, "203.0.113.7"},
		{"peer zone dropped", "[fe80::1%eth0]:5555", nil, nil, nil, "fe80::1"},
		{"peer named port", "203.0.113.7:http", nil, nil, nil, "203.0.113.7"},
		{"no trust, xff ignored", "203.0.113.7:1", lines("1.2.3.4"), nil, nil, "203.0.113.7"},
		{"no trust, forwarded ignored", "203.0.113.7:1", nil, lines("for=1.2.3.4"), nil, "203.0.113.7"},
		{"untrusted peer, xff ignored", "203.0.113.7:1", lines("1.2.3.4"), nil, proxies, "203.0.113.7"},
		{"untrusted peer, xff of a trusted address ignored", "203.0.113.7:1", lines("10.0.0.1"), nil, proxies, "203.0.113.7"},

		// Unparseable peers.
		{"empty remote", "", nil, nil, proxies, ""},
		{"hostname remote", "example.com:80", lines("1.2.3.4"), nil, proxies, ""},
		{"garbage remote", "[::1", nil, nil, nil, ""},
		{"bracketed ipv4 remote", "[203.0.113.7]:80", nil, nil, nil, ""},
		{"leading zero remote", "010.0.0.1:80", nil, nil, nil, ""},

		// One trusted proxy.
		{"one proxy", "10.0.0.1:1", lines("203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"spoofed xff through one proxy", "10.0.0.1:1", lines("1.2.3.4, 203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"spoofed xff line through one proxy", "10.0.0.1:1", lines("1.2.3.4", "203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"spoofed trusted address", "10.0.0.1:1", lines("10.9.9.9, 203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"no xff from trusted peer", "10.0.0.1:1", nil, nil, proxies, "10.0.0.1"},
		{"loopback proxy", "127.0.0.1:1", lines("203.0.113.7"), nil, proxies, "203.0.113.7"},

		// Several proxies.
		{"two proxies", "10.0.0.1:1", lines("203.0.113.7, 10.0.0.2"), nil, proxies, "203.0.113.7"},
		{"two proxies spoofed", "10.0.0.1:1", lines("6.6.6.6, 203.0.113.7, 10.0.0.2"), nil, proxies, "203.0.113.7"},
		{"three proxies over lines", "10.0.0.1:1", lines("6.6.6.6", "203.0.113.7, 10.0.0.3", "10.0.0.2"), nil, proxies, "203.0.113.7"},
		{"ipv6 proxies", "[2001:db8:ffff::1]:1", lines("2001:db8::7, 2001:db8:ffff::2"), nil, proxies, "2001:db8::7"},
		{"mixed families", "[2001:db8:ffff::1]:1", lines("203.0.113.7, 10.0.0.2"), nil, proxies, "203.0.113.7"},
		{"untrusted hop stops the walk", "10.0.0.1:1", lines("10.0.0.9, 198.51.100.1, 10.0.0.2"), nil, proxies, "198.51.100.1"},
		{"all trusted: left-most", "10.0.0.1:1", lines("10.0.0.3, 10.0.0.2"), nil, proxies, "10.0.0.3"},

		// Forms inside X-Forwarded-For.
		{"whitespace", "10.0.0.1:1", lines(" \t1.2.3.4 ,\t203.0.113.7\t "), nil, proxies, "203.0.113.7"},
		{"empty elements", "10.0.0.1:1", lines("1.2.3.4,,203.0.113.7,, ,"), nil, proxies, "203.0.113.7"},
		{"empty line", "10.0.0.1:1", lines("203.0.113.7", ""), nil, proxies, "203.0.113.7"},
		{"ipv4 with port", "10.0.0.1:1", lines("203.0.113.7:4711"), nil, proxies, "203.0.113.7"},
		{"bracketed ipv6 with port", "10.0.0.1:1", lines("[2001:db8::7]:4711"), nil, proxies, "2001:db8::7"},
		{"ipv4-mapped hop", "10.0.0.1:1", lines("::ffff:203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"ipv4-mapped trusted hop", "10.0.0.1:1", lines("203.0.113.7, ::ffff:10.0.0.2"), nil, proxies, "203.0.113.7"},
		{"mapped prefix trusts ipv4 peer", "192.168.1.5:1", lines("203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"mapped prefix trusts mapped peer", "[::ffff:192.168.1.5]:1", lines("203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"zone in hop", "10.0.0.1:1", lines("fe80::7%eth0"), nil, proxies, "fe80::7"},
		{"unknown stops at the nearest proxy", "10.0.0.1:1", lines("203.0.113.7, unknown, 10.0.0.2"), nil, proxies, "10.0.0.2"},
		{"unknown right-most: the peer", "10.0.0.1:1", lines("203.0.113.7, garbage"), nil, proxies, "10.0.0.1"},
		{"hostname hop", "10.0.0.1:1", lines("client.example"), nil, proxies, "10.0.0.1"},
		{"spoofed unknown left of real hop", "10.0.0.1:1", lines("unknown, 203.0.113.7"), nil, proxies, "203.0.113.7"},
		{"ipv6 with port unbracketed is garbage", "10.0.0.1:1", lines("203.0.113.7, 2001:db8::7:80:1:2:3:4:5"), nil, proxies, "10.0.0.1"},
		{"bracketed ipv4 hop is garbage", "10.0.0.1:1", lines("[203.0.113.7]"), nil, proxies, "10.0.0.1"},
		{"xff preferred to forwarded", "10.0.0.1:1", lines("203.0.113.7"), lines("for=198.51.100.1"), proxies, "203.0.113.7"},
		{"empty xff falls back to forwarded", "10.0.0.1:1", lines(" , "), lines("for=198.51.100.1"), proxies, "198.51.100.1"},

		// Forwarded (RFC 7239).
		{"forwarded", "10.0.0.1:1", nil, lines("for=203.0.113.7"), proxies, "203.0.113.7"},
		{"forwarded with other pairs", "10.0.0.1:1", nil, lines("by=10.0.0.1;for=203.0.113.7;proto=https;host=example.com"), proxies, "203.0.113.7"},
		{"forwarded case-insensitive name", "10.0.0.1:1", nil, lines("For=203.0.113.7"), proxies, "203.0.113.7"},
		{"forwarded quoted ipv4", "10.0.0.1:1", nil, lines(`for="203.0.113.7"`), proxies, "203.0.113.7"},
		{"forwarded quoted ipv4 with port", "10.0.0.1:1", nil, lines(`for="203.0.113.7:4711"`), proxies, "203.0.113.7"},
		{"forwarded bracketed ipv6 with port", "10.0.0.1:1", nil, lines(`for="[2001:db8::1]:4711"`), proxies, "2001:db8::1"},
		{"forwarded bracketed ipv6", "10.0.0.1:1", nil, lines(`for="[2001:db8::1]"`), proxies, "2001:db8::1"},
		{"forwarded obfuscated port", "10.0.0.1:1", nil, lines(`for="[2001:db8::1]:_abc"`), proxies, "2001:db8::1"},
		{"forwarded escaped quoted string", "10.0.0.1:1", nil, lines(`for="\203.0.113.7"`), proxies, "203.0.113.7"},
		{"forwarded spoofed", "10.0.0.1:1", nil, lines("for=1.2.3.4, for=203.0.113.7"), proxies, "203.0.113.7"},
		{"forwarded spoofed over lines", "10.0.0.1:1", nil, lines("for=1.2.3.4", "for=203.0.113.7;proto=http"), proxies, "203.0.113.7"},
		{"forwarded several proxies", "10.0.0.1:1", nil, lines(`for=6.6.6.6, for=203.0.113.7;by=10.0.0.3, for="[2001:db8:ffff::9]", for=10.0.0.2`), proxies, "203.0.113.7"},
		{"forwarded comma inside quotes", "10.0.0.1:1", nil, lines(`for=203.0.113.7;x="a, for=1.2.3.4"`), proxies, "203.0.113.7"},
		{"forwarded unclosed quote from client", "10.0.0.1:1", nil, lines(`for="1.2.3.4, for=203.0.113.7`), proxies, "203.0.113.7"},
		{"forwarded unknown", "10.0.0.1:1", nil, lines("for=unknown"), proxies, "10.0.0.1"},
		{"forwarded obfuscated", "10.0.0.1:1", nil, lines("for=203.0.113.7, for=_hidden, for=10.0.0.2"), proxies, "10.0.0.2"},
		{"forwarded element without for", "10.0.0.1:1", nil, lines("for=203.0.113.7, proto=https"), proxies, "10.0.0.1"},
		{"forwarded duplicate for", "10.0.0.1:1", nil, lines("for=6.6.6.6;for=203.0.113.7"), proxies, "10.0.0.1"},
		{"forwarded empty for", "10.0.0.1:1", nil, lines("for="), proxies, "10.0.0.1"},
		{"forwarded empty elements", "10.0.0.1:1", nil, lines(" , for=203.0.113.7 ,, "), proxies, "203.0.113.7"},
		{"forwarded ipv4-mapped", "10.0.0.1:1", nil, lines(`for="[::ffff:203.0.113.7]"`), proxies, "203.0.113.7"},
		{"forwarded all trusted", "10.0.0.1:1", nil, lines("for=10.0.0.3, for=10.0.0.2"), proxies, "10.0.0.3"},
	}
	for _, tt := range tests {
		r := ipRequest(tt.remote, tt.xff, tt.fwd)
		got, ok := policy.ClientIP(r, tt.trusted)
		if tt.want == "" {
			if ok {
				t.Errorf("%s: ClientIP = %v, true; want false", tt.name, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tt.want) {
			t.Errorf("%s: ClientIP(RemoteAddr %q, X-Forwarded-For %q, Forwarded %q) = %v, %v; want %s",
				tt.name, tt.remote, tt.xff, tt.fwd, got, ok, tt.want)
		}
	}
}

// TestClientIPLongChain: a hostile client's huge X-Forwarded-For costs a
// scan, and the answer is still the address the proxy appended.
func TestClientIPLongChain(t *testing.T) {
	spoof := strings.Repeat("10.1.2.3, ", 100_000)
	for _, tt := range []struct {
		name     string
		xff, fwd []string
	}{
		{"xff", []string{spoof + "203.0.113.7"}, nil},
		{"forwarded", nil, []string{strings.ReplaceAll(spoof, "10.", "for=10.") + "for=203.0.113.7"}},
	} {
		r := ipRequest("10.0.0.1:1", tt.xff, tt.fwd)
		if got, ok := policy.ClientIP(r, proxies); !ok || got != netip.MustParseAddr("203.0.113.7") {
			t.Errorf("%s: ClientIP = %v, %v; want 203.0.113.7", tt.name, got, ok)
		}
		allocs := testing.AllocsPerRun(10, func() { policy.ClientIP(r, proxies) })
		if allocs > 0 {
			t.Errorf("%s: ClientIP allocates %v times", tt.name, allocs)
		}
	}
}

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "1.2.3.4, 203.0.113.7", "")
	f.Add("10.0.0.1:1", "", `for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`)
	f.Add("[2001:db8:ffff::1]:1", "2001:db8::7\n::ffff:10.0.0.3", "")
	f.Add("192.168.1.5:80", " ,unknown, 203.0.113.7:80,", "for=_hidden")
	f.Add("203.0.113.9:1", "1.2.3.4", "for=1.2.3.4")
	f.Add("10.0.0.1:1", "", `for="\"1.2.3.4\", for=\\`)
	f.Add("[fe80::1%eth0]:1", "[fe80::2%en0]:3", "")
	f.Add("127.0.0.1", "fe80::1%25, [::]:0", `FOR="[::ffff:1.2.3.4]"`)
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		var xl, fl []string
		if xff != "" {
			xl = strings.Split(xff, "\n")
		}
		if fwd != "" {
			fl = strings.Split(fwd, "\n")
		}
		r := ipRequest(remote, xl, fl)
		peer, peerOK := policy.ClientIP(r, nil)
		addr, ok := policy.ClientIP(r, proxies)
		if ok != peerOK {
			t.Fatalf("ok = %v with trusted proxies, %v without", ok, peerOK)
		}
		if a, err := netip.ParseAddrPort(remote); err == nil && (!peerOK || peer != a.Addr().WithZone("").Unmap()) {
			t.Fatalf("RemoteAddr %q: ClientIP without trust = %v, %v; want %v", remote, peer, peerOK, a.Addr())
		}
		if !ok {
			return
		}
		for _, a := range []netip.Addr{peer, addr} {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("ClientIP returned %v (valid %v, zone %q)", a, a.IsValid(), a.Zone())
			}
		}
		if addr != peer && !mentions(xff+"\n"+fwd, addr) {
			t.Fatalf("ClientIP = %v: neither the peer %v nor in the headers %q, %q", addr, peer, xff, fwd)
		}
	})
}

// mentions reports whether the text of header values holds a, written in
// any form: it tries every run of characters between delimiters, and the
// part of it before a port.
func mentions(text string, a netip.Addr) bool {
	text = strings.ReplaceAll(text, `\`, "")
	for tok := range strings.FieldsFuncSeq(text, func(r rune) bool { return strings.ContainsRune(",; \t\n\"[]=", r) }) {
		cands := []string{tok}
		if strings.Count(tok, ":") == 1 {
			cands = append(cands, tok[:strings.IndexByte(tok, ':')])
		}
		for _, c := range cands {
			if b, err := netip.ParseAddr(c); err == nil && b.WithZone("").Unmap() == a {
				return true
			}
		}
	}
	return false
}

// ExampleClientIP: behind one trusted proxy, the client's own
// X-Forwarded-For entry does not pick its bucket.
func ExampleClientIP() {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:43210"                         // the proxy
	r.Header.Set("X-Forwarded-For", "1.2.3.4, 203.0.113.7") // "1.2.3.4" is the client's own
	fmt.Println(policy.ClientIP(r, trusted))
	// Output: 203.0.113.7 true
}
