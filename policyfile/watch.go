package policyfile

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"time"

	"github.com/sluice-go/sluice/config"
)

// fingerprint identifies one version of the policy file by its content's
// SHA-256: a file touched or rewritten unchanged is the same version. A
// missing or unreadable file has the zero sum with err set; a regular
// file over config.MaxFileBytes, which config.Load refuses unread, is
// known by its size alone.
type fingerprint struct {
	sum  [sha256.Size]byte
	size int64 // only for a file over config.MaxFileBytes
	err  string
}

// fingerprintOf reads the file at path, at most config.MaxFileBytes+1
// bytes of it. It opens the path afresh, following symbolic links, so a
// file replaced by rename (as editors and Kubernetes ConfigMaps do) is
// seen as the new file.
func fingerprintOf(path string) fingerprint {
	f, err := os.Open(path)
	if err != nil {
		return fingerprint{err: err.Error()}
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > config.MaxFileBytes {
		return fingerprint{size: fi.Size()}
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, config.MaxFileBytes+1)); err != nil {
		return fingerprint{err: err.Error()}
	}
	var fp fingerprint
	h.Sum(fp.sum[:0])
	return fp
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
