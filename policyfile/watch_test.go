package policyfile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/policyfile"
)

const (
	oldRules = "rules:\n  - {name: old, key: ip, limit: 100, period: 1m}\n"
	newRules = "rules:\n  - {name: new, key: ip, limit: 100, period: 1m}\n"
)

// watch starts p.Watch until t ends.
func watch(t *testing.T, p *policyfile.Policy, interval time.Duration, hup <-chan os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p.Watch(ctx, interval, hup)
}

// TestWatchPoll: polling reloads a file changed in place or replaced by
// rename (as editors and Kubernetes ConfigMaps do), and logs the reload.
func TestWatchPoll(t *testing.T) {
	path := writeFile(t, oldRules)
	log := &logs{}
	reports := make(chan bool, 10)
	p := open(t, path, log, policyfile.WithReloadReport(func(err error) { reports <- err == nil }))
	watch(t, p, 20*time.Millisecond, nil)

	rewrite(t, path, newRules)
	waitRule(t, p, "new")
	if p.Engine().Rules().Rule("old") != nil {
		t.Error("the old rule is still there after the reload")
	}
	e := log.waitLog(t, "config reloaded")
	if e["level"] != "INFO" || e["config"] != path || e["trigger"] != "file changed" || e["rules"] != 1.0 {
		t.Errorf("reload log %v, want INFO, config %s, trigger file changed, rules 1", e, path)
	}
	if ok := <-reports; !ok {
		t.Error("the reload was reported as failed")
	}

	tmp := filepath.Join(filepath.Dir(path), ".sluice.yaml.tmp")
	rewrite(t, tmp, "rules:\n  - {name: renamed, key: ip, limit: 100, period: 1m}\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitRule(t, p, "renamed")
}

// TestWatchSignal: a signal reloads the file, without polling.
func TestWatchSignal(t *testing.T) {
	path := writeFile(t, oldRules)
	log := &logs{}
	p := open(t, path, log)
	hup := make(chan os.Signal)
	watch(t, p, 0, hup)
	rewrite(t, path, newRules)
	hup <- syscall.SIGHUP // received: the watcher is reloading
	waitRule(t, p, "new")
	if e := log.waitLog(t, "config reloaded"); e["trigger"] != "signal" {
		t.Errorf("reload log %v, want trigger signal", e)
	}
}

// TestWatchAfterOpen: a change made between Open and Watch is reloaded:
// Watch compares with the file as Open read it, not as it is when Watch
// starts.
func TestWatchAfterOpen(t *testing.T) {
	path := writeFile(t, oldRules)
	p := open(t, path, nil)
	rewrite(t, path, newRules)
	watch(t, p, 20*time.Millisecond, nil)
	waitRule(t, p, "new")
}

// TestWatchRejected: a file that fails to load is logged, one line per
// error with its line, reported as a failed reload, and the old rules
// keep serving.
func TestWatchRejected(t *testing.T) {
	path := writeFile(t, oldRules)
	log := &logs{}
	reports := make(chan error, 10)
	p := open(t, path, log, policyfile.WithReloadReport(func(err error) { reports <- err }))
	watch(t, p, 20*time.Millisecond, nil)
	rewrite(t, path, "rules:\n  - name: new\n    perod: 1s\n    limit: 5\n    algorithm: token-bucket\n")
	if err := <-reports; err == nil || !strings.Contains(err.Error(), `unknown field "perod"`) {
		t.Fatalf("an invalid file was reported with %v, want the error naming perod", err)
	}
	// The report comes first, from Reload; then Watch logs.
	var es []map[string]any
	waitFor(t, func() error {
		if es = log.entries(t, "config rejected; the old rules keep serving"); len(es) < 2 {
			return fmt.Errorf("rejection logged %v, want a line per error (the misspelled period, and the algorithm)", es)
		}
		return nil
	})
	var sawLine bool
	for _, e := range es {
		msg, _ := e["error"].(string)
		if e["level"] != "ERROR" || e["trigger"] != "file changed" || !strings.Contains(msg, path+":") {
			t.Errorf("rejection log %v, want ERROR, trigger file changed, and the file's line", e)
		}
		sawLine = sawLine || strings.Contains(msg, `rules "new": unknown field "perod" (did you mean "period"?)`) && strings.Contains(msg, path+":3)")
	}
	if !sawLine {
		t.Errorf("no rejection line names perod on line 3: %v", es)
	}
	if p.Engine().Rules().Rule("old") == nil || p.Engine().Rules().Rule("new") != nil {
		t.Error("a rejected file changed the rules")
	}
	if len(log.entries(t, "config reloaded")) != 0 {
		t.Error("a rejected file was logged as reloaded")
	}
}

// TestWatchCompileFails: a file that loads but whose rules do not compile
// with the Policy's rule options (here WithKey names a rule the new file
// renamed) is rejected like an invalid file: the error is logged and
// reported, and the old rules keep serving.
func TestWatchCompileFails(t *testing.T) {
	path := writeFile(t, oldRules)
	log := &logs{}
	reports := make(chan bool, 1)
	user := policy.WithKey("old", func(*http.Request) (string, bool) { return "", false })
	p := open(t, path, log, policyfile.WithRuleOptions(user), policyfile.WithReloadReport(func(err error) { reports <- err == nil }))
	rewrite(t, path, newRules)
	err := p.Reload()
	if err == nil || !strings.Contains(err.Error(), `WithKey names rule "old"`) {
		t.Fatalf("Reload: %v, want WithKey's rule missing", err)
	}
	if ok := <-reports; ok {
		t.Error("a reload that failed was reported as successful")
	}
	hup := make(chan os.Signal)
	watch(t, p, 0, hup)
	hup <- syscall.SIGHUP
	if ok := <-reports; ok {
		t.Error("a file the rules refuse was reported as reloaded")
	}
	e := log.waitLog(t, "config rejected; the old rules keep serving")
	if msg, _ := e["error"].(string); e["trigger"] != "signal" || !strings.Contains(msg, `WithKey names rule "old"`) {
		t.Errorf("log %v, want the rejection with the compile error", e)
	}
	if p.Engine().Rules().Rule("old") == nil {
		t.Error("the old rules stopped serving")
	}
}

// TestRejected: Rejected logs a config.Errors one line per error, and any
// other error on one line.
func TestRejected(t *testing.T) {
	log := &logs{}
	_, err := policyfile.Open(writeFile(t, "rules:\n  - {name: a, perod: 1s}\n  - {name: b, limt: 1}\n"))
	policyfile.Rejected(log.logger(), "f.yaml", "signal", err)
	policyfile.Rejected(log.logger(), "f.yaml", "signal", errors.New("plain"))
	es := log.entries(t, "config rejected")
	if len(es) < 3 || es[len(es)-1]["error"] != "plain" {
		t.Errorf("logged %v, want a line per error of the file, then plain", es)
	}
	for _, e := range es[:len(es)-1] {
		if msg, _ := e["error"].(string); strings.Contains(msg, "\n") {
			t.Errorf("a line holds several errors: %q", msg)
		}
	}
}

// TestWatchTooLarge: a policy file grown over config.MaxFileBytes (here a
// sparse terabyte, which reading would take the process's memory) is
// rejected unread like an invalid one, by Reload and by Watch: the error
// names the file and the limit, and the old rules keep serving; the next
// valid file is loaded.
func TestWatchTooLarge(t *testing.T) {
	path := writeFile(t, oldRules)
	log := &logs{}
	reports := make(chan bool, 10)
	p := open(t, path, log, policyfile.WithReloadReport(func(err error) { reports <- err == nil }))
	grow := func() {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 40); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	grow()
	if err := p.Reload(); !errors.Is(err, config.ErrFileTooLarge) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Reload of a terabyte: %v, want config.ErrFileTooLarge naming the file", err)
	}
	<-reports
	if p.Engine().Rules().Rule("old") == nil {
		t.Fatal("a rejected file changed the rules")
	}

	rewrite(t, path, oldRules)
	if err := p.Reload(); err != nil || !<-reports {
		t.Fatalf("Reload of the old rules again: %v", err)
	}
	watch(t, p, 20*time.Millisecond, nil)
	grow()
	if ok := <-reports; ok {
		t.Fatal("a file over the limit was reported as reloaded")
	}
	waitFor(t, func() error {
		for _, e := range log.entries(t, "config rejected; the old rules keep serving") {
			if msg, _ := e["error"].(string); e["trigger"] == "file changed" && strings.Contains(msg, "over the limit of 4194304 bytes (4 MiB)") {
				return nil
			}
		}
		return fmt.Errorf("no rejection of the file changed names the limit: %v", log.entries(t, "config rejected; the old rules keep serving"))
	})
	if p.Engine().Rules().Rule("old") == nil {
		t.Fatal("a rejected file changed the rules")
	}
	// By rename: truncating a terabyte in place leaves an empty file a
	// poll may read, and rightly reject, before the new rules are in.
	replace(t, path, newRules)
	if ok := <-reports; !ok {
		t.Fatal("the valid file after the large one was not reloaded")
	}
	if p.Engine().Rules().Rule("new") == nil {
		t.Error("the valid file after the large one did not replace the rules")
	}
}
