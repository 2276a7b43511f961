package cdp

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LiveInGroup counts the processes of process group pgid that are not
// zombies (whose parent, once the browser dies, is init's to reap), from
// /proc: the tests' check that Close leaves nothing running.
func LiveInGroup(pgid int) (int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid && f[0] != "Z" && f[0] != "X" {
			n++
		}
	}
	return n, nil
}
