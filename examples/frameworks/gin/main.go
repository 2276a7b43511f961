// Command gin serves a small API routed by gin and limited by sluice.
// gin's handlers take a *gin.Context, not an http.Handler: ginlimit.Wrap
// adapts sluice's net/http middleware, r.Use(ginlimit.Wrap(p.Middleware)),
// which then answers as sluice's httplimit does (the RateLimit and
// X-RateLimit-* headers, the 429 with Retry-After and a JSON body) and
// stops gin's chain when it denies.
//
//	cd examples/frameworks
//	go run ./gin                                                # in-memory store
//	SLUICE_REDIS_URL=redis://127.0.0.1:6379/0 go run ./gin      # shared by every replica
//	for i in 1 2 3 4; do curl -si -X POST localhost:8092/api/auth/login | head -1; done
package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice/examples/frameworks/ginlimit"
	"github.com/sluice-go/sluice/examples/frameworks/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		slog.Error("gin example", "err", err)
		os.Exit(1)
	}
}

// run serves the API until ctx ends (see demo.Run).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return demo.Run(ctx, "gin", "127.0.0.1:8092", args, stdout, newRouter)
}

// newRouter returns the API, every request passed through limit first.
func newRouter(limit func(http.Handler) http.Handler) http.Handler {
	r := gin.New()
	r.Use(ginlimit.Wrap(limit))
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/api/items", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"route": "items"}) })
	r.GET("/api/items/:id", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"route": "item", "id": c.Param("id")})
	})
	r.POST("/api/auth/login", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"route": "login"}) })
	return r
}
