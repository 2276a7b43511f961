//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/service/admin"
)

const dashboardRules = `
rules:
  - {name: login, match: POST /login, key: ip, algorithm: sliding_window, limit: 20, period: 1m}
  - {name: search, match: GET /search, key: header:X-Api-Key, limit: 50, period: 1s, burst: 100}
  - {name: export, match: GET /export, key: header:X-Api-Key, algorithm: gcra, limit: 2, period: 1s, shadow: true}
`

// getBody returns the status and body of GET url.
func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// servingAttr returns the attribute name of d's "serving" log line.
func servingAttr(t *testing.T, d *daemon, name string) string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, line := range d.lines {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == "serving" {
			return fmt.Sprint(entry[name])
		}
	}
	t.Fatalf("no serving line: %v", d.lines)
	return ""
}

// TestDashboardListeners: the dashboard on --listen (the default), on a
// listener of its own, or off; the decision API is unchanged by each.
func TestDashboardListeners(t *testing.T) {
	cfg := writeFile(t, dashboardRules)
	for _, tc := range []struct {
		name  string
		args  []string
		attr  string // the serving line's dashboard attribute, "" any address
		onAPI bool   // whether the main listener serves the dashboard
	}{
		{"default", nil, "on --listen", true},
		{"own listener", []string{"--dashboard-listen", "127.0.0.1:0"}, "", false},
		{"off", []string{"--dashboard=false"}, "off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startServe(t, nil, append([]string{"--config", cfg}, tc.args...)...)
			attr := servingAttr(t, d, "dashboard")
			if tc.attr != "" && attr != tc.attr {
				t.Fatalf("serving line: dashboard=%s, want %s", attr, tc.attr)
			}
			if code, _, body := d.post(t, "/v1/check", `{"rule":"login","key":"192.0.2.1"}`); code != 200 {
				t.Errorf("the API: %d %s", code, body)
			}
			code, body := getBody(t, d.base+"/")
			if onPage := code == 200 && strings.Contains(body, "<title>sluice dashboard</title>"); onPage != tc.onAPI {
				t.Errorf("GET / on --listen: %d %.100s; want the page: %v", code, body, tc.onAPI)
			}
			if !tc.onAPI && (code != 404 || !strings.Contains(body, `"NOT_FOUND"`)) {
				t.Errorf("GET / on --listen without the dashboard: %d %.200s, want the API's JSON 404", code, body)
			}
			code, body = getBody(t, d.base+admin.TopPath)
			if (code == 200) != tc.onAPI {
				t.Errorf("GET %s on --listen: %d %.200s", admin.TopPath, code, body)
			}
			if tc.attr == "" {
				base := "http://" + attr
				if code, body := getBody(t, base+"/"); code != 200 || !strings.Contains(body, "sluice dashboard") {
					t.Errorf("GET / on --dashboard-listen: %d %.100s", code, body)
				}
				code, body := getBody(t, base+admin.StatsPath)
				var st admin.Stats
				if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Rules) != 3 {
					t.Errorf("GET %s on --dashboard-listen: %d %.300s", admin.StatsPath, code, body)
				}
				if code, body := getBody(t, base+"/v1/check"); code != 404 || !strings.Contains(body, "the dashboard serves") {
					t.Errorf("GET /v1/check on --dashboard-listen: %d %.200s, want the dashboard's 404", code, body)
				}
			}
		})
	}
}

// TestDashboardShowKeys: --show-keys lists keys in the clear.
func TestDashboardShowKeys(t *testing.T) {
	d := startServe(t, []string{"SLUICE_SHOW_KEYS=true"}, "--config", writeFile(t, dashboardRules))
	for range 3 {
		d.post(t, "/v1/check", `{"rule":"export","key":"key-b"}`)
	}
	_, body := getBody(t, d.base+admin.TopPath)
	var top admin.TopKeys
	if err := json.Unmarshal([]byte(body), &top); err != nil || top.Masked || len(top.Keys) != 1 || top.Keys[0] != (admin.TopKey{Rule: "export", Key: "key-b", Denied: 1, Shadow: true}) {
		t.Errorf("top with SLUICE_SHOW_KEYS=true: %s", body)
	}
}

func TestDashboardUsage(t *testing.T) {
	_, stderr, code := runBinary(t, nil, "serve", "--config", writeFile(t, dashboardRules), "--dashboard=false", "--dashboard-listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "--dashboard-listen") || !strings.Contains(stderr, "--dashboard=false") {
		t.Errorf("--dashboard=false with --dashboard-listen: exit %d, %s; want 2 naming both", code, stderr)
	}
}

// TestDashboardEnvoy: with an envoyproxy/ratelimit config, the rules are
// its descriptors' limits, named as their decisions are counted, and a
// reload rejected is listed with its error.
func TestDashboardEnvoy(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "edge.yaml")
	write := func(s string) {
		if err := os.WriteFile(conf, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	d := startServe(t, nil, "--config", dir, "--reload-interval", "100ms")
	for range 4 {
		body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`
		if code, _, resp := d.post(t, "/json", body); code != 200 && code != 429 {
			t.Fatalf("/json: %d %s", code, resp)
		}
	}
	write("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")
	var st admin.Stats
	waitUntil(t, 15*time.Second, func() error {
		_, body := getBody(t, d.base+admin.StatsPath)
		st = admin.Stats{}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return err
		}
		if len(st.Reloads) == 0 || len(st.Series.Rules) == 0 || len(st.Top.Keys) == 0 {
			return fmt.Errorf("no reload, series or top yet: %.400s", body)
		}
		return nil
	})
	if st.Config.Kind != "envoy" || !strings.Contains(st.Config.Summary, "envoy config: 1 domain") {
		t.Errorf("config %+v", st.Config)
	}
	if len(st.Rules) != 1 || st.Rules[0].Match != "edge: remote_address" || st.Rules[0].Limits[0].Limit != 2 || st.Rules[0].Limits[0].Period != "minute" {
		t.Fatalf("rules %+v, want edge's remote_address limit", st.Rules)
	}
	if s := st.Series.Rules[0]; s.Rule != st.Rules[0].Name || s.Total["allowed"] != 2 || s.Total["denied"] != 2 {
		t.Errorf("series %+v, want rule %s with 2 allowed and 2 denied", s, st.Rules[0].Name)
	}
	if k := st.Top.Keys[0]; k.Rule != st.Rules[0].Name || k.Denied != 2 || !strings.HasPrefix(k.Key, "#") {
		t.Errorf("top %+v, want the descriptor masked, 2 denied", st.Top.Keys)
	}
	if r := st.Reloads[0]; r.Outcome != "rejected" || !strings.Contains(r.Error, "fortnight") {
		t.Errorf("reloads %+v, want the rejection naming fortnight", st.Reloads)
	}
}
