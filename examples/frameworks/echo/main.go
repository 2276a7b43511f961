// Command echo serves a small API routed by echo (v4) and limited by
// sluice. echo wraps net/http middleware itself:
// e.Use(echo.WrapMiddleware(p.Middleware)) answers as sluice's httplimit
// does (the RateLimit and X-RateLimit-* headers, the 429 with Retry-After
// and a JSON body) and calls no handler when it denies.
//
//	cd examples/frameworks
//	go run ./echo                                               # in-memory store
//	SLUICE_REDIS_URL=redis://127.0.0.1:6379/0 go run ./echo     # shared by every replica
//	for i in 1 2 3 4; do curl -si -X POST localhost:8093/api/auth/login | head -1; done
package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice/examples/frameworks/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		slog.Error("echo example", "err", err)
		os.Exit(1)
	}
}

// run serves the API until ctx ends (see demo.Run).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demo.Run(ctx, "echo", "127.0.0.1:8093", args, stdout, newRouter)
}

// newRouter returns the API, every request passed through limit first.
func newRouter(limit func(http.Handler) http.Handler) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echo.WrapMiddleware(limit))
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/api/items", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"route": "items"})
	})
	e.GET("/api/items/:id", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"route": "item", "id": c.Param("id")})
	})
	e.POST("/api/auth/login", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"route": "login"})
	})
	return e
}
