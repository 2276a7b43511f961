package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/policyfile"
)

// envoyFlags are the flags that apply only to an envoyproxy/ratelimit
// config (a file or a directory of them): given with a sluice policy
// file, they are a usage error rather than silently ignored.
type envoyFlags struct {
	fs                   *cmdFlags
	headers, headerNames *string // nil when the command has no such flags (check)
	merge                *bool
}

// envoyFlagNames are the flags of envoyFlags, to tell which were given.
var envoyFlagNames = []string{"envoy-headers", "envoy-header-names", "merge-domains"}

// addEnvoyFlags defines on fs the flags serve reads for an
// envoyproxy/ratelimit config.
func addEnvoyFlags(fs *cmdFlags) *envoyFlags {
	return &envoyFlags{
		fs: fs,
		headers: fs.string("envoy-headers", "SLUICE_ENVOY_HEADERS", envoy.HeadersNone.String(),
			"response headers an envoyproxy/ratelimit config has Envoy add: "+envoy.HeaderModes+
				" (none, as envoyproxy/ratelimit by default; ratelimit: the limit, remaining and reset of the most restrictive descriptor, as its LIMIT_RESPONSE_HEADERS_ENABLED=true;"+
				" ietf: the IETF draft's RateLimit-Policy and RateLimit, one item per descriptor)"),
		headerNames: fs.string("envoy-header-names", "SLUICE_ENVOY_HEADER_NAMES", strings.Join(envoy.DefaultHeaderNames[:], ","),
			"the limit, remaining and reset header names of --envoy-headers ratelimit, comma-separated, as envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER"),
		merge: addMergeFlag(fs),
	}
}

// addMergeFlag defines --merge-domains on fs (serve and check).
func addMergeFlag(fs *cmdFlags) *bool {
	return fs.boolean("merge-domains", "SLUICE_MERGE_DOMAINS", false,
		"let the files of an envoyproxy/ratelimit directory that define the same domain add up their descriptors, as its MERGE_DOMAIN_CONFIG=true does (otherwise a domain defined twice is an error)")
}

// forConfig returns a usage error when a flag of f was given and the
// config at path is a sluice policy file (isEnvoy false). A path that is
// not there is left for the loader to report.
func (f *envoyFlags) forConfig(path string, isEnvoy bool) error {
	given := f.fs.givenOf(envoyFlagNames...)
	if isEnvoy || len(given) == 0 {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	return usageError{fmt.Errorf("%s: only for an envoyproxy/ratelimit config, and %s is a sluice policy file", strings.Join(given, ", "), path)}
}

// loadOptions returns the options envoy.LoadConfig takes from the flags.
func (f *envoyFlags) loadOptions() []envoy.LoadOption {
	if *f.merge {
		return []envoy.LoadOption{envoy.MergeDomains()}
	}
	return nil
}

// serviceOptions returns the options envoy.NewService takes from the
// flags, or a usage error naming what is wrong.
func (f *envoyFlags) serviceOptions() ([]envoy.ServiceOption, error) {
	mode, err := envoy.ParseHeaderMode(*f.headers)
	if err != nil {
		return nil, usageError{fmt.Errorf("--envoy-headers %q is not one of %s", *f.headers, envoy.HeaderModes)}
	}
	names := strings.Split(*f.headerNames, ",")
	if len(names) != 3 {
		return nil, usageError{fmt.Errorf("--envoy-header-names %q: want three comma-separated header names (limit, remaining, reset), got %d", *f.headerNames, len(names))}
	}
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
		if !httpguts.ValidHeaderFieldName(names[i]) {
			return nil, usageError{fmt.Errorf("--envoy-header-names %q: %q is not a header field name", *f.headerNames, names[i])}
		}
	}
	if given := f.fs.givenOf("envoy-header-names"); len(given) > 0 && mode != envoy.HeadersRateLimit {
		return nil, usageError{fmt.Errorf("%s names the fields of --envoy-headers %s, not of %s", given[0], envoy.HeadersRateLimit, mode)}
	}
	return []envoy.ServiceOption{envoy.WithHeaders(mode), envoy.WithHeaderNames(names[0], names[1], names[2])}, nil
}

// envoyFiles lists the files of the envoyproxy/ratelimit config at path
// as envoy.LoadConfig reads them: path itself, or, of a directory, the
// files envoy.ConfigFiles lists.
func envoyFiles(path string) ([]string, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return envoy.ConfigFiles(path)
	}
	return []string{path}, nil
}

// envoyCounts are the log attributes counting what cfg holds.
func envoyCounts(cfg *envoy.Config) []any {
	return []any{"domains", len(cfg.Domains), "limits", len(cfg.Limits()), "files", len(cfg.Files)}
}

