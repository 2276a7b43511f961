package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluice-go/sluice/internal/service/admin"
)

func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("top", "Print the most limited client keys of a running sluice serve: the (rule, key)\npairs denied most over the last minutes, counted in a bounded structure (Space-Saving:\neach count is an upper bound, at least count - error). Keys are masked unless the\nserver runs with --show-keys; sluice inspect and reset take a key as top shows it,\nmasked or not. It sends "+admin.TokenEnv+" as its bearer token when set (a server with\n--admin-auth all asks for it).", stdout)
	of := addOperatorFlags(fs)
	n := new(int)
	fs.intVar(n, "keys", "SLUICE_TOP_KEYS", admin.DefaultTopN, "how many keys to print")
	watch := fs.duration("watch", "SLUICE_TOP_WATCH", 0, "print again every so often until interrupted, such as 2s (0: once)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return usageError{fmt.Errorf("--keys %d: print at least one key", *n)}
	}
	if *watch < 0 {
		return usageError{fmt.Errorf("--watch %v is negative", *watch)}
	}
	q := url.Values{"n": {strconv.Itoa(*n)}}
	for {
		var top admin.TopKeys
		b, err := of.call(ctx, http.MethodGet, admin.TopPath, q, nil, os.Getenv(admin.TokenEnv), &top)
		if err != nil {
			return err
		}
		if *of.json {
			if _, err := stdout.Write(b); err != nil {
				return err
			}
		} else {
			printTop(stdout, top)
		}
		if *watch == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
			fmt.Fprintln(stdout)
		}
	}
}

// printTop writes top as a line of what it covers and a table.
func printTop(w io.Writer, top admin.TopKeys) {
	masked := ""
	if top.Masked {
		masked = ", keys masked (sluice inspect and reset take them as shown)"
	}
	fmt.Fprintf(w, "%d limiting decisions over the last %s%s\n", top.Counted, (time.Duration(top.SpanSeconds * float64(time.Second))).Round(time.Second), masked)
	if len(top.Keys) == 0 {
		fmt.Fprintln(w, "no key has been limited")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKEY\tDENIED\t±")
	for _, k := range top.Keys {
		rule := k.Rule
		if k.Shadow {
			rule += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", rule, k.Key, k.Denied, k.Error)
	}
	tw.Flush()
}
