package redis

import "github.com/sluice-go/sluice"

// ScriptSHAs returns the SHA-1 of each algorithm's decision script, and of
// the script of all five, for tests that ask the server which ran.
func ScriptSHAs() (map[sluice.Algorithm]string, string) {
	shas := make(map[sluice.Algorithm]string)
	for _, a := range sluice.Algorithms {
		shas[a] = compose(a).sha
	}
	return shas, allScript.sha
}
