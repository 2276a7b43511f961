package policyfile

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// fingerprint identifies one version of the policy file by its content's
// SHA-256: a file touched or rewritten unchanged is the same version. A
// missing or unreadable file has the zero sum with err set.
type fingerprint struct {
	sum [sha256.Size]byte
	err string
}

// fingerprintOf reads the file at path. It opens the path afresh, following
// symbolic links, so a file replaced by rename (as editors and Kubernetes
// ConfigMaps do) is seen as the new file.
func fingerprintOf(path string) fingerprint {
	data, err := os.ReadFile(path)
	if err != nil {
		return fingerprint{err: err.Error()}
	}
	return fingerprint{sum: sha256.Sum256(data)}
}

// WatchFile calls reload on every signal from hup and, when interval is
// positive, whenever the content of the file at path changes (its
// SHA-256, polled every interval; a file replaced by rename, as editors
// and Kubernetes ConfigMaps do, is seen as the new file). It takes the
// first fingerprint before it returns, so any later change is seen; the
// watching goroutine stops with ctx. trigger is "signal" or "file
// changed".
func WatchFile(ctx context.Context, path string, interval time.Duration, hup <-chan os.Signal, reload func(trigger string)) {
	watchFile(ctx, path, fingerprintOf(path), interval, hup, reload)
}

// watchFile is WatchFile from the version last: a file whose content is
// not last's is reloaded at the first poll.
func watchFile(ctx context.Context, path string, last fingerprint, interval time.Duration, hup <-chan os.Signal, reload func(trigger string)) {
	go func() {
		var tick <-chan time.Time // nil: polling disabled
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				last = fingerprintOf(path)
				reload("signal")
			case <-tick:
				fp := fingerprintOf(path)
				if fp == last {
					continue
				}
				last = fp
				reload("file changed")
			}
		}
	}()
}
