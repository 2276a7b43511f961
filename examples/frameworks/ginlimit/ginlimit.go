// Package ginlimit runs net/http middleware in gin, whose handlers take a
// *gin.Context rather than an http.Handler: sluice's rate limiting
// (policyfile.Policy.Middleware, httplimit.New) in a gin router is
//
//	r := gin.New()
//	r.Use(ginlimit.Wrap(p.Middleware))
//
// and answers as it does under net/http: the RateLimit and X-RateLimit-*
// headers on every limited response, and a denied request's 429, with
// Retry-After and a JSON body, written before any handler runs.
package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Wrap returns gin middleware that runs mw around the rest of gin's chain.
// When mw calls its next handler, the chain goes on (c.Next) with the
// request mw passed; when mw answers the request itself (sluice's 429, a
// 401 for a missing API key), the chain is aborted: the handlers after it
// do not run, and gin writes nothing more.
//
// mw must write to the http.ResponseWriter it is given, gin's c.Writer,
// and pass that writer on, as sluice's middleware does: the rest of the
// chain writes to c.Writer, not to a writer mw wraps (a compressing
// middleware needs gin middleware of its own).
func Wrap(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		passed := false
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
		}
	}
}
