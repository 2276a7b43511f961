package server

import (
	"net/http"
	"strconv"
	"testing"
)

// shedYAML is a rule that sheds by class, whose critical class keeps 20%
// of its 10 requests a minute and whose high class 10% (so the lowest,
// default, may use 7, high 8, critical 10), and a rule that does not.
const shedYAML = `
rules:
  - name: checkout
    key: request
    algorithm: fixed_window
    limit: 10
    period: 1m
    priority:
      reserve: {critical: 20%, high: 10%}
  - {name: plain, key: request, algorithm: fixed_window, limit: 1, period: 1m}
`

// TestShed: a check names its class (any other, or none, is the lowest);
// the answer names the class it was decided in, its numbers are the
// class's share of the pool, and a check denied as one of a class below
// the highest says "shed":true. A shed check is a 429 with Retry-After
// as every denial is: the service reports, it does not shed (503 is its
// own failure). A denial of the highest class is an ordinary one, a
// rule that does not shed by class ignores the class, and a batch's
// results each say their own.
func TestShed(t *testing.T) {
	f := setup(t, shedYAML)
	policies := func(limit, remaining int, allowed bool, retry string) string {
		a := "true"
		if !allowed {
			a = "false"
		}
		return `"policies":[{"name":"checkout-1m","allowed":` + a + `,"limit":` + strconv.Itoa(limit) + `,"remaining":` + strconv.Itoa(remaining) + `,"reset_after_ms":60000,"retry_after_ms":` + retry + `}]}`
	}
	for i, tt := range []struct {
		body  string
		code  int
		want  string
		retry string // Retry-After
	}{
		// The lowest class: 7 of the 10.
		{`{"rule":"checkout","key":"t","cost":7}`, 200,
			`{"allowed":true,"limit":7,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0,"class":"default",` + policies(7, 0, true, "0"), ""},
		{`{"rule":"checkout","key":"t"}`, 429,
			`{"allowed":false,"limit":7,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"class":"default","shed":true,` + policies(7, 0, false, "60000"), "60"},
		{`{"rule":"checkout","key":"t","class":"bulk"}`, 429,
			`{"allowed":false,"limit":7,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"class":"default","shed":true,` + policies(7, 0, false, "60000"), "60"},
		// high: 8 of the 10, one of them left.
		{`{"rule":"checkout","key":"t","class":"high"}`, 200,
			`{"allowed":true,"limit":8,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0,"class":"high",` + policies(8, 0, true, "0"), ""},
		{`{"rule":"checkout","key":"t","class":"high"}`, 429,
			`{"allowed":false,"limit":8,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"class":"high","shed":true,` + policies(8, 0, false, "60000"), "60"},
		// critical: the whole pool, and then an ordinary denial.
		{`{"rule":"checkout","key":"t","class":"critical","cost":2}`, 200,
			`{"allowed":true,"limit":10,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0,"class":"critical",` + policies(10, 0, true, "0"), ""},
		{`{"rule":"checkout","key":"t","class":"critical"}`, 429,
			`{"allowed":false,"limit":10,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"class":"critical",` + policies(10, 0, false, "60000"), "60"},
		// Another key has a pool of its own.
		{`{"rule":"checkout","key":"u"}`, 200,
			`{"allowed":true,"limit":7,"remaining":6,"reset_after_ms":60000,"retry_after_ms":0,"class":"default",` + policies(7, 6, true, "0"), ""},
		// A rule without priority: no class, and its denial is no shed.
		{`{"rule":"plain","key":"t","class":"critical"}`, 200,
			`{"allowed":true,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0,"policies":[{"name":"plain-1m","allowed":true,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":0}]}`, ""},
		{`{"rule":"plain","key":"t","class":"critical"}`, 429,
			`{"allowed":false,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"policies":[{"name":"plain-1m","allowed":false,"limit":1,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000}]}`, "60"},
		// A class that is a string with escapes: encoding/json's path.
		{`{"rule":"checkout","key":"u","class":"hi\u0067h"}`, 200,
			`{"allowed":true,"limit":8,"remaining":6,"reset_after_ms":60000,"retry_after_ms":0,"class":"high",` + policies(8, 6, true, "0"), ""},
		{`{"rule":"checkout","key":"u","class":1}`, 400,
			errBody("BAD_REQUEST", `field "class" must be a string, got number`), ""},
		// A cost the class may never spend, which a higher class may.
		{`{"rule":"checkout","key":"v","cost":8}`, 400,
			errBody("BAD_REQUEST", `rule "checkout": invalid cost: cost 8 is more than class "default" may use of limit checkout-1m (7 of 10); a higher class may send it`), ""},
		{`{"rule":"checkout","key":"u","clas":"high"}`, 400,
			errBody("BAD_REQUEST", `unknown field "clas"; accepted fields: "rule", "key", "cost", "class"`), ""},
	} {
		w := f.post("/v1/check", tt.body)
		if w.Code != tt.code || body(w) != tt.want || w.Header().Get("Retry-After") != tt.retry {
			t.Errorf("check %d %s: %d Retry-After %q %s\nwant %d Retry-After %q %s", i, tt.body, w.Code, w.Header().Get("Retry-After"), body(w), tt.code, tt.retry, tt.want)
		}
	}

	// A batch: 200 whatever the outcome, each result its own class and
	// shed. high is shed for key t; plain admits key v, but the batch is
	// one decision, denied.
	w := f.post("/v1/check/batch", `{"checks":[{"rule":"checkout","key":"t","class":"high"},{"rule":"plain","key":"v"}]}`)
	want := `{"results":[` +
		`{"allowed":false,"limit":8,"remaining":0,"reset_after_ms":60000,"retry_after_ms":60000,"class":"high","shed":true,` + policies(8, 0, false, "60000") + `,` +
		`{"allowed":false,"limit":1,"remaining":1,"reset_after_ms":0,"retry_after_ms":60000,"policies":[{"name":"plain-1m","allowed":true,"limit":1,"remaining":1,"reset_after_ms":0,"retry_after_ms":0}]}` +
		`],"allowed":false}`
	if w.Code != http.StatusOK || body(w) != want {
		t.Errorf("batch: %d %s\nwant 200 %s", w.Code, body(w), want)
	}
}
