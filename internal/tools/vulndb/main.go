// Command vulndb lets govulncheck run without vuln.go.dev, which this
// project's machines cannot reach: the Go module proxy serves the Go
// vulnerability database's source, the module golang.org/x/vulndb, whose
// data/osv directory holds every report as OSV JSON. make vuln uses it in
// two steps.
//
//	go run ./internal/tools/vulndb build -version v0.0.0-... -out DIR
//
// downloads golang.org/x/vulndb at that version (go mod download, through
// GOPROXY) and writes the database in the layout govulncheck reads from
// -db file://DIR (https://go.dev/security/vuln/database#api, v1):
//
//	DIR/index/db.json        {"modified": ...}
//	DIR/index/modules.json   [{"path": ..., "vulns": [{"id": ..., "modified": ...}]}]
//	DIR/ID/GO-YYYY-NNNN.json one OSV entry each, as in data/osv
//
// The index leaves out each vuln's "fixed" (govulncheck uses it only to
// skip fetching entries a module's version is past; without it every
// entry of the module is read and judged by its ranges, never less
// strictly). The reports' own modified times are those of the module's
// source (0001-01-01 in data/osv, which the deploy step stamps); db.json
// takes the time of the module version, the snapshot's date. A DIR whose
// index/version.txt already names the version is left as it is.
//
//	govulncheck -format json -db file://DIR ./... | go run ./internal/tools/vulndb check -accept FILE
//
// reads govulncheck's JSON stream, prints each vulnerability that the
// code reaches (a finding whose trace starts at a function) with its
// module, fixed version and the frame that calls it, and fails when one
// is not listed in FILE. FILE has one OSV ID a line, then why it is
// accepted; # starts a comment. Findings in modules or packages the code
// imports but never calls are counted, not failed.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

const module = "golang.org/x/vulndb"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		fs := flag.NewFlagSet("build", flag.ExitOnError)
		version := fs.String("version", "", "version of "+module+" to build the database from (required)")
		out := fs.String("out", "", "directory to write the database to (required)")
		_ = fs.Parse(os.Args[2:])
		if *version == "" || *out == "" {
			fmt.Fprintln(os.Stderr, "vulndb build: -version and -out are required")
			os.Exit(2)
		}
		err = build(*version, *out)
	case "check":
		fs := flag.NewFlagSet("check", flag.ExitOnError)
		accept := fs.String("accept", "", "file of accepted OSV IDs, one a line (required)")
		_ = fs.Parse(os.Args[2:])
		if *accept == "" {
			fmt.Fprintln(os.Stderr, "vulndb check: -accept is required")
			os.Exit(2)
		}
		err = check(os.Stdin, os.Stdout, *accept)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vulndb build -version V -out DIR | vulndb check -accept FILE < govulncheck.json")
	os.Exit(2)
}

// downloaded is what go mod download -json reports of a module.
type downloaded struct {
	Dir   string
	Info  string
	Error string
}

// build writes the v1 database of module at version into out.
func build(version, out string) error {
	stamp := filepath.Join(out, "index", "version.txt")
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == version {
		return nil // built before
	}
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	var d downloaded
	if jerr := json.Unmarshal(raw, &d); jerr == nil && d.Error != "" {
		return fmt.Errorf("go mod download %s@%s: %s", module, version, d.Error)
	}
	if err != nil {
		return fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var info struct{ Time time.Time }
	if b, err := os.ReadFile(d.Info); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	return buildFrom(filepath.Join(d.Dir, "data", "osv"), info.Time, version, out)
}

// buildFrom writes the v1 database of the OSV files in src into out,
// stamped with version; snapshot is the time of the source.
func buildFrom(src string, snapshot time.Time, version, out string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("%s holds no OSV files (*.json): %v", src, err)
	}

	// Written beside out and renamed into place, so that an interrupted
	// build never leaves a half database that the stamp would vouch for.
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "ID"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tmp, "index"), 0o755); err != nil {
		return err
	}
	type vuln struct {
		ID       string    `json:"id"`
		Modified time.Time `json:"modified"`
	}
	type mod struct {
		Path  string `json:"path"`
		Vulns []vuln `json:"vulns"`
	}
	modules := map[string]*mod{}
	modified := snapshot.UTC()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e struct {
			ID       string    `json:"id"`
			Modified time.Time `json:"modified"`
			Affected []struct {
				Package struct {
					Name string `json:"name"`
				} `json:"package"`
			} `json:"affected"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" || filepath.Base(f) != e.ID+".json" {
			return fmt.Errorf("%s: the entry's id is %q; want the file's name", f, e.ID)
		}
		if e.Modified.After(modified) {
			modified = e.Modified
		}
		seen := map[string]bool{}
		for _, a := range e.Affected {
			p := a.Package.Name
			if p == "" || seen[p] {
				continue
			}
			seen[p] = true
			if modules[p] == nil {
				modules[p] = &mod{Path: p}
			}
			modules[p].Vulns = append(modules[p].Vulns, vuln{ID: e.ID, Modified: e.Modified})
		}
		if err := os.WriteFile(filepath.Join(tmp, "ID", e.ID+".json"), data, 0o644); err != nil {
			return err
		}
	}
	list := make([]*mod, 0, len(modules))
	for _, m := range modules {
		sort.Slice(m.Vulns, func(i, j int) bool { return m.Vulns[i].ID < m.Vulns[j].ID })
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	for name, v := range map[string]any{"modules.json": list, "db.json": map[string]time.Time{"modified": modified}} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tmp, "index", name), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "index", "version.txt"), []byte(version+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("vulndb: %d reports of %s, %d modules, in %s\n", len(files), version, len(list), out)
	return nil
}

// message is the part of govulncheck's JSON stream that check reads.
type message struct {
	Config *struct {
		ScannerVersion string     `json:"scanner_version"`
		DB             string     `json:"db"`
		DBLastModified *time.Time `json:"db_last_modified"`
		GoVersion      string     `json:"go_version"`
	} `json:"config"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
			Receiver string `json:"receiver"`
			Position *struct {
				Filename string `json:"filename"`
				Line     int    `json:"line"`
			} `json:"position"`
		} `json:"trace"`
	} `json:"finding"`
}

