package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// addressDefaults returns, from the help of sluice cmd, the environment
// variable and default of each flag whose name ends in "listen".
func addressDefaults(t *testing.T, cmd string) map[string][2]string {
	t.Helper()
	var out bytes.Buffer
	if code := Run(context.Background(), []string{cmd, "--help"}, &out, &out); code != 0 {
		t.Fatalf("sluice %s --help exited %d: %s", cmd, code, out.String())
	}
	flags := map[string][2]string{}
	re := regexp.MustCompile(`-(\S*listen) string\n[^\n]*\(env (\S+)\) \(default "([^"]*)"\)`)
	for _, m := range re.FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = [2]string{m[2], m[3]}
	}
	return flags
}

// TestListenDefaults: serve keeps the decision service's documented
// address, and proxy's default differs from every address serve listens
// on by default, so that both run on one host without flags.
func TestListenDefaults(t *testing.T) {
	serve, proxy := addressDefaults(t, "serve"), addressDefaults(t, "proxy")
	want := map[string]map[string][2]string{
		"serve": {"listen": {"SLUICE_LISTEN", "127.0.0.1:8080"}, "grpc-listen": {"SLUICE_GRPC_LISTEN", "127.0.0.1:8081"}},
		"proxy": {"listen": {"SLUICE_LISTEN", "127.0.0.1:8082"}},
	}
	for cmd, got := range map[string]map[string][2]string{"serve": serve, "proxy": proxy} {
		if len(got) != len(want[cmd]) {
			t.Errorf("sluice %s: address flags %v, want %v", cmd, got, want[cmd])
		}
		for name, w := range want[cmd] {
			if got[name] != w {
				t.Errorf("sluice %s --%s: env and default %q, want %q", cmd, name, got[name], w)
			}
		}
	}
	for name, s := range serve {
		if s[1] == proxy["listen"][1] {
			t.Errorf("proxy's --listen default %s is serve's --%s default too", proxy["listen"][1], name)
		}
	}
}
