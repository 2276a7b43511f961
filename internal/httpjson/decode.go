package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Millis returns d in whole milliseconds, rounded up, as sluice's JSON
// answers write durations (a client that waits that long is never
// early); 0 when d <= 0.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// FastDecoder is a body that decodes the usual shape of itself without
// encoding/json, reporting false for anything else, which Decode then
// gives to encoding/json. Decode calls it with data that is valid UTF-8
// without lone surrogate escapes.
type FastDecoder interface{ DecodeFast(data []byte) bool }

// Decode reads r's body, at most limit bytes, into v: one JSON object
// with only known fields and nothing after it, in valid UTF-8 without
// lone surrogate escapes (which encoding/json would decode to U+FFFD, so
// that distinct keys would become one). Otherwise it answers 400, 408
// (the listener's read deadline) or 413 saying what is wrong, and
// where, and returns false. fields lists the accepted fields for the
// unknown-field message. A v that is a FastDecoder is tried that way
// first.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any, fields string) bool {
	// Into a buffer of a pool, not a new one grown per request: what is
	// decoded from it is copied out (encoding/json copies strings).
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyBuffers.Put(buf)
		}
	}()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	data := buf.Bytes()
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			Error(w, http.StatusRequestEntityTooLarge, "TOO_LARGE",
				fmt.Sprintf("the request body exceeds %d bytes", limit))
			return false
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			// The listener's read deadline (sluice serve's --body-timeout):
			// no addresses in the answer, which net's error would hold.
			Error(w, http.StatusRequestTimeout, "REQUEST_TIMEOUT", "the request body did not arrive in time")
			return false
		}
		Error(w, http.StatusBadRequest, "BAD_REQUEST", "reading the request body: "+err.Error())
		return false
	}
	bad := func(format string, args ...any) bool {
		Error(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf(format, args...))
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return bad("the request body is empty; send a JSON object")
	}
	if !utf8.Valid(data) {
		// encoding/json would replace the bytes with U+FFFD, so that
		// distinct keys would share a count.
		return bad("%s", invalidUTF8(data))
	}
	if off := loneSurrogate(data); off >= 0 {
		// The same: encoding/json decodes a lone surrogate to U+FFFD.
		return bad("%s", where(data, off, loneEscape))
	}
	if f, ok := v.(FastDecoder); ok && f.DecodeFast(data) {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var (
			syn *json.SyntaxError
			typ *json.UnmarshalTypeError
		)
		switch {
		case errors.As(err, &syn):
			// Offset counts the bytes read, the offending one included.
			return bad("malformed JSON at byte offset %d: %s", max(syn.Offset-1, 0), syn.Error())
		case errors.Is(err, io.ErrUnexpectedEOF):
			return bad("malformed JSON: the body ends at byte offset %d, inside the JSON value", len(data))
		case errors.As(err, &typ):
			if typ.Field == "" {
				return bad("the body must be a JSON object, got %s", typ.Value)
			}
			return bad("field %q must be %s, got %s", typ.Field, jsonType(typ.Type.Kind().String()), typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return bad("unknown field %s; %s", strings.TrimPrefix(err.Error(), "json: unknown field "), fields)
		}
		return bad("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")
	if len(rest) > 0 {
		return bad("unexpected data after the JSON object at byte offset %d; send one object", len(data)-len(rest))
	}
	return true
}

// bodyBuffers holds the buffers Decode reads request bodies into.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer Decode returns to bodyBuffers: one
// grown by a rare large batch is left to the garbage collector.
const maxPooledBody = 16 << 10

// jsonType names a Go kind as JSON does.
func jsonType(kind string) string {
	switch kind {
	case "int", "int64":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct":
		return "an object"
	}
	return "a " + kind
}

// invalidUTF8 says where data, which is not valid UTF-8, first is not.
func invalidUTF8(data []byte) string {
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return where(data, off, "is not valid UTF-8")
}

// loneSurrogate returns the offset of the first \u escape in a string of
// data that is half a UTF-16 surrogate pair without its other half, or -1.
// Malformed escapes are left to the decoder.
func loneSurrogate(data []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	in := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			r, ok := hex4(i)
			switch {
			case !ok:
				i++ // another escape: skip what it escapes
			case r >= 0xD800 && r <= 0xDBFF:
				if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
				} else {
					return i
				}
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			default:
				i += 5
			}
		}
	}
	return -1
}

// where says where in data the byte at off is, which has problem: in the
// field whose string value holds it ("key", "checks[1].key"), or a field
// name, or just at off when the JSON breaks before it.
func where(data []byte, off int, problem string) string {
	// One frame per open object or array: the field or index inside it
	// that the decoder is at.
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		idx     int
	}
	var stack []frame
	done := func() { // a value ended inside the innermost frame
		if len(stack) == 0 {
			return
		}
		if f := &stack[len(stack)-1]; f.obj {
			f.wantKey = true
		} else {
			f.idx++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		str, isStr := tok.(string)
		isKey := isStr && len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].wantKey
		if int(dec.InputOffset()) > off {
			// Punctuation and numbers are ASCII: the byte is in this string.
			if !isStr {
				break
			}
			if isKey {
				return fmt.Sprintf("a field name %s (byte offset %d)%s", problem, off, mustBe(problem))
			}
			var path strings.Builder
			for _, f := range stack {
				switch {
				case !f.obj:
					fmt.Fprintf(&path, "[%d]", f.idx)
				case path.Len() > 0:
					path.WriteString("." + f.key)
				default:
					path.WriteString(f.key)
				}
			}
			if path.Len() == 0 {
				break
			}
			return fmt.Sprintf("field %q %s (byte offset %d)%s", path.String(), problem, off, mustBe(problem))
		}
		switch {
		case isKey:
			stack[len(stack)-1].key, stack[len(stack)-1].wantKey = str, false
		case tok == json.Delim('{'):
			stack = append(stack, frame{obj: true, wantKey: true})
		case tok == json.Delim('['):
			stack = append(stack, frame{})
		case tok == json.Delim('}'), tok == json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		default:
			done()
		}
	}
	return fmt.Sprintf("the body %s (byte offset %d)%s", problem, off, mustBe(problem))
}

// loneEscape is the problem of a lone surrogate escape.
const loneEscape = "holds half a UTF-16 surrogate pair (an escape from \\ud800 to \\udfff without its other half)"

// mustBe is what follows a problem's offset: the rule it breaks.
func mustBe(problem string) string {
	if problem == loneEscape {
		return "; escape a character beyond U+FFFF as a whole pair, such as \\ud83d\\ude00, or send it as UTF-8"
	}
	return "; JSON text must be UTF-8"
}
