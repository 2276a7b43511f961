package httpjson

import "testing"

// TestLoneSurrogate: a lone surrogate escape is found at its offset; a
// whole pair, an escaped backslash before "ud800", other escapes and the
// text outside strings are not.
func TestLoneSurrogate(t *testing.T) {
	for _, tt := range []struct {
		json string
		want int
	}{
		{`{"key":"a\ud800b"}`, 9},
		{`{"key":"\udc00"}`, 8},
		{`{"key":"\ud800\u0041"}`, 8},
		{`{"key":"\ud800"}`, 8},
		{`{"key":"\ud83d\ude00"}`, -1},
		{`{"key":"\\ud800"}`, -1},
		{`{"key":"\"\ud800"}`, 10},
		{`{"key":"\u00e9\n\t"}`, -1},
		{`{"key":"plain"}`, -1},
		{`{"k\udbff":"x"}`, 3},
		{`{"key":"\ud8`, -1}, // malformed: the decoder says so
	} {
		if got := loneSurrogate([]byte(tt.json)); got != tt.want {
			t.Errorf("loneSurrogate(%s) = %d, want %d", tt.json, got, tt.want)
		}
	}
}
