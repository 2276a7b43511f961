// Command service is a small API protected by sluice's net/http middleware
// with the tiers of examples/sluice.yaml: status, search, orders and login
// each limited as the file says, everything else by the default rule.
//
//	go run ./examples/service                                   # in-memory store
//	go run ./examples/service -redis redis://127.0.0.1:6379/0   # shared by every replica
//
// Then, for example:
//
//	for i in 1 2 3 4 5 6 7; do curl -si -X POST localhost:8090/api/auth/login | head -1; done
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/policyfile"
)

func main() {
	if err := run(); err != nil {
		slog.Error("service", "err", err)
		os.Exit(1)
	}
}

func run() error {
	configPath := flag.String("config", "examples/sluice.yaml", "policy file")
	redisURL := flag.String("redis", "", "Redis URL; overrides the file's redis.url (empty: in-memory store)")
	listen := flag.String("listen", "127.0.0.1:8090", "address to listen on")
	flag.Parse()

	// One call: the file's store (Redis when redis.url is set, with its
	// on_error policy and timeout), its rules and its http section.
	p, err := policyfile.Open(*configPath, policyfile.WithRedis(func(r config.Redis) config.Redis {
		if *redisURL != "" {
			r.URL = *redisURL
		}
		return r
	}))
	if err != nil {
		return err
	}
	defer p.Close()

	mux := http.NewServeMux()
	reply := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	mux.Handle("GET /api/status", reply(map[string]string{"status": "ok"}))
	mux.Handle("GET /api/search", reply(map[string]any{"results": []string{}}))
	mux.Handle("POST /api/orders", reply(map[string]string{"order": "accepted"}))
	mux.Handle("POST /api/auth/login", reply(map[string]string{"token": "example"}))
	mux.Handle("/", reply(map[string]string{"hello": "sluice"}))

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p.Middleware(mux), ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("listening on http://%s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p.Watch(ctx, 2*time.Second, nil) // edits to the file apply as they are saved
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
