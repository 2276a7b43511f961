package server

import (
	"strconv"
)

// The JSON of POST /v1/check without reflection, for the bodies nearly
// every client sends: a fast path beside encoding/json, which still
// decodes and encodes everything else. Each produces exactly what
// encoding/json would, or declines (false) and leaves it to encoding/json;
// fastjson_test.go holds them to that.

// DecodeFast decodes data, already checked to be valid UTF-8 without lone
// surrogate escapes, into c when it is one JSON object of "rule", "key",
// "cost" and "class", each at most once, the strings without escapes and
// the cost an integer; else it reports false and leaves c as it was.
func (c *checkRequest) DecodeFast(data []byte) bool {
	var (
		out  checkRequest
		seen [4]bool
	)
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			name, j, ok := plainString(data, i)
			if !ok {
				return false
			}
			i = skipSpace(data, j)
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i = skipSpace(data, i+1)
			switch string(name) { // compared, not copied
			case "rule", "key", "class":
				field, dst := 0, &out.Rule
				switch string(name) {
				case "key":
					field, dst = 1, &out.Key
				case "class":
					field, dst = 3, &out.Class
				}
				v, j, ok := plainString(data, i)
				if !ok || seen[field] {
					return false
				}
				seen[field] = true
				*dst = string(v)
				i = j
			case "cost":
				v, j, ok := plainInt(data, i)
				if !ok || seen[2] {
					return false
				}
				seen[2] = true
				out.Cost = &v
				i = j
			default:
				return false // unknown, or a name encoding/json matches case-insensitively
			}
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			return false
		}
	}
	if skipSpace(data, i) != len(data) {
		return false
	}
	*c = out
	return true
}

// skipSpace returns the offset of the first byte of data from i that is
// not JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the JSON string at data[i:] when it holds no escape
// and no control character, and returns its bytes (in data, not copied)
// and the offset after it.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// plainInt reads the JSON integer at data[i:] (no fraction, no exponent,
// no leading zero) that fits an int, and returns it and the offset after.
func plainInt(data []byte, i int) (int, int, bool) {
	j := i
	if j < len(data) && data[j] == '-' {
		j++
	}
	start := j
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	if j == start || data[start] == '0' && j > start+1 {
		return 0, 0, false
	}
	if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return 0, 0, false
	}
	n, err := strconv.Atoi(string(data[i:j]))
	if err != nil {
		return 0, 0, false
	}
	return n, j, true
}

// appendCheckResult appends r as encoding/json marshals it, and a
// newline, or reports false when one of its strings (a limit's name, the
// class) is not plain printable ASCII that encoding/json writes as it
// is, or it holds a reservation (a decision that settles, left to
// encoding/json).
func appendCheckResult(b []byte, r *checkResult) ([]byte, bool) {
	if r.Reservation != "" {
		return b, false // encoding/json's
	}
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = appendState(b, &r.state)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, r.RetryAfterMS, 10)
	if r.ShadowDenied {
		b = append(b, `,"shadow_denied":true`...)
	}
	if r.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	if r.Class != "" {
		if !plainASCII(r.Class) {
			return b, false
		}
		b = append(b, `,"class":"`...)
		b = append(b, r.Class...)
		b = append(b, '"')
	}
	if r.Shed {
		b = append(b, `,"shed":true`...)
	}
	b = append(b, `,"policies":`...)
	if r.Policies == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Policies {
			p := &r.Policies[i]
			if !plainASCII(p.Name) {
				return b, false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":"`...)
			b = append(b, p.Name...)
			b = append(b, `","allowed":`...)
			b = strconv.AppendBool(b, p.Allowed)
			b = appendState(b, &p.state)
			b = append(b, `,"retry_after_ms":`...)
			b = strconv.AppendInt(b, p.RetryAfterMS, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...), true
}

// appendState appends the fields of s that are there.
func appendState(b []byte, s *state) []byte {
	if s.Limit != nil {
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, int64(*s.Limit), 10)
	}
	if s.Remaining != nil {
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, int64(*s.Remaining), 10)
	}
	if s.ResetAfterMS != nil {
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, *s.ResetAfterMS, 10)
	}
	return b
}

// plainASCII reports whether encoding/json writes s between its quotes as
// it is: printable ASCII without '"', '\\' and the characters it escapes
// for HTML ('<', '>', '&').
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
