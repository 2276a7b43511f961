//go:build e2e

package deploy_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unit is a systemd unit file: each section's directives, in order, a
// directive given several times keeping every value.
type unit map[string]map[string][]string

// parseUnit reads the unit file at file.
func parseUnit(t *testing.T, file string) unit {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	for i, l := range strings.Split(string(raw), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = strings.Trim(l, "[]")
			u[section] = map[string][]string{}
		case section == "":
			t.Fatalf("%s:%d: a directive outside a section", file, i+1)
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("%s:%d: %q is not Key=value", file, i+1, l)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// one returns the single value of a directive of [Service], failing t if
// it is not given exactly once.
func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	v := u["Service"][key]
	if len(v) != 1 {
		t.Fatalf("sluice.service: %s= given %d times, want once", key, len(v))
	}
	return v[0]
}

// environment returns the variables the unit's Environment= lines set.
func (u unit) environment(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range u["Service"]["Environment"] {
		for _, kv := range strings.Fields(line) {
			k, v, ok := strings.Cut(strings.Trim(kv, `"`), "=")
			if !ok {
				t.Fatalf("Environment=%s: %q is not NAME=value", line, kv)
			}
			env[k] = v
		}
	}
	return env
}

// hardening is what the unit must say to run sluice with the least it
// needs; systemd-analyze security scores what is left.
var hardening = map[string]string{
	"DynamicUser":             "yes",
	"NoNewPrivileges":         "yes",
	"CapabilityBoundingSet":   "",
	"AmbientCapabilities":     "",
	"ProtectSystem":           "strict",
	"ProtectHome":             "yes",
	"PrivateTmp":              "yes",
	"PrivateDevices":          "yes",
	"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
	"RestrictNamespaces":      "yes",
	"MemoryDenyWriteExecute":  "yes",
	"LockPersonality":         "yes",
	"SystemCallArchitectures": "native",
	"ProtectKernelTunables":   "yes",
	"ProtectKernelModules":    "yes",
	"ProtectControlGroups":    "yes",
}

// TestSystemdUnit: sluice.service starts serve with only variables it
// reads, reloads with SIGHUP, lets the drain finish before systemd's
// SIGKILL, is hardened, passes systemd-analyze verify (with ExecStart
// pointing at the binary TestMain built), and scores at most 2.0 in
// systemd-analyze security (0 is the best, 10 the worst).
func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, "systemd/sluice.service")
	fs := serveFlags(t)
	exec := strings.Fields(u.one(t, "ExecStart"))
	if len(exec) < 2 || exec[1] != "serve" {
		t.Fatalf("ExecStart=%s: want <binary> serve", strings.Join(exec, " "))
	}
	fs.checkArgs(t, "ExecStart", exec[2:])
	env := u.environment(t)
	fs.checkEnv(t, "Environment=", env)
	if r := u.one(t, "ExecReload"); !regexp.MustCompile(`^/bin/kill -(HUP|SIGHUP|s HUP) \$MAINPID$`).MatchString(r) {
		t.Errorf("ExecReload=%s: want /bin/kill -HUP $MAINPID", r)
	}
	drain, err := time.ParseDuration(env["SLUICE_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("SLUICE_SHUTDOWN_TIMEOUT: %v", err)
	}
	stop, err := time.ParseDuration(u.one(t, "TimeoutStopSec"))
	if err != nil || stop <= drain {
		t.Errorf("TimeoutStopSec=%s is not above SLUICE_SHUTDOWN_TIMEOUT=%v (%v)", u.one(t, "TimeoutStopSec"), drain, err)
	}
	if s := u.one(t, "KillSignal"); s != "SIGTERM" {
		t.Errorf("KillSignal=%s, want SIGTERM (the drain)", s)
	}
	for k, want := range hardening {
		if got := u["Service"][k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if slices.Contains(u["Service"]["ProcSubset"], "pid") {
		t.Error("ProcSubset=pid hides /proc/sys/net/core/somaxconn: Go's listeners would get a backlog of 128")
	}
	if f := u["Service"]["SystemCallFilter"]; len(f) == 0 || f[0] != "@system-service" {
		t.Errorf("SystemCallFilter=%q: want @system-service first", f)
	}

	// systemd-analyze on a copy that runs the binary built here.
	analyze := need(t, "systemd-analyze", "systemd")
	raw, err := os.ReadFile("systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "sluice.service")
	if err := os.WriteFile(copied, []byte(strings.ReplaceAll(string(raw), "ExecStart="+exec[0], "ExecStart="+sluiceBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runErr(time.Minute, analyze, "verify", copied); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out := run(t, time.Minute, analyze, "security", "--offline=true", copied)
	m := regexp.MustCompile(`Overall exposure level for sluice.service: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no exposure level:\n%s", out)
	}
	if score, _ := strconv.ParseFloat(m[1], 64); score > 2.0 {
		t.Errorf("systemd-analyze security: exposure %s, want at most 2.0:\n%s", m[1], out)
	}
	t.Logf("systemd-analyze security: exposure %s", m[1])
}

// TestSystemdService runs sluice as the unit runs it (its ExecStart and
// Environment=, the listeners moved to free loopback ports, the policy in
// a temporary /etc/sluice, polling off so that only ExecReload's SIGHUP
// reloads): it serves the ConfigMap's policy, and SIGHUP makes it read a
// changed file.
func TestSystemdService(t *testing.T) {
	u := parseUnit(t, "systemd/sluice.service")
	p := loadKube(t).sluicePod(t)
	exec := strings.Fields(u.one(t, "ExecStart"))
	env := u.environment(t)
	etc := t.TempDir()
	file := filepath.Join(etc, filepath.Base(env["SLUICE_CONFIG"]))
	if err := os.WriteFile(file, []byte(p.cm.Data[p.policy]), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	env["SLUICE_CONFIG"], env["SLUICE_LISTEN"], env["SLUICE_GRPC_LISTEN"] = file, httpAddr, freeAddr(t)
	env["SLUICE_RELOAD_INTERVAL"] = "0"
	base := "http://" + httpAddr
	proc := startSluice(t, exec[1:], env, base+"/healthz")
	httpAddr = env["SLUICE_LISTEN"] // moved if taken
	base = "http://" + httpAddr
	if code, body := get(base + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, _ := check(base, "hup", "x"); code != http.StatusBadRequest {
		t.Fatalf("/v1/check of a rule not yet added: %d, want 400", code)
	}
	added := strings.TrimRight(p.cm.Data[p.policy], "\n") + "\n  - name: hup\n    key: global\n    group: hup\n    limit: 1\n    period: 1h\n"
	if err := os.WriteFile(file, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	// Polling is off: without the signal the change is not seen.
	time.Sleep(1500 * time.Millisecond)
	if code, _ := check(base, "hup", "x"); code != http.StatusBadRequest {
		t.Fatalf("the file was reloaded without SIGHUP (SLUICE_RELOAD_INTERVAL=0): %d", code)
	}
	if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if code, body := check(base, "hup", "x"); code != http.StatusOK {
			return fmt.Errorf("after SIGHUP the added rule is not served: %d %s\n%s", code, body, proc.out)
		}
		return nil
	})
}
