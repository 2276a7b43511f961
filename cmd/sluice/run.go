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
	"time"
)

// command is one subcommand: a file of its own, a flag set, a run function.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"bench":   {"drive a running sluice serve and report decisions/s, latency and outcomes", runBench},
	"check":   {"validate a policy file or an envoyproxy/ratelimit config and print what it enforces", runCheck},
	"demo":    {"show, on loopback, N replicas holding one limit with Redis and N x the limit without", runDemo},
	"inspect": {"show a client's state under a rule of a running sluice serve, spending nothing", runInspect},
	"reset":   {"forget a client's state under a rule of a running sluice serve", runReset},
	"proxy":   {"run a rate-limiting reverse proxy", runProxy},
	"serve":   {"serve rate-limit decisions over HTTP", runServe},
	"top":     {"print the most limited client keys of a running sluice serve", runTop},
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

// cmdFlags is a subcommand's flag set whose every flag is registered
// together with its environment variable, by the methods below, so that
// the help and the lookup cannot name different variables.
type cmdFlags struct {
	*flag.FlagSet
	env   map[string]string // flag name -> environment variable
	given map[string]string // flag name -> how it was given ("--name" or the variable), after parse
}

// flagSet returns a flag set for a subcommand that writes its help to
// stdout and reports errors as usage errors.
func flagSet(name, synopsis string, stdout io.Writer) *cmdFlags {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: sluice %s [flags]\n\n%s\n\nFlags (each also read from its environment variable):\n", name, synopsis)
		fs.PrintDefaults()
	}
	return &cmdFlags{FlagSet: fs, env: map[string]string{}, given: map[string]string{}}
}

// usage records that flag name is also read from env, and returns help
// with env appended.
func (c *cmdFlags) usage(name, env, help string) string {
	c.env[name] = env
	return strings.TrimSpace(help) + " (env " + env + ")"
}

// string defines a string flag read also from env.
func (c *cmdFlags) string(name, env, value, help string) *string {
	return c.String(name, value, c.usage(name, env, help))
}

// stringVar defines a string flag, stored in p, read also from env.
func (c *cmdFlags) stringVar(p *string, name, env, value, help string) {
	c.StringVar(p, name, value, c.usage(name, env, help))
}

// intVar defines an int flag, stored in p, read also from env.
func (c *cmdFlags) intVar(p *int, name, env string, value int, help string) {
	c.IntVar(p, name, value, c.usage(name, env, help))
}

// float defines a float64 flag read also from env.
func (c *cmdFlags) float(name, env string, value float64, help string) *float64 {
	return c.Float64(name, value, c.usage(name, env, help))
}

// boolean defines a bool flag read also from env.
func (c *cmdFlags) boolean(name, env string, value bool, help string) *bool {
	return c.Bool(name, value, c.usage(name, env, help))
}

// duration defines a duration flag read also from env.
func (c *cmdFlags) duration(name, env string, value time.Duration, help string) *time.Duration {
	return c.Duration(name, value, c.usage(name, env, help))
}

// parse parses args, then fills every flag not given on the command line
// from its environment variable; a variable set to the empty string
// counts as unset. Flags are filled in name order, so that of several bad
// variables the same one is reported each time.
func (c *cmdFlags) parse(args []string) error {
	if err := c.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if c.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", c.Arg(0))}
	}
	set := map[string]bool{}
	c.Visit(func(f *flag.Flag) { set[f.Name] = true; c.given[f.Name] = "--" + f.Name })
	var err error
	c.VisitAll(func(f *flag.Flag) {
		env, ok := c.env[f.Name]
		if !ok || set[f.Name] || err != nil {
			return
		}
		if v := os.Getenv(env); v != "" {
			if serr := c.Set(f.Name, v); serr != nil {
				err = usageError{fmt.Errorf("%s=%q: %w", env, v, serr)}
			}
			c.given[f.Name] = env
		}
	})
	return err
}

// givenOf returns, of the flags names, those given on the command line
// or by their environment variable with a value other than the default,
// as given: "--name" or the variable.
func (c *cmdFlags) givenOf(names ...string) []string {
	var out []string
	for _, n := range names {
		if g, ok := c.given[n]; ok && c.Lookup(n).Value.String() != c.Lookup(n).DefValue {
			out = append(out, g)
		}
	}
	return out
}
