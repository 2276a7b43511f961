package section

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func valid() Section {
	return Section{
		Title:   "T",
		Command: "go run ./x",
		Notes:   []string{"n"},
		Tables:  []Table{{Caption: "c", Header: []string{"a", "b"}, Rows: [][]string{{"1", "2"}}}},
		Charts:  []Chart{{Name: "c-1", Title: "t", Unit: "u", Bars: []Bar{{Label: "x", Value: 1}}}},
		Goals:   []Goal{{Goal: "g", Target: "t", Measured: "m", Met: true}},
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Section)
		want string // "" for valid
	}{
		{"valid", func(*Section) {}, ""},
		{"no title", func(s *Section) { s.Title = "" }, "no title"},
		{"no command", func(s *Section) { s.Command = "" }, "no command"},
		{"no header", func(s *Section) { s.Tables[0].Header = nil }, "no header"},
		{"short row", func(s *Section) { s.Tables[0].Rows[0] = []string{"1"} }, "row 1 has 1 cells"},
		{"bad chart name", func(s *Section) { s.Charts[0].Name = "../x" }, "has name"},
		{"dot name", func(s *Section) { s.Charts[0].Name = ".x" }, "has name"},
		{"twice", func(s *Section) { s.Charts = append(s.Charts, s.Charts[0]) }, "used twice"},
		{"no bars", func(s *Section) { s.Charts[0].Bars = nil }, "no bars"},
		{"negative", func(s *Section) { s.Charts[0].Bars[0].Value = -1 }, "finite number"},
		{"NaN", func(s *Section) { s.Charts[0].Bars[0].Value = math.NaN() }, "finite number"},
		{"infinite", func(s *Section) { s.Charts[0].Bars[0].Value = math.Inf(1) }, "finite number"},
		{"goal without target", func(s *Section) { s.Goals[0].Target = "" }, "needs goal, target and measured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			tt.mod(&s)
			err := s.Check()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid section: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestWriteRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.json")
	s := valid()
	if err := s.Write(p); err != nil {
		t.Fatal(err)
	}
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != s.Title || got.Charts[0].Bars[0].Value != 1 || !got.Goals[0].Met || got.Tables[0].Rows[0][1] != "2" {
		t.Errorf("read back %+v, wrote %+v", got, s)
	}
	bad := valid()
	bad.Title = ""
	if err := bad.Write(p); err == nil {
		t.Error("Write of a section without a title succeeded")
	}
}

func TestReadRejects(t *testing.T) {
	tests := []struct{ name, json, want string }{
		{"unknown field", `{"title":"t","command":"c","chart":[]}`, "unknown field"},
		{"not JSON", `{"title":`, "unexpected EOF"},
		{"invalid", `{"title":"t"}`, "no command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.json")
			if err := os.WriteFile(p, []byte(tt.json), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %v, want one naming the file and containing %q", err, tt.want)
			}
		})
	}
}
