package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flagSet("version", "Print sluice's version, the commit it was built from and the Go version.", stdout)
	if err := fs.parse(args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, version())
	return nil
}

// version describes the build: the module version (or "devel"), the VCS
// revision when known, and the Go version.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "sluice (unknown build)"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return "sluice " + v + " " + info.GoVersion
}
