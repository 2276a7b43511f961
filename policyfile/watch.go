package policyfile

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
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

// filesFingerprint identifies one version of the set of files list
// returns: their names, in sorted order, and each one's fingerprint, so
// that a file that appears, disappears or is renamed changes it as much
// as a change of content does. A list that fails has the zero sum with
// err set.
func filesFingerprint(list func() ([]string, error)) fingerprint {
	files, err := list()
	if err != nil {
		return fingerprint{err: err.Error()}
	}
	files = slices.Clone(files)
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		fp := fingerprintOf(f)
		// Lengths first: no name or error can pass for another's.
		fmt.Fprintf(h, "%d:%s %d %d:%s ", len(f), f, fp.size, len(fp.err), fp.err)
		h.Write(fp.sum[:])
	}
	var fp fingerprint
	h.Sum(fp.sum[:0])
	return fp
}

// Version identifies the content of a set of files, as WatchFiles
// compares it. Versions are comparable with ==.
type Version struct{ fp fingerprint }

// VersionOf returns the version of the files list returns now (their
// names and contents). Take it before loading the files, and give it to
// WatchFiles, so that a change made after the load is seen even if it
// comes before the watch starts.
func VersionOf(list func() ([]string, error)) Version {
	return Version{filesFingerprint(list)}
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

// WatchFiles is WatchFile for a set of files that list returns afresh at
// every poll (such as envoy.ConfigFiles of a directory): reload is called
// when the set differs from since, by a file's content, or by a file that
// appeared or disappeared, so that a directory is reloaded as a whole.
// A change made between since and the call is reloaded at the first
// poll.
func WatchFiles(ctx context.Context, list func() ([]string, error), since Version, interval time.Duration, hup <-chan os.Signal, reload func(trigger string)) {
	watch(ctx, func() fingerprint { return filesFingerprint(list) }, since.fp, interval, hup, reload)
}

// watchFile is WatchFile from the version last: a file whose content is
// not last's is reloaded at the first poll.
func watchFile(ctx context.Context, path string, last fingerprint, interval time.Duration, hup <-chan os.Signal, reload func(trigger string)) {
	watch(ctx, func() fingerprint { return fingerprintOf(path) }, last, interval, hup, reload)
}

// watch calls reload on every signal from hup and whenever version,
// polled every interval, differs from last, until ctx ends.
func watch(ctx context.Context, version func() fingerprint, last fingerprint, interval time.Duration, hup <-chan os.Signal, reload func(trigger string)) {
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
				last = version()
				reload("signal")
			case <-tick:
				fp := version()
				if fp == last {
					continue
				}
				last = fp
				reload("file changed")
			}
		}
	}()
}
