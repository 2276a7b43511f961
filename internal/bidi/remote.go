package bidi

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// undefinedValue is JavaScript's undefined, which JSON lacks.
type undefinedValue struct{}

// undefined is what jsonValue returns for JavaScript's undefined.
var undefined = undefinedValue{}

// remoteValue is a BiDi RemoteValue, the serialized form of a
// JavaScript value: {"type": "number", "value": 42}.
type remoteValue struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// jsonValue returns the value a BiDi RemoteValue stands for, as
// JSON.parse(JSON.stringify(v)) would give it: numbers, strings,
// booleans, null, arrays and objects of them (a Date as its ISO string,
// a Set as an array, a Map as an object of its keys as strings);
// undefined, at the top, as undefined. An object's undefined properties
// are left out and an array's undefined elements, NaN and the
// infinities are null, as JSON.stringify does; a value of a type JSON
// cannot hold (a function, a node, a bigint, a symbol) is an error
// naming it.
func jsonValue(raw json.RawMessage) (any, error) {
	var r remoteValue
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("javascript: a remote value %.100s: %w", raw, err)
	}
	switch r.Type {
	case "undefined":
		return undefined, nil
	case "null":
		return nil, nil
	case "string", "boolean", "date":
		var v any
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return nil, fmt.Errorf("javascript: a %s %.100s: %w", r.Type, r.Value, err)
		}
		return v, nil
	case "number":
		var f float64
		if json.Unmarshal(r.Value, &f) == nil {
			return f, nil
		}
		var s string // "NaN", "-0", "Infinity", "-Infinity"
		if json.Unmarshal(r.Value, &s) != nil {
			return nil, fmt.Errorf("javascript: a number %.100s", r.Value)
		}
		if s == "-0" {
			return math.Copysign(0, -1), nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f, nil
		}
		return nil, nil // JSON.stringify(NaN) is null
	case "array", "set":
		var elems []json.RawMessage
		if err := json.Unmarshal(r.Value, &elems); err != nil {
			return nil, fmt.Errorf("javascript: an %s %.100s: %w", r.Type, r.Value, err)
		}
		out := make([]any, 0, len(elems))
		for _, e := range elems {
			v, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			if v == undefined {
				v = nil
			}
			out = append(out, v)
		}
		return out, nil
	case "object", "map":
		var pairs [][2]json.RawMessage
		if err := json.Unmarshal(r.Value, &pairs); err != nil {
			return nil, fmt.Errorf("javascript: an %s %.100s: %w", r.Type, r.Value, err)
		}
		out := make(map[string]any, len(pairs))
		for _, kv := range pairs {
			var key string
			if json.Unmarshal(kv[0], &key) != nil { // a map's key: a remote value
				k, err := jsonValue(kv[0])
				if err != nil {
					return nil, err
				}
				key = fmt.Sprint(k)
			}
			v, err := jsonValue(kv[1])
			if err != nil {
				return nil, err
			}
			if v != undefined {
				out[key] = v
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("javascript: a %s has no JSON value", r.Type)
}
