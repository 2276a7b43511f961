package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	goredislib "github.com/redis/go-redis/v9"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the user and system CPU time that process pid has used,
// from /proc/<pid>/stat.
func procCPU(pid int) (user, system time.Duration, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields from after its closing parenthesis (field 3 on).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q: not integers", pid, f[11], f[12])
	}
	return time.Duration(utime) * time.Second / clockTicks, time.Duration(stime) * time.Second / clockTicks, nil
}

// commandStats returns the usec of every command in INFO commandstats, by
// command name (e.g. "evalsha"), and their calls.
func commandStats(ctx context.Context, c *goredislib.Client) (usec, calls map[string]int64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	usec, calls = map[string]int64{}, map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue // usec_per_call is a float; we want the totals
			}
			switch k {
			case "usec":
				usec[name] = n
			case "calls":
				calls[name] = n
			}
		}
	}
	return usec, calls, nil
}

// serverInfo returns a field of INFO server, e.g. "redis_version".
func serverInfo(ctx context.Context, c *goredislib.Client, field string) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return "?"
}

// memoryPerKey returns the bytes MEMORY USAGE (SAMPLES 0: every element)
// reports over every key of the database, their number and their names'
// total length.
func memoryPerKey(ctx context.Context, c *goredislib.Client) (bytes, n, keyLen int64, err error) {
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		m, err := c.Do(ctx, "MEMORY", "USAGE", k, "SAMPLES", "0").Int64()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("MEMORY USAGE %q: %w", k, err)
		}
		bytes += m
		n++
		keyLen += int64(len(k))
	}
	if err := iter.Err(); err != nil {
		return 0, 0, 0, fmt.Errorf("SCAN: %w", err)
	}
	return bytes, n, keyLen, nil
}
