package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
)

// FuzzParse checks that Parse never panics, that every error is an Errors
// of entries that say where and what, and that every File it accepts holds
// only limits the Limiter accepts and compiles into a policy.RuleSet.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed files: %v", err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tt := range errorTests {
		f.Add([]byte(tt.file))
	}
	for _, s := range []string{
		"rules:\n  - name: a\n   limit: 1\n",
		"rules: [{name: a, limit: 1, period: 1s, <<: {cost: 2}}]\n",
		"x-a: &a {limit: 1, period: 1s}\nrules:\n  - {name: a, <<: *a}\n  - {name: b, match: /b, <<: [*a, {cost: 1}]}\n",
		"rules:\n  - name: a\n    limit: 9223372036854775807\n    period: 2562047h\n    burst: 9223372036854775807\n",
		"rules:\n  - {name: a, match: 'GET example.com/{x...}', limit: 1, period: 1s}\n  - {name: b, match: '/{$}', limit: 1, period: 1s}\n",
		"rules:\n  - {name: a, key: 'header:\\u00e9', limit: 1, period: 1µs}\n",
		"\xef\xbb\xbfrules: [{name: a, limit: 1, period: 1s}]",
		"rules: !!map {}\n",
		"rules:\n  - ? [a]\n    : b\n",
		"%YAML 1.1\n---\nrules: []\n",
		"http: {ipv6_prefix: 56}\nrules:\n  - {name: a, limit: 1, period: 1s}\n  - {name: b, group: api, limit: 1, period: 1s}\n  - {name: c, group: api, match: /a/{x}, limit: 1, period: 1s}\n  - {name: d, match: /{y}/b, limit: 1, period: 1s}\n",
		"rules:\n  - {name: a, group: '', limit: 1, period: 1s}\n  - {name: b, group: [x], match: /b, limit: 1, period: 1s}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data)
		if err != nil {
			if file != nil {
				t.Errorf("a File with an error")
			}
			errs, ok := err.(Errors)
			if !ok {
				t.Fatalf("error %T is not Errors: %v", err, err)
			}
			if len(errs) == 0 {
				t.Fatalf("empty Errors")
			}
			for _, e := range errs {
				if e == nil || e.Line < 0 || e.Field == "" && e.Msg == "" || e.File != "fuzz.yaml" {
					t.Errorf("bad error entry %#v", e)
				}
				// Parse's own checks passed a file that policy.Compile
				// refuses: the two disagree.
				if e != nil && strings.HasPrefix(e.Msg, "policy: ") {
					t.Errorf("the file passed config's checks and not Compile's: %v", e)
				}
			}
			var one *Error
			if !errors.As(err, &one) {
				t.Errorf("errors.As(%T, *Error) failed", err)
			}
			return
		}
		if file == nil || len(file.Rules) == 0 {
			t.Fatalf("no error and no rules: %+v", file)
		}
		if len(file.Lines) != len(file.Rules) {
			t.Errorf("%d lines for %d rules", len(file.Lines), len(file.Rules))
		}
		if file.HTTP.IPv6Prefix < 1 || file.HTTP.IPv6Prefix > 128 {
			t.Errorf("IPv6Prefix = %d", file.HTTP.IPv6Prefix)
		}
		// A file Parse accepts compiles again, as its callers do.
		if _, err := file.Compile(); err != nil {
			t.Errorf("Compile: %v", err)
		}
		for _, r := range file.Rules {
			lists := [][]sluice.Limit{r.Limits}
			for _, p := range r.Plans {
				lists = append(lists, p.Limits)
				if len(p.Keys)+len(p.Prefixes) == 0 {
					t.Errorf("rule %s: plan %s has no keys", r.Name, p.Name)
				}
				for _, k := range p.Keys {
					if got := r.LimitsFor(k); len(got) == 0 {
						t.Errorf("rule %s: LimitsFor(%q) is empty", r.Name, k)
					}
				}
			}
			for _, ls := range lists {
				if len(ls) == 0 {
					t.Errorf("rule %s has an empty limit list", r.Name)
				}
				for _, l := range ls {
					if err := l.Validate(); err != nil {
						t.Errorf("rule %s: %v", r.Name, err)
					}
					if l.Name == "" {
						t.Errorf("rule %s: unnamed limit %v", r.Name, l)
					}
					if r.Cost < 1 || r.Cost > l.Capacity() {
						t.Errorf("rule %s: cost %d with %v", r.Name, r.Cost, l)
					}
				}
			}
		}
	})
}