// warnNoDomains warns when cfg, loaded from path, holds no domain: every
// request is then answered OK, which is what envoyproxy/ratelimit does
// too, but rarely what was meant.
func warnNoDomains(log *slog.Logger, path string, cfg *envoy.Config) {
	if len(cfg.Domains) == 0 {
		log.Warn("the config holds no domains: every request is answered OK", "config", path, "files", len(cfg.Files))
	}
}

// watchEnvoyConfig reloads the envoyproxy/ratelimit config at path (a
// file, or a directory as a whole) as policyfile.Policy.Watch reloads a
// policy file: on a signal from hup, or when a file envoyFiles lists
// changes, appears or disappears (polled every interval). A valid set goes
// to apply (envoy.Service.Update); report hears each outcome (nil, or
// the error that rejected the set); an invalid one is logged, one line per
// error, and leaves the old set serving. since is the version that was
// loaded: a change made after it is reloaded at the first poll.
func watchEnvoyConfig(ctx context.Context, path string, since policyfile.Version, opts []envoy.LoadOption, interval time.Duration, hup <-chan os.Signal, apply func(*envoy.Config), report func(err error), log *slog.Logger) {
	list := func() ([]string, error) { return envoyFiles(path) }
	policyfile.WatchFiles(ctx, list, since, interval, hup, func(trigger string) {
		cfg, err := envoy.LoadConfig(path, opts...)
		report(err)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if line != "" {
					policyfile.Rejected(log, path, trigger, fmt.Errorf("%s", line))
				}
			}
			return
		}
		apply(cfg)
		log.Info("config reloaded", append([]any{"config", path, "trigger", trigger}, envoyCounts(cfg)...)...)
		warnNoDomains(log, path, cfg)
	})
}

// printEnvoy writes what the envoyproxy/ratelimit config cfg, loaded from
// path, enforces: its counts, then one row per rate limit.
func printEnvoy(w io.Writer, path string, cfg *envoy.Config) {
	ls := cfg.Limits()
	fmt.Fprintf(w, "%s: ok, %s, %s in %s\n", path, count(len(cfg.Domains), "domain"), count(len(ls), "limit"), count(len(cfg.Files), "file"))
	if len(cfg.Domains) == 0 {
		fmt.Fprintln(w, "no domains: every request is answered OK")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tDESCRIPTORS\tLIMIT\tFLAGS\tAT")
	byDomain := map[string][]envoy.Path{}
	for _, p := range ls {
		byDomain[p.Domain] = append(byDomain[p.Domain], p)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Domains)) {
		if len(byDomain[name]) == 0 {
			fmt.Fprintf(tw, "%s\t(no limits)\t-\t-\t-\n", name)
		}
		for _, p := range byDomain[name] {
			d := p.Node()
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s:%d\n", p.Domain, p.String(), envoyLimit(d.RateLimit), envoyFlagsOf(p), d.File, d.Line)
		}
	}
	tw.Flush()
}

// envoyLimit describes a rate_limit: "5/day fixed_window", "10/minute x5
// sliding_log" (unit_multiplier 5), "unlimited", or "0/hour (every
// request over the limit)".
func envoyLimit(rl *envoy.RateLimit) string {
	if rl.Unlimited {
		return "unlimited"
	}
	s := strconv.FormatUint(uint64(rl.RequestsPerUnit), 10) + "/" + rl.Unit
	if rl.UnitMultiplier > 1 {
		s += " x" + strconv.FormatUint(uint64(rl.UnitMultiplier), 10)
	}
	if rl.RequestsPerUnit == 0 {
		return s + " (every request over the limit)"
	}
	return s + " " + rl.Algorithm.String()
}

// envoyFlagsOf lists the settings of a limit's path beyond its limit, or
// "-": the leaf's, and share_threshold=<key> for each entry whose values
// share the count.
func envoyFlagsOf(p envoy.Path) string {
	d := p.Node()
	var fl []string
	if d.ShadowMode {
		fl = append(fl, "shadow")
	}
	if d.QuotaMode {
		fl = append(fl, "quota")
	}
	for _, n := range p.Nodes {
		if n.ShareThreshold {
			fl = append(fl, "share_threshold="+n.Key)
		}
	}
	if d.RateLimit.Name != "" {
		fl = append(fl, "name="+d.RateLimit.Name)
	}
	if len(d.RateLimit.Replaces) > 0 {
		fl = append(fl, "replaces="+strings.Join(d.RateLimit.Replaces, ","))
	}
	if len(fl) == 0 {
		return "-"
	}
	return strings.Join(fl, " ")
}

// count writes n things: "1 file", "2 files".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
