package redis_test

import (
	"strings"
	"testing"

	sluiceredis "github.com/sluice-go/sluice/store/redis"
)

// TestURLErrorHidesPassword: a URL that does not parse is reported, by
// Open and CheckURL alike, without the password it holds.
func TestURLErrorHidesPassword(t *testing.T) {
	const secret = "s3cret"
	for _, url := range []string{
		"redis://user:" + secret + "@host:bad port/0",
		"redis://user:" + secret + "@host:6379/notadb",
		"redis://user:" + secret + "%zz@host:6379",
	} {
		s, err := sluiceredis.Open(url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want a parse error", url)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("Open: error quotes the password: %v", err)
		}
		err = sluiceredis.CheckURL(url)
		if err == nil {
			t.Errorf("CheckURL(%q) = nil, want a parse error", url)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("CheckURL: error quotes the password: %v", err)
		}
	}
}
