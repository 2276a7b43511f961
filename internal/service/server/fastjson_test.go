package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// stdDecode decodes data as decode's encoding/json path does.
func stdDecode(data []byte) (checkRequest, error) {
	var c checkRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, err
	}
	if dec.More() {
		return c, fmt.Errorf("more")
	}
	return c, nil
}

// same reports whether two decoded checks are equal.
func same(a, b checkRequest) bool {
	return a.Rule == b.Rule && a.Key == b.Key && a.Class == b.Class && (a.Cost == nil) == (b.Cost == nil) && (a.Cost == nil || *a.Cost == *b.Cost)
}

// TestDecodeFast: the fast path decodes the usual bodies, exactly as
// encoding/json does, and declines everything it does not decode the
// same way.
func TestDecodeFast(t *testing.T) {
	for _, tc := range []struct {
		body string
		fast bool // the fast path takes it
	}{
		{`{"rule":"api","key":"10.0.0.1"}`, true},
		{`{"key":"k","rule":"r","cost":3}`, true},
		{` { "rule" : "r" , "key" : "ü k" , "cost" : -0 } ` + "\n", true},
		{`{"rule":"r","cost":0}`, true},
		{`{}`, true},
		{`{"rule":"r","key":""}`, true},
		{`{"rule":"r","cost":-4}`, true},
		{`{"rule":"r","key":"k","class":"critical"}`, true},
		{`{"class":"","rule":"r"}`, true},
		{`{"rule":"r","class":"a","class":"b"}`, false},
		{`{"rule":"r","class":1}`, false},
		{`{"rule":"r","Class":"critical"}`, false},
		{`{"rule":"a\"b"}`, false},
		{`{"rule":"a\u0041"}`, false},
		{`{"RULE":"r"}`, false},
		{`{"rule":"r","rule":"s"}`, false},
		{`{"rule":"r","extra":1}`, false},
		{`{"rule":null}`, false},
		{`{"rule":"r","cost":1.0}`, false},
		{`{"rule":"r","cost":1e2}`, false},
		{`{"rule":"r","cost":01}`, false},
		{`{"rule":"r","cost":99999999999999999999}`, false},
		{`{"rule":"r","cost":"1"}`, false},
		{`{"rule":"r",}`, false},
		{`{"rule":"r"} {}`, false},
		{`{"rule":"r"`, false},
		{`["rule"]`, false},
		{`{"rule":"r` + "\t" + `"}`, false},
	} {
		var got checkRequest
		ok := got.DecodeFast([]byte(tc.body))
		want, err := stdDecode([]byte(tc.body))
		if ok != tc.fast {
			t.Errorf("%s: fast path %v, want %v", tc.body, ok, tc.fast)
		}
		if ok && (err != nil || !same(got, want)) {
			t.Errorf("%s: fast %+v, encoding/json %+v (%v)", tc.body, got, want, err)
		}
	}
}

// TestDecodeFastRandom: bodies made of random pieces decode on the fast
// path only as encoding/json decodes them.
func TestDecodeFastRandom(t *testing.T) {
	pieces := []string{`{`, `}`, `"rule"`, `"key"`, `"cost"`, `"class"`, `"x"`, `:`, `,`, ` `, `"a b"`, `"\n"`, `12`, `-3`, `0`, `1.5`, `null`, `"é"`, `"Rule"`, `[`, `]`, `true`}
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for range 20000 {
		var b strings.Builder
		if r.IntN(2) == 0 {
			// Mostly well formed: an object of fields.
			b.WriteString("{")
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(pieces[2+r.IntN(5)] + ":" + pieces[10+r.IntN(len(pieces)-10)])
			}
			b.WriteString("}")
		} else {
			for range 1 + r.IntN(10) {
				b.WriteString(pieces[r.IntN(len(pieces))])
			}
		}
		data := []byte(b.String())
		var got checkRequest
		if !got.DecodeFast(data) {
			continue
		}
		fast++
		want, err := stdDecode(data)
		if err != nil || !same(got, want) {
			t.Fatalf("%s: fast %+v, encoding/json %+v (%v)", data, got, want, err)
		}
	}
	if fast < 1000 {
		t.Errorf("the fast path took %d of 20000 bodies; the test exercises too little of it", fast)
	}
}

// TestAppendCheckResult: the fast encoder writes exactly what
// encoding/json writes, for results of every shape, and declines names
// encoding/json would escape.
func TestAppendCheckResult(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	names := []string{"search", "a-b_c.d", "x y", "", "quo\"te", "<b>", "a&b", "ü", "tab\t", "back\\slash"}
	encoded := 0
	for range 5000 {
		st := func() state {
			if r.IntN(4) == 0 {
				return state{}
			}
			l, rem, reset := r.IntN(1000), r.IntN(1000)-10, int64(r.IntN(100000))
			return state{Limit: &l, Remaining: &rem, ResetAfterMS: &reset}
		}
		c := checkResult{Allowed: r.IntN(2) == 0, state: st(), RetryAfterMS: int64(r.IntN(5000)), ShadowDenied: r.IntN(5) == 0, Degraded: r.IntN(5) == 0, Shed: r.IntN(5) == 0}
		if r.IntN(3) == 0 {
			c.Class = names[r.IntN(len(names))]
		}
		if r.IntN(10) > 0 {
			c.Policies = make([]policyResult, r.IntN(4))
			for i := range c.Policies {
				c.Policies[i] = policyResult{Name: names[r.IntN(len(names))], Allowed: r.IntN(2) == 0, state: st(), RetryAfterMS: int64(r.IntN(5000))}
			}
		}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		got, ok := appendCheckResult(nil, &c)
		plain := plainASCII(c.Class)
		for _, p := range c.Policies {
			plain = plain && plainASCII(p.Name)
		}
		if ok != plain {
			t.Fatalf("%+v: fast encoder took it %v, want %v", c, ok, plain)
		}
		if ok {
			encoded++
			if !bytes.Equal(got, want) {
				t.Fatalf("fast  %s\njson  %s", got, want)
			}
		}
	}
	if encoded < 1000 {
		t.Errorf("the fast encoder took %d of 5000 results", encoded)
	}
}
