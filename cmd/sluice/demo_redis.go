package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"

	"github.com/sluice-go/sluice/internal/testing/redisproc"
)

// demoRedis is a redis-server the demo started, without persistence, on a
// free loopback port.
type demoRedis struct {
	*redisproc.Process
	version, dir string
}

// startRedis starts redis-server from PATH with its working directory in
// a new directory under tmp, and waits until it answers. It returns
// errNoRedis when there is no redis-server.
func startRedis(ctx context.Context, tmp string) (*demoRedis, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	dir, err := os.MkdirTemp(tmp, "sluice-demo-redis")
	if err != nil {
		return nil, err
	}
	p, err := redisproc.StartFree(ctx, path, dir, "")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &demoRedis{Process: p, version: serverVersion(path), dir: dir}, nil
}

// serverVersion returns the version redis-server at path reports, or "".
func serverVersion(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return ""
	}
	if m := regexp.MustCompile(`v=(\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// Stop kills the server by pid, waits for it to exit and removes its
// directory. It replaces the embedded redisproc.Process.Stop, which would
// leave the directory behind.
func (r *demoRedis) Stop() {
	r.Process.Stop()
	os.RemoveAll(r.dir)
}
