// Command chi serves a small API routed by chi and limited by sluice. chi
// takes net/http middleware as it is: r.Use(p.Middleware), where p is the
// policy file at work, answers as sluice's httplimit does (the RateLimit
// and X-RateLimit-* headers, the 429 with Retry-After and a JSON body).
//
//	cd examples/frameworks
//	go run ./chi                                                # in-memory store
//	SLUICE_REDIS_URL=redis://127.0.0.1:6379/0 go run ./chi      # shared by every replica
//	for i in 1 2 3 4; do curl -si -X POST localhost:8091/api/auth/login | head -1; done
package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-go/sluice/examples/frameworks/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		slog.Error("chi example", "err", err)
		os.Exit(1)
	}
}

// run serves the API until ctx ends (see demo.Run).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demo.Run(ctx, "chi", "127.0.0.1:8091", args, stdout, newRouter)
}

// newRouter returns the API, every request passed through limit first.
func newRouter(limit func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(limit) // sluice's net/http middleware, as it is
	r.Get("/healthz", reply(map[string]string{"status": "ok"}))
	r.Get("/api/items", reply(map[string]string{"route": "items"}))
	r.Get("/api/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(map[string]string{"route": "item", "id": chi.URLParam(r, "id")})(w, r)
	})
	r.Post("/api/auth/login", reply(map[string]string{"route": "login"}))
	return r
}

// reply answers v as JSON.
func reply(v any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
}
