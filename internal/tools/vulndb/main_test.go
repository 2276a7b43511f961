package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBuildFrom: OSV files become the v1 layout govulncheck reads: every
// entry under ID/ as it was, each module indexed with its entries (a
// report naming a module twice listed once), db.json at the newest of
// the snapshot and the entries.
func TestBuildFrom(t *testing.T) {
	src := t.TempDir()
	entries := map[string]string{
		"GO-2026-0001": `{"id":"GO-2026-0001","modified":"0001-01-01T00:00:00Z","affected":[{"package":{"name":"stdlib"}},{"package":{"name":"stdlib"}},{"package":{"name":"golang.org/x/net"}}]}`,
		"GO-2026-0002": `{"id":"GO-2026-0002","modified":"2027-01-02T03:04:05Z","affected":[{"package":{"name":"golang.org/x/net"}}]}`,
	}
	for id, body := range entries {
		if err := os.WriteFile(filepath.Join(src, id+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "db")
	snapshot := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	if err := buildFrom(src, snapshot, "v0.0.0-test", out); err != nil {
		t.Fatal(err)
	}
	for id, body := range entries {
		if got, err := os.ReadFile(filepath.Join(out, "ID", id+".json")); err != nil || string(got) != body {
			t.Errorf("ID/%s.json: %q, %v; want the OSV file as it was", id, got, err)
		}
	}
	var modules []struct {
		Path  string
		Vulns []struct{ ID string }
	}
	readJSON(t, filepath.Join(out, "index", "modules.json"), &modules)
	got := map[string][]string{}
	for _, m := range modules {
		for _, v := range m.Vulns {
			got[m.Path] = append(got[m.Path], v.ID)
		}
	}
	want := map[string][]string{"golang.org/x/net": {"GO-2026-0001", "GO-2026-0002"}, "stdlib": {"GO-2026-0001"}}
	if !reflect.DeepEqual(got, want) || modules[0].Path != "golang.org/x/net" {
		t.Errorf("modules.json: %v; want %v, sorted by path", got, want)
	}
	var db struct{ Modified time.Time }
	readJSON(t, filepath.Join(out, "index", "db.json"), &db)
	if want := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC); !db.Modified.Equal(want) {
		t.Errorf("db.json modified %v, want the newest entry's %v", db.Modified, want)
	}

	// A file whose name is not its entry's ID is refused.
	if err := os.WriteFile(filepath.Join(src, "GO-2026-0003.json"), []byte(`{"id":"GO-2026-0004"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := buildFrom(src, snapshot, "v0.0.0-test2", out); err == nil || !strings.Contains(err.Error(), `the entry's id is "GO-2026-0004"`) {
		t.Errorf("a misnamed entry: %v, want an error naming its id", err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestCheck: a called vulnerability fails unless accepted; one in
// imported code that is never called is only counted.
func TestCheck(t *testing.T) {
	stream := `{"config":{"scanner_version":"v1.9.0","go_version":"go1.26.8","db":"file:///db"}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http"}]}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"CanonicalHeaderKey"},{"module":"example.com/m","package":"example.com/m","function":"main","position":{"filename":"main.go","line":7}}]}}
{"finding":{"osv":"GO-2026-0002","trace":[{"module":"golang.org/x/net","version":"v0.60.0"}]}}
`
	dir := t.TempDir()
	accept := func(lines string) string {
		path := filepath.Join(dir, "accepted.txt")
		if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tt := range []struct {
		name, accepted string
		fails          bool
		says           string
	}{
		{"not accepted", "# none\n", true, "NOT ACCEPTED"},
		{"accepted", "GO-2026-0001 stdlib of go1.26.8  # until the toolchain moves\n", false, "accepted: stdlib of go1.26.8"},
		{"stale acceptance", "GO-2026-0001 why\nGO-2025-9999 gone\n", false, "GO-2025-9999 is accepted in"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := check(strings.NewReader(stream), &out, accept(tt.accepted))
			if (err != nil) != tt.fails || !strings.Contains(out.String(), tt.says) ||
				!strings.Contains(out.String(), "net/http.CanonicalHeaderKey, reached from main.go:7") ||
				!strings.Contains(out.String(), "1 vulnerabilities the code calls") || !strings.Contains(out.String(), "1 more in imported code") {
				t.Errorf("check: %v\n%s\nwant failing %v, saying %q", err, out.String(), tt.fails, tt.says)
			}
		})
	}
	var out strings.Builder
	if err := check(strings.NewReader(""), &out, accept("")); err == nil {
		t.Error("an empty stream (govulncheck failed) passed")
	}
	if err := check(strings.NewReader(stream), &out, accept("GO-2026-0001\n")); err == nil || !strings.Contains(err.Error(), "want an OSV ID") {
		t.Errorf("an acceptance without a reason: %v, want refused", err)
	}
}
