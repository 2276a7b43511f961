package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/service/envoy"
	"github.com/sluice-go/sluice/policy"
)

func runCheck(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flagSet("check", "Validate a config as serve would load it, report every error in it with its file and\nline, and print what it enforces. Of a sluice policy file: the effective rules, defaults\nfilled in, limits named as clients will see them. Of an envoyproxy/ratelimit file or\ndirectory of them: every rate limit, by domain and descriptors, with where it is defined.", stdout)
	path := fs.string("config", "SLUICE_CONFIG", "sluice.yaml", "sluice policy file, or envoyproxy/ratelimit file or directory of them")
	ef := &envoyFlags{fs: fs, merge: addMergeFlag(fs)}
	if err := fs.parse(args); err != nil {
		return err
	}
	isEnvoy := envoy.IsConfig(*path)
	if err := ef.forConfig(*path, isEnvoy); err != nil {
		return err
	}
	if isEnvoy {
		cfg, err := envoy.LoadConfig(*path, ef.loadOptions()...)
		if err != nil {
			return err
		}
		printEnvoy(stdout, *path, cfg)
		return nil
	}
	f, err := config.Load(*path)
	if err != nil {
		return err
	}
	printFile(stdout, f)
	return nil
}

// printFile writes the effective configuration of f.
func printFile(w io.Writer, f *config.File) {
	store := "in-memory (limits hold per process: N replicas admit N x the limit)"
	if f.Redis.URL != "" {
		store = "redis, on_error " + f.Redis.OnError + ", timeout " + f.Redis.Timeout.String()
		if f.Redis.WaitReplicas > 0 {
			store += fmt.Sprintf(", wait_replicas %d within %s", f.Redis.WaitReplicas, f.Redis.WaitTimeout)
		}
	}
	fmt.Fprintf(w, "%s: ok, %d rules\nstore: %s\nheaders: %s", f.Path, len(f.Rules), store, f.HTTP.Headers)
	if f.HTTP.ProblemJSON {
		fmt.Fprint(w, ", problem+json")
	}
	if len(f.HTTP.TrustedProxies) > 0 {
		proxies := make([]string, len(f.HTTP.TrustedProxies))
		for i, p := range f.HTTP.TrustedProxies {
			proxies[i] = p.String()
		}
		fmt.Fprintf(w, "; trusted proxies %s", strings.Join(proxies, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tMATCH\tKEY\tCOST\tLIMITS")
	for _, r := range f.Rules {
		match := r.Match
		switch {
		case r.Key.Source == policy.KeyRequest:
			match = "(by name)" // POST /v1/check and Envoy's gRPC only
		case match == "":
			match = "(default)"
		}
		key := r.Key.String()
		if r.Key.Source.Named() {
			key += ", missing: " + r.MissingKey.String()
		}
		if r.Group != "" {
			key += ", group " + r.Group
		}
		name := r.Name
		if r.Shadow {
			name += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", name, match, key, r.Cost, limits(r.Limits))
		for _, p := range r.Plans {
			who := append(append([]string(nil), p.Keys...), prefixed(p.Prefixes)...)
			fmt.Fprintf(tw, "  plan %s\t%s\t\t\t%s\n", p.Name, strings.Join(who, " "), limits(p.Limits))
		}
		if p := r.Priority; p != nil {
			fmt.Fprintf(tw, "  priority\t%s\t\t\t%s\n", classSources(p), shares(p))
		}
	}
	tw.Flush()
}

// classSources says where p's classes come from.
func classSources(p *policy.Priority) string {
	var from []string
	if p.From != nil {
		from = append(from, p.From.String())
	}
	if len(p.Routes) > 0 {
		from = append(from, fmt.Sprintf("routes: %d", len(p.Routes)))
	}
	if from == nil {
		return "(every request: " + p.Shares()[len(p.Classes)].Class + ")"
	}
	return strings.Join(from, ", ")
}

// shares lists p's classes with the share of the rule's limits each may
// use, and the status of a shed request.
func shares(p *policy.Priority) string {
	var parts []string
	for _, c := range p.Shares() {
		parts = append(parts, fmt.Sprintf("%s %.4g%%", c.Class, c.Share*100))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; shed %d", p.ShedStatus())
}

func limits(ls []sluice.Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, " AND ")
}

func prefixed(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p + "*"
	}
	return out
}
