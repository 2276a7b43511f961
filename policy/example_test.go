package policy_test

import (
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// Two groups stack: a per-address rule applies to every request, and on
// top of it the default group's most specific rule, here per API key. A
// client rotating API keys is stopped by the per-address limit; a denied
// request spends from neither.
func Example() {
	set, err := policy.Compile([]policy.Rule{
		{Name: "per-ip", Group: "ip", Limits: []sluice.Limit{sluice.PerHour(3)}},
		{Name: "api", Match: "/api/", Key: policy.Key{Source: policy.KeyHeader, Name: "X-API-Key"}, Limits: []sluice.Limit{sluice.PerHour(2)}},
		{Name: "login", Match: "POST /login", Limits: []sluice.Limit{sluice.PerHour(1)}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	e := policy.New(sluice.New(memory.New()), set)

	for _, key := range []string{"a", "a", "a", "b", "c"} {
		r := httptest.NewRequest("GET", "/api/search", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		r.Header.Set("X-API-Key", key)
		d, err := e.Decide(r)
		if err != nil {
			fmt.Println(err)
			return
		}
		var rules []string
		for _, a := range d.Applied {
			rules = append(rules, a.Rule.Name)
		}
		if d.Allowed {
			fmt.Printf("key %s: allowed under %s, %d left\n", key, strings.Join(rules, " and "), d.Result().Remaining)
		} else {
			fmt.Printf("key %s: denied by %s\n", key, strings.Join(d.Violated(), ", "))
		}
	}
	// Output:
	// key a: allowed under per-ip and api, 1 left
	// key a: allowed under per-ip and api, 0 left
	// key a: denied by api-1h
	// key b: allowed under per-ip and api, 0 left
	// key c: denied by per-ip-1h
}
