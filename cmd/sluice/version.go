package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flagSet("version", "Print sluice's module version, the commit it was built from (+dirty when the\ntree had changes), the commit's time and the Go version.", stdout)
	if err := fs.parse(args); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, version(info))
	return nil
}

// revLen is how many hex digits of the VCS revision version shows.
const revLen = 12

// version describes the build info records, nil meaning none:
//
//	sluice v0.3.0 (rev 1a2b3c4d5e6f, 2026-12-01T09:00:00Z, go1.26.8)
//	sluice (devel) (rev 1a2b3c4d5e6f+dirty, 2026-12-01T09:00:00Z, go1.26.8)
//	sluice (devel) (go1.26.8)
//
// The module version is what the go command stamped: a tag, a
// pseudo-version, or (devel). The revision, "+dirty" when the tree had
// uncommitted changes, and the time are the go command's vcs settings,
// recorded by a go build in a checkout; the time is the commit's, as Go
// records no build time (builds stay reproducible).
func version(info *debug.BuildInfo) string {
	if info == nil {
		return "sluice (unknown build)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	var details []string
	if rev != "" {
		details = append(details, "rev "+rev[:min(len(rev), revLen)]+dirty)
	}
	if at != "" {
		details = append(details, at)
	}
	if info.GoVersion != "" {
		details = append(details, info.GoVersion)
	}
	if len(details) == 0 {
		return "sluice " + v
	}
	return "sluice " + v + " (" + strings.Join(details, ", ") + ")"
}
