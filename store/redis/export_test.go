package redis

import (
	"github.com/redis/rueidis"

	"github.com/sluice-go/sluice"
)

// NewClient connects a rueidis client as Open does (newClient), for tests
// that build their clients from options.
func NewClient(opt rueidis.ClientOption) (rueidis.Client, error) { return newClient(opt) }

// ScriptSHAs returns the SHA-1 of each algorithm's decision script, and of
// the script of all five, for tests that ask the server which ran.
func ScriptSHAs() (map[sluice.Algorithm]string, string) {
	shas := make(map[sluice.Algorithm]string)
	for _, a := range sluice.Algorithms {
		shas[a] = compose(a).sha
	}
	return shas, allScript.sha
}
