// Package demo holds what the framework examples share apart from their
// routers: their flags, the policy file opened with the Redis URL from
// the environment, and a server that stops with its context.
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/policyfile"
)

// RedisURLEnv is the environment variable that names the Redis server the
// examples keep their counts in, the one `sluice serve` reads too. Unset
// or empty: the policy file's own redis.url, else the in-memory store.
const RedisURLEnv = "SLUICE_REDIS_URL"

// RedisFromEnv is a policyfile.WithRedis override: the policy file's
// redis section, with the URL of RedisURLEnv when it is set.
func RedisFromEnv(r config.Redis) config.Redis {
	if u := os.Getenv(RedisURLEnv); u != "" {
		r.URL = u
	}
	return r
}

// Run is an example's program: flags --config (default sluice.yaml) and
// --listen (default listen), the policy file's rules on the in-memory
// store or on Redis when RedisURLEnv names one, reloaded as the file is
// saved, and the router newRouter returns over the policy's middleware,
// served until ctx ends.
func Run(ctx context.Context, name, listen string, args []string, stdout io.Writer, newRouter func(limit func(http.Handler) http.Handler) http.Handler) error {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	configPath := flags.String("config", "sluice.yaml", "policy file")
	addr := flags.String("listen", listen, "address to listen on")
	if err := flags.Parse(args); err != nil {
		return err
	}
	p, err := policyfile.Open(*configPath, policyfile.WithRedis(RedisFromEnv))
	if err != nil {
		return err
	}
	defer p.Close()
	p.Watch(ctx, 2*time.Second, nil) // edits to the file apply as they are saved
	return Serve(ctx, *addr, newRouter(p.Middleware), stdout)
}

// Serve serves h on listen, printing "listening on http://<address>" to
// stdout once it accepts connections, until ctx ends; then it shuts the
// server down, letting requests in flight finish for up to 5 seconds.
func Serve(ctx context.Context, listen string, h http.Handler, stdout io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
