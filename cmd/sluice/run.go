package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand: a file of its own, a flag set, a run function.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"check":   {"validate a policy file and print the effective rules", runCheck},
	"demo":    {"show, on loopback, N replicas holding one limit with Redis and N x the limit without", runDemo},
	"proxy":   {"run a rate-limiting reverse proxy", runProxy},
	"serve":   {"serve rate-limit decisions over HTTP", runServe},
	"version": {"print the version", runVersion},
}

// Run runs the command line args (without the program name) and returns
// the process exit code: 0 on success, 1 when the command failed, 2 for a
// usage error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "sluice %s: %v\n", args[0], err)
		return 2
	}
	fmt.Fprintf(stderr, "sluice %s: %v\n", args[0], err)
	return 1
}

// usageError is a mistake on the command line.
type usageError struct{ error }

func usage(w io.Writer) {
	fmt.Fprintln(w, "sluice: a distributed rate limiter\n\nUsage: sluice <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-9s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun \"sluice <command> --help\" for its flags.")
}

// flagSet returns a flag set for a subcommand that writes its help to
// stdout and reports errors as usage errors.
func flagSet(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: sluice %s [flags]\n\n%s\n\nFlags (each also read from its environment variable):\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs, then fills every flag not given on the
// command line from its environment variable (envs maps flag name to
// variable); a variable set to the empty string counts as unset.
func parse(fs *flag.FlagSet, args []string, envs map[string]string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, env := range envs {
		if v := os.Getenv(env); v != "" && !set[name] {
			if err := fs.Set(name, v); err != nil {
				return usageError{fmt.Errorf("%s=%q: %w", env, v, err)}
			}
		}
	}
	return nil
}

// envUsage appends the environment variable to a flag's help.
func envUsage(help, env string) string {
	return strings.TrimSpace(help) + " (env " + env + ")"
}
