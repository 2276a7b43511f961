//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	oldRules = "rules:\n  - {name: old, key: ip, limit: 100, period: 1m}\n"
	newRules = "rules:\n  - {name: new, key: ip, limit: 100, period: 1m}\n"
)

// wantSwapped waits for the new rule to answer, then checks that the old
// one is unknown.
func (d *daemon) wantSwapped(t *testing.T) {
	t.Helper()
	d.waitRule(t, "new")
	if code, _, body := d.post(t, "/v1/check", `{"rule":"old","key":"192.0.2.1"}`); code != 400 || !strings.Contains(body, "old") {
		t.Errorf("old rule after reload: %d %s, want 400", code, body)
	}
}

func TestReloadOnChange(t *testing.T) {
	cfg := writeFile(t, oldRules)
	d := startServe(t, nil, "--config", cfg, "--reload-interval", "100ms")
	d.waitRule(t, "old")
	// The redis section changes too: the rules apply, with a warning.
	if err := os.WriteFile(cfg, []byte("redis: {on_error: allow}\n"+newRules), 0o600); err != nil {
		t.Fatal(err)
	}
	d.wantSwapped(t)
	// The warning comes from the reload itself, before the reload is
	// logged.
	if entry := d.waitLog(t, "redis section changed"); entry["level"] != "WARN" {
		t.Errorf("redis change log %v, want level WARN", entry)
	}
	entry := d.waitLog(t, "config reloaded")
	if entry["config"] != cfg || entry["rules"] != 1.0 || entry["level"] != "INFO" {
		t.Errorf("reload log %v, want level INFO, config %s and rules 1", entry, cfg)
	}
}

func TestReloadInvalid(t *testing.T) {
	cfg := writeFile(t, oldRules)
	d := startServe(t, nil, "--config", cfg, "--reload-interval", "100ms")
	d.waitRule(t, "old")
	if err := os.WriteFile(cfg, []byte("rules:\n  - name: new\n    perod: 1s\n    limit: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every error of the file is logged, one line each; perod is on line 3.
	for {
		entry := d.waitLog(t, "config rejected; the old rules keep serving")
		e, _ := entry["error"].(string)
		if entry["level"] != "ERROR" || !strings.Contains(e, cfg+":") {
			t.Errorf("rejection log %v, want level ERROR and an error with the file's line", entry)
		}
		if strings.Contains(e, `rules "new": unknown field "perod" (did you mean "period"?)`) && strings.Contains(e, cfg+":3)") {
			break
		}
	}
	if code, _, body := d.post(t, "/v1/check", `{"rule":"old","key":"192.0.2.1"}`); code != 200 {
		t.Errorf("old rule after a rejected file: %d %s, want 200", code, body)
	}
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"new","key":"192.0.2.1"}`); code != 400 {
		t.Errorf("rule of the rejected file: %d, want 400", code)
	}
}

func TestReloadOnSIGHUP(t *testing.T) {
	cfg := writeFile(t, oldRules)
	d := startServe(t, nil, "--config", cfg, "--reload-interval", "0")
	d.waitRule(t, "old")
	if err := os.WriteFile(cfg, []byte(newRules), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.wantSwapped(t)
	if entry := d.waitLog(t, "config reloaded"); entry["trigger"] != "signal" {
		t.Errorf("reload log %v, want trigger signal", entry)
	}
}

func TestReloadOnRename(t *testing.T) {
	cfg := writeFile(t, oldRules)
	d := startServe(t, nil, "--config", cfg, "--reload-interval", "100ms")
	d.waitRule(t, "old")
	tmp := filepath.Join(filepath.Dir(cfg), ".sluice.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(newRules), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	d.wantSwapped(t)
}

// TestReloadOnErrorFlag: --on-error overrides the store's policy, not the
// file: a reload that changes only the rules says nothing about the redis
// section, and one that changes the section still warns.
func TestReloadOnErrorFlag(t *testing.T) {
	cfg := writeFile(t, oldRules)
	d := startServe(t, nil, "--config", cfg, "--on-error", "deny", "--reload-interval", "0")
	reload := func(content string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// A reload's warning is logged before the reload is: once "config
	// reloaded" is, a reload without the warning had none.
	for _, rules := range []string{newRules, oldRules} {
		reload(rules)
		d.waitLog(t, "config reloaded")
		if d.logged("redis section changed") {
			t.Error("a reload that changed only the rules warned that the redis section changed")
		}
	}
	reload("redis: {timeout: 2s}\n" + newRules)
	if entry := d.waitLog(t, "redis section changed"); entry["level"] != "WARN" {
		t.Errorf("redis change log %v, want level WARN", entry)
	}
	d.waitLog(t, "config reloaded")
}
