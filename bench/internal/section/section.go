// Package section is the format of a results section: one JSON file under
// bench/results/ that a producer (cmd/libbench, cmd/servicebench) writes
// and cmd/report turns into a part of BENCHMARKS.md. README.md in bench/
// documents the format; this package is its one definition.
package section

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Section is one results file.
type Section struct {
	// Title heads the section in BENCHMARKS.md.
	Title string `json:"title"`
	// Command is the command that produced the file, to reproduce it.
	Command string `json:"command"`
	// Notes are paragraphs printed under the title: conditions of the run,
	// caveats, what a figure means.
	Notes []string `json:"notes,omitempty"`
	// Tables are printed in order.
	Tables []Table `json:"tables,omitempty"`
	// Charts are drawn as SVG bar charts, one file each.
	Charts []Chart `json:"charts,omitempty"`
	// Goals are the goals this section measures; the report
	// gathers every section's goals into one table up front.
	Goals []Goal `json:"goals,omitempty"`
}

// Table is a table of text cells.
type Table struct {
	Caption string     `json:"caption"`
	Header  []string   `json:"header"`
	Rows    [][]string `json:"rows"`
}

// Chart is a horizontal bar chart.
type Chart struct {
	// Name is the file stem of the chart's SVG (letters, digits, '-',
	// '_' and '.'), unique within the section.
	Name  string `json:"name"`
	Title string `json:"title"`
	// Unit labels the values, e.g. "decisions/s" or "µs".
	Unit string `json:"unit"`
	Bars []Bar  `json:"bars"`
}

// Bar is one bar of a chart.
type Bar struct {
	Label string  `json:"label"`
	Value float64 `json:"value"`
}

// Goal is one goal of the issue, measured.
type Goal struct {
	Goal     string `json:"goal"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	// Limit says what limits the figure when the goal is not met, from a
	// profile; empty when met.
	Limit string `json:"limit,omitempty"`
}

// Read reads and checks the section file at path. Unknown fields are an
// error, so that a misspelt field is not silently dropped.
func Read(path string) (*Section, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Section
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// Write checks s and writes it to path as indented JSON.
func (s *Section) Write(path string) error {
	if err := s.Check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Check reports the first thing wrong with s: a missing title or command,
// a table row whose width is not its header's, a chart without a valid
// unique name or with no bars, a bar whose value is not a finite number
// of at least 0, a goal without its text, target or measure.
func (s *Section) Check() error {
	if s.Title == "" {
		return errors.New("section has no title")
	}
	if s.Command == "" {
		return fmt.Errorf("section %q has no command", s.Title)
	}
	for i, t := range s.Tables {
		if len(t.Header) == 0 {
			return fmt.Errorf("table %d (%q) has no header", i+1, t.Caption)
		}
		for j, r := range t.Rows {
			if len(r) != len(t.Header) {
				return fmt.Errorf("table %d (%q) row %d has %d cells, its header %d", i+1, t.Caption, j+1, len(r), len(t.Header))
			}
		}
	}
	names := map[string]bool{}
	for i, c := range s.Charts {
		if !ValidName(c.Name) {
			return fmt.Errorf("chart %d (%q) has name %q: want letters, digits, '-', '_' or '.', not starting with '.'", i+1, c.Title, c.Name)
		}
		if names[c.Name] {
			return fmt.Errorf("chart name %q is used twice", c.Name)
		}
		names[c.Name] = true
		if len(c.Bars) == 0 {
			return fmt.Errorf("chart %q has no bars", c.Name)
		}
		for _, b := range c.Bars {
			if !(b.Value >= 0) || b.Value > 1e300 {
				return fmt.Errorf("chart %q bar %q has value %s: want a finite number of at least 0", c.Name, b.Label, strconv.FormatFloat(b.Value, 'g', -1, 64))
			}
		}
	}
	for i, g := range s.Goals {
		if g.Goal == "" || g.Target == "" || g.Measured == "" {
			return fmt.Errorf("goal %d (%q) needs goal, target and measured", i+1, g.Goal)
		}
	}
	return nil
}

// ValidName reports whether name can be a chart's file stem.
func ValidName(name string) bool {
	if name == "" || name[0] == '.' || len(name) > 100 {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
