package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/sluice-go/sluice/store/redis"
)

// demoRedis is a redis-server the demo started, without persistence, on a
// free loopback port.
type demoRedis struct {
	addr, version, dir string
	cmd                *exec.Cmd
	exited             chan struct{}
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
	var lastErr error
	for range 3 { // the free port may be taken before redis-server binds it
		port, err := freeLoopbackPort()
		if err != nil {
			lastErr = err
			break
		}
		r, err := launchRedis(ctx, path, dir, port)
		if err == nil {
			return r, nil
		}
		if lastErr = err; ctx.Err() != nil {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func launchRedis(ctx context.Context, path, dir string, port int) (*demoRedis, error) {
	r := &demoRedis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, exited: make(chan struct{})}
	var log bytes.Buffer
	r.cmd = exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	r.cmd.Stdout, r.cmd.Stderr = &log, &log
	dieWithParent(r.cmd)
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	if out, err := exec.Command(path, "--version").Output(); err == nil {
		if m := regexp.MustCompile(`v=(\S+)`).FindSubmatch(out); m != nil {
			r.version = string(m[1])
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-r.exited:
			return nil, fmt.Errorf("redis-server exited at start: %s", bytes.TrimSpace(log.Bytes()))
		case <-ctx.Done():
			r.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if err := pingRedis(ctx, r.addr); err == nil {
			return r, nil
		} else if time.Now().After(deadline) {
			r.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer within 10s: %w", r.addr, err)
		}
	}
}

// pingRedis asks the server at addr for PONG.
func pingRedis(ctx context.Context, addr string) error {
	s, err := redis.Open("redis://" + addr)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Ping(ctx)
}

func (r *demoRedis) pid() int { return r.cmd.Process.Pid }

// stop kills the server by pid, waits for it to exit and removes its
// directory.
func (r *demoRedis) stop() {
	r.kill()
	os.RemoveAll(r.dir)
}

// kill kills the server by pid and waits for it to exit.
func (r *demoRedis) kill() {
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-r.exited
}

// freeLoopbackPort asks the kernel for a free loopback port.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
