package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/config"
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
	if code, _, body := d.post(t, "/v1/check", `{"rule":"old","key":"k"}`); code != 400 || !strings.Contains(body, "old") {
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
	entry := d.waitLog(t, "config reloaded")
	if entry["config"] != cfg || entry["rules"] != 1.0 || entry["level"] != "INFO" {
		t.Errorf("reload log %v, want level INFO, config %s and rules 1", entry, cfg)
	}
	if entry := d.waitLog(t, "redis section changed"); entry["level"] != "WARN" {
		t.Errorf("redis change log %v, want level WARN", entry)
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
		if strings.Contains(e, "perod: unknown field (did you mean period?)") && strings.Contains(e, cfg+":3)") {
			break
		}
	}
	if code, _, body := d.post(t, "/v1/check", `{"rule":"old","key":"k"}`); code != 200 {
		t.Errorf("old rule after a rejected file: %d %s, want 200", code, body)
	}
	if code, _, _ := d.post(t, "/v1/check", `{"rule":"new","key":"k"}`); code != 400 {
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

// lineWriter hands each write, one log record, to its channel.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// TestWatchConfigApplyFails: a file that loads but that apply refuses is
// reported and logged as rejected, not as reloaded.
func TestWatchConfigApplyFails(t *testing.T) {
	cfg := writeFile(t, oldRules)
	f, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(lineWriter, 10)
	log := slog.New(slog.NewJSONHandler(lines, nil))
	hup := make(chan os.Signal, 1)
	reports := make(chan bool, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	apply := func(*config.File) error { return errors.New("apply refused it") }
	watchConfig(ctx, f, 0, hup, apply, func(ok bool) { reports <- ok }, log)
	hup <- syscall.SIGHUP
	select {
	case ok := <-reports:
		if ok {
			t.Error("a file apply refused was reported as a successful reload")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload reported within 10s of SIGHUP")
	}
	select {
	case line := <-lines:
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatal(err)
		}
		if entry["msg"] != "config rejected; the old rules keep serving" || entry["error"] != "apply refused it" || entry["trigger"] != "signal" {
			t.Errorf("log %v, want the rejection with apply's error", entry)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing logged within 10s of the reload")
	}
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
		d.waitLog(t, "config reloaded")
	}
	reload(newRules)
	// A warning about the first reload is logged before the second
	// reload starts: once that is logged, the first had none.
	reload(oldRules)
	if d.logged("redis section changed") {
		t.Error("a reload that changed only the rules warned that the redis section changed")
	}
	reload("redis: {timeout: 2s}\n" + newRules)
	if entry := d.waitLog(t, "redis section changed"); entry["level"] != "WARN" {
		t.Errorf("redis change log %v, want level WARN", entry)
	}
}

// TestFingerprint: a touch leaves the policy file's fingerprint as it
// was, so it reloads nothing; a change of content, even of the same size,
// changes it.
func TestFingerprint(t *testing.T) {
	cfg := writeFile(t, oldRules)
	before := fingerprintOf(cfg)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(cfg, later, later); err != nil {
		t.Fatal(err)
	}
	if after := fingerprintOf(cfg); after != before {
		t.Errorf("touch changed the fingerprint: %+v, then %+v", before, after)
	}
	if err := os.WriteFile(cfg, []byte(newRules), 0o600); err != nil { // same size
		t.Fatal(err)
	}
	if after := fingerprintOf(cfg); after == before {
		t.Error("new content of the same size left the fingerprint as it was")
	}
	if missing := fingerprintOf(cfg + ".gone"); missing.err == "" || missing == before {
		t.Errorf("a missing file's fingerprint %+v, want one with an error", missing)
	}
}
