package admin

import "testing"

// TestAddressKey: the failures of an IPv4 address are its own; those of
// an IPv6 address are its /64's (one host often holds the whole prefix),
// an IPv4-mapped one counts as the IPv4 address, and a zone is dropped.
func TestAddressKey(t *testing.T) {
	for _, c := range []struct{ remote, want string }{
		{"192.0.2.1:4000", "192.0.2.1"},
		{"192.0.2.1:4001", "192.0.2.1"},
		{"[2001:db8:1:2::1]:4000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::9]:4000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:4000", "2001:db8:1:3::/64"},
		{"[::ffff:192.0.2.1]:4000", "192.0.2.1"},
		{"[fe80::1%eth0]:4000", "fe80::/64"},
		{"@", "@"}, // a unix socket's, no address
	} {
		if got := addressKey(c.remote); got != c.want {
			t.Errorf("addressKey(%q) = %q, want %q", c.remote, got, c.want)
		}
	}
}
