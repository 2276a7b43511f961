package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/internal/service/admin"
)

// The operator commands (inspect, reset, top) are clients of a running
// sluice serve's operator API: its store may be the in-memory one, which
// only the process holding it can read.

// operatorTimeout bounds each call of the operator API.
const operatorTimeout = 10 * time.Second

// operatorFlags are the flags every operator command has.
type operatorFlags struct {
	server *string
	json   *bool
	tls    *clientTLSFlags
}

func addOperatorFlags(fs *cmdFlags) operatorFlags {
	return operatorFlags{
		server: fs.string("server", "SLUICE_SERVER", "http://"+serveListen, "base URL of the running sluice serve (its --listen, or its --dashboard-listen when the dashboard has a listener of its own; https:// for a serve with --tls-cert)"),
		json:   fs.boolean("json", "SLUICE_JSON", false, "print the API's JSON answer instead of a table"),
		tls:    addClientTLSFlags(fs, "SLUICE_CLIENT_"),
	}
}

// call sends a request of the operator API at path to the server of of,
// with body as JSON when not nil and the bearer token when token is not
// empty (every command sends its TokenEnv when set: a server started
// with --admin-auth all asks for it on reads too), decodes a 200 answer into out and returns it as it came (what
// --json prints: checked as out's JSON, so that no other answer is
// printed as the API's). Any other answer is an error that says what the
// server said.
func (of operatorFlags) call(ctx context.Context, method, path string, query url.Values, body any, token string, out any) ([]byte, error) {
	base, err := url.Parse(*of.server)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, usageError{fmt.Errorf("--server %q is not an http or https URL, such as http://127.0.0.1:8080", *of.server)}
	}
	client, err := of.client()
	if err != nil {
		return nil, err
	}
	u := base.JoinPath(path)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, operatorTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking %s: %w", base.Redacted(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", base.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		switch {
		case resp.StatusCode == http.StatusNotFound:
			// A sluice serve with --dashboard=false, one whose dashboard
			// has a listener of its own, or no sluice serve at all.
			hint = "; the operator API is served with the dashboard (sluice serve --dashboard, on by default), on its --dashboard-listen when it has one: is --server that address?"
		case resp.StatusCode == http.StatusUnauthorized && token == "":
			hint = "; this command sends the server's token from its own " + admin.TokenEnv + ", which is not set"
		}
		var e httpjson.ErrorBody
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("%s %s of %s: %s (%s)%s", method, path, base.Redacted(), e.Error.Message, resp.Status, hint)
		}
		return nil, fmt.Errorf("%s %s of %s: %s: %.200s%s", method, path, base.Redacted(), resp.Status, strings.TrimSpace(string(b)), hint)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("%s %s: the answer is not what this sluice understands (%w); is --server a sluice serve of the same version?", method, path, err)
	}
	return b, nil
}

