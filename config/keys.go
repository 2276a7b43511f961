package config

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-go/sluice/policy"
)

// parseKey returns the key spec s, or a message saying what is wrong.
func parseKey(s string) (policy.Key, string) {
	switch s {
	case "ip":
		return policy.Key{Source: policy.KeyIP}, ""
	case "global":
		return policy.Key{Source: policy.KeyGlobal}, ""
	}
	src, name, found := strings.Cut(s, ":")
	switch {
	case !found || src != "header" && src != "query":
		return policy.Key{}, fmt.Sprintf("%q is not one of %s", s, keyHelp)
	case name == "":
		if src == "header" {
			return policy.Key{}, fmt.Sprintf("%q has no header name; write header:<Name>, such as header:X-API-Key", s)
		}
		return policy.Key{}, fmt.Sprintf("%q has no parameter name; write query:<name>, such as query:api_key", s)
	case src == "header":
		for i := 0; i < len(name); i++ {
			if !isTokenChar(name[i]) {
				return policy.Key{}, fmt.Sprintf("%q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name)
			}
		}
		return policy.Key{Source: policy.KeyHeader, Name: http.CanonicalHeaderKey(name)}, ""
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return policy.Key{}, fmt.Sprintf("query parameter name %q holds a space or a control character", name)
		}
	}
	return policy.Key{Source: policy.KeyQuery, Name: name}, ""
}

// isTokenChar reports whether c may appear in an HTTP field name (RFC 9110
// token).
func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