// check reads govulncheck's JSON from r and fails on a called
// vulnerability not listed in the file accept.
func check(r io.Reader, w io.Writer, accept string) error {
	accepted, err := readAccepted(accept)
	if err != nil {
		return err
	}
	type called struct {
		module, version, fixed, symbol, at string
	}
	calls := map[string]*called{}
	imported := map[string]bool{}
	dec := json.NewDecoder(r)
	messages := 0
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		messages++
		if c := m.Config; c != nil {
			mod := "unknown"
			if c.DBLastModified != nil {
				mod = c.DBLastModified.Format(time.DateOnly)
			}
			fmt.Fprintf(w, "govulncheck %s, %s, database %s (%s)\n", c.ScannerVersion, c.GoVersion, c.DB, mod)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		if f.Trace[0].Function == "" {
			imported[f.OSV] = true
			continue
		}
		top, entry := f.Trace[0], f.Trace[len(f.Trace)-1]
		sym := top.Package + "." + top.Function
		if top.Receiver != "" {
			sym = top.Package + "." + strings.TrimPrefix(top.Receiver, "*") + "." + top.Function
		}
		at := entry.Package + "." + entry.Function
		if p := entry.Position; p != nil {
			at = fmt.Sprintf("%s:%d (%s)", p.Filename, p.Line, at)
		}
		if c := calls[f.OSV]; c != nil && c.at+c.symbol <= at+sym {
			continue // one example trace, the same from run to run
		}
		calls[f.OSV] = &called{module: top.Module, version: top.Version, fixed: f.FixedVersion, symbol: sym, at: at}
	}
	if messages == 0 {
		return errors.New("govulncheck wrote nothing; see its error above")
	}
	ids := make([]string, 0, len(calls))
	for id := range calls {
		ids = append(ids, id)
		delete(imported, id)
	}
	slices.Sort(ids)
	var bad []string
	for _, id := range ids {
		c := calls[id]
		verdict := "NOT ACCEPTED"
		if _, ok := accepted[id]; ok {
			verdict = "accepted: " + accepted[id]
		} else {
			bad = append(bad, id)
		}
		fixed := c.fixed
		if fixed == "" {
			fixed = "no fix"
		}
		fmt.Fprintf(w, "%s  %s@%s, fixed in %s: %s, reached from %s\n    %s\n", id, c.module, c.version, fixed, c.symbol, c.at, verdict)
	}
	for id := range accepted {
		if calls[id] == nil {
			fmt.Fprintf(w, "%s is accepted in %s but no longer found: remove it\n", id, accept)
		}
	}
	fmt.Fprintf(w, "%d vulnerabilities the code calls (%d accepted), %d more in imported code it does not call\n", len(ids), len(ids)-len(bad), len(imported))
	if len(bad) > 0 {
		return fmt.Errorf("the code calls %d vulnerabilities not accepted in %s: %s; upgrade the module (or Go), or accept each with a reason", len(bad), accept, strings.Join(bad, ", "))
	}
	return nil
}

// readAccepted returns the IDs of the accept file and their reasons.
func readAccepted(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasPrefix(fields[0], "GO-") || len(fields) < 2 {
			return nil, fmt.Errorf("%s:%d: want an OSV ID (GO-YYYY-NNNN) and the reason it is accepted, got %q", path, n, sc.Text())
		}
		out[fields[0]] = strings.Join(fields[1:], " ")
	}
	return out, sc.Err()
}