// client returns the HTTP client of one call: over TLS with the --tls-*
// flags' files for an https --server.
func (of operatorFlags) client() (*http.Client, error) {
	c, err := of.tls.config("--server", *of.server)
	if err != nil || c == nil {
		return &http.Client{}, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = c
	return &http.Client{Transport: tr}, nil
}

// clientFlags are the --rule, --key and --composite of inspect and reset.
type clientFlags struct {
	rule, key *string
	composite *bool
}

func addClientFlags(fs *cmdFlags) clientFlags {
	return clientFlags{
		rule:      fs.string("rule", "SLUICE_RULE", "", "the rule's name (required)"),
		key:       fs.string("key", "SLUICE_KEY", "", "the client key as the rule's key source yields it: an IP address for a rule keyed by ip, the header or query value, or the key callers name for a rule keyed by request (ignored for a global rule); or the key masked, as sluice top and the dashboard show it (#fec52565aa0c), which the server finds among the keys its top tracks"),
		composite: fs.boolean("composite", "SLUICE_COMPOSITE", false, "--key joins the entries of an Envoy descriptor, as sluice top --show-keys shows such a key (3:key=5:value;...)"),
	}
}

func needRule(rule string) error {
	if rule == "" {
		return usageError{errors.New("--rule is required")}
	}
	return nil
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("inspect", "Show a client's state under each limit of a rule of a running sluice serve, without\nspending anything: what remains, when it resets, and whether the next request of\n--cost would pass (and if not, when it would). It sends "+admin.TokenEnv+" as its\nbearer token when set (a server with --admin-auth all asks for it).", stdout)
	of := addOperatorFlags(fs)
	cf := addClientFlags(fs)
	cost := fs.string("cost", "SLUICE_COST", "", "the cost of the request asked about (empty: the rule's cost)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := needRule(*cf.rule); err != nil {
		return err
	}
	q := url.Values{"rule": {*cf.rule}, "key": {*cf.key}}
	if *cf.composite {
		q.Set("composite", "true")
	}
	if *cost != "" {
		if _, err := strconv.Atoi(*cost); err != nil {
			return usageError{fmt.Errorf("--cost %q is not an integer", *cost)}
		}
		q.Set("cost", *cost)
	}
	var in admin.Inspection
	b, err := of.call(ctx, http.MethodGet, admin.InspectPath, q, nil, os.Getenv(admin.TokenEnv), &in)
	if err != nil {
		return err
	}
	if *of.json {
		_, err := stdout.Write(b)
		return err
	}
	printInspection(stdout, in)
	return nil
}

// printInspection writes in as a sentence and a table of its limits.
func printInspection(w io.Writer, in admin.Inspection) {
	verdict := "would pass"
	if !in.Allowed {
		verdict = "would be denied, and pass in " + msString(in.RetryAfterMS)
	}
	shadow := ""
	if in.Shadow {
		shadow = " (shadow mode: it is never denied)"
	}
	fmt.Fprintf(w, "rule %s, key %q: a request of cost %d %s%s\n\n", in.Rule, in.Key, in.Cost, verdict, shadow)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tALGORITHM\tLIMIT/PERIOD\tREMAINING\tRESETS IN\tNEXT")
	for _, l := range in.Limits {
		rate := strconv.Itoa(l.Limit) + "/" + l.Period
		if l.Burst != 0 && l.Burst != l.Limit {
			rate += " burst " + strconv.Itoa(l.Burst)
		}
		next := "passes"
		if !l.Allowed {
			next = "denied, retry in " + msString(l.RetryAfterMS)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", l.Name, l.Algorithm, rate, l.Remaining, msString(l.ResetAfterMS), next)
	}
	tw.Flush()
}

// msString writes ms milliseconds as a Go duration ("1.5s", "0s").
func msString(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

func runReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("reset", "Forget a client's state under every limit of a rule of a running sluice serve: its\nnext request starts from a full quota. The server must have been started with\n"+admin.TokenEnv+" set, and this command sends the same token from its own\nenvironment. With several replicas over one Redis the reset is shared; each other\nreplica's cached denials of the key (the deny cache) last until their retry-after.", stdout)
	of := addOperatorFlags(fs)
	cf := addClientFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := needRule(*cf.rule); err != nil {
		return err
	}
	token := os.Getenv(admin.TokenEnv)
	if token == "" {
		return usageError{fmt.Errorf("%s is not set: reset sends the bearer token the server was started with", admin.TokenEnv)}
	}
	body := admin.ResetRequest{Rule: *cf.rule, Key: *cf.key, Composite: *cf.composite}
	var out admin.ResetResponse
	b, err := of.call(ctx, http.MethodPost, admin.ResetPath, nil, body, token, &out)
	if err != nil {
		return err
	}
	if *of.json {
		_, err := stdout.Write(b)
		return err
	}
	fmt.Fprintf(stdout, "reset rule %s, key %q: %d limit(s) forgotten\n", out.Rule, out.Key, out.Limits)
	return nil
}
