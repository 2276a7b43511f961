package config

import (
	"reflect"
	"testing"

	"github.com/sluice-go/sluice/policy"
)

// TestPriority: a rule's priority section gives its policy.Priority: the
// classes of reserve in the order the file lists them (highest first,
// not sorted), each share a fraction, the from key in canonical form,
// the routes in order with their patterns normalized, the default and
// the status as written; what the section leaves out is the zero value,
// which the engine reads as its default. Every such file compiles.
func TestPriority(t *testing.T) {
	const rule = "rules:\n  - name: api\n    algorithm: concurrency\n    limit: 100\n    priority:\n"
	tests := []struct {
		name, priority string
		want           policy.Priority
	}{
		{"every field", `
      from: header:x-priority
      reserve:
        critical: 20%
        high: 12.5%
        elevated: 5%
      routes:
        "POST /api/checkout": critical
        "GET  /api/health": high
        /api/batch/: bulk
      default: bulk
      status: 429
`, policy.Priority{
			From:    &policy.Key{Source: policy.KeyHeader, Name: "X-Priority"},
			Classes: []policy.Class{{Name: "critical", Reserve: 0.2}, {Name: "high", Reserve: 0.125}, {Name: "elevated", Reserve: 0.05}},
			Routes: []policy.PriorityRoute{
				{Match: "POST /api/checkout", Class: "critical"},
				{Match: "GET /api/health", Class: "high"},
				{Match: "/api/batch/", Class: "bulk"},
			},
			Default: "bulk",
			Status:  429,
		}},
		{"reserve alone", "      reserve: {critical: 20%}\n",
			policy.Priority{Classes: []policy.Class{{Name: "critical", Reserve: 0.2}}}},
		{"from a query parameter", "      from: query:prio\n      reserve: {gold: 30%, silver: 30%}\n",
			policy.Priority{From: &policy.Key{Source: policy.KeyQuery, Name: "prio"}, Classes: []policy.Class{{Name: "gold", Reserve: 0.3}, {Name: "silver", Reserve: 0.3}}}},
		{"routes to the lowest class by its default name", "      reserve: {critical: 1%}\n      routes: {/export: default}\n      status: 503\n",
			policy.Priority{Classes: []policy.Class{{Name: "critical", Reserve: 0.01}}, Routes: []policy.PriorityRoute{{Match: "/export", Class: "default"}}, Status: 503}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("p.yaml", []byte(rule+tt.priority))
			if err != nil {
				t.Fatal(err)
			}
			got := f.Rules[0].Priority
			if got == nil || !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("Priority = %+v, want %+v", got, tt.want)
			}
			set, err := f.Compile()
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if r := set.Rule("api"); r.Priority == nil || !reflect.DeepEqual(*r.Priority, tt.want) {
				t.Errorf("compiled Priority = %+v, want %+v", r.Priority, tt.want)
			}
		})
	}
}
