package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/httpjson"
	"github.com/sluice-go/sluice/policy"
	"github.com/sluice-go/sluice/store/memory"
)

// AuthEnv is the environment variable of sluice serve's --admin-auth:
// which endpoints need the bearer token (see Auth).
const AuthEnv = "SLUICE_ADMIN_AUTH"

// Auth says which endpoints of a Handler need the bearer token (TokenEnv,
// WithToken).
type Auth uint8

const (
	// AuthWrites, the default, asks the token of the endpoints that
	// change state (POST ResetPath) only.
	AuthWrites Auth = iota
	// AuthAll asks it of every endpoint that shows something of the
	// traffic too: StatsPath, TopPath and InspectPath. The page and its
	// script, style sheet and icon, the same in every sluice of a version
	// and holding no data, are still served without it, so that the page
	// can ask for the token (it keeps it in the tab's sessionStorage and
	// sends it as the bearer token of its polls).
	AuthAll
)

var authNames = [...]string{AuthWrites: "writes", AuthAll: "all"}

// String returns the name ParseAuth reads: "writes" or "all".
func (a Auth) String() string {
	if int(a) < len(authNames) {
		return authNames[a]
	}
	return fmt.Sprintf("Auth(%d)", a)
}

// ParseAuth reads "writes" or "all" (see Auth).
func ParseAuth(s string) (Auth, error) {
	for a, name := range authNames {
		if s == name {
			return Auth(a), nil
		}
	}
	return 0, fmt.Errorf("%q is not writes (the token for resets only) or all (for every endpoint with data)", s)
}

// The limits of requests with a wrong bearer token, kept per Handler by a
// sluice.Limiter over an in-process memory store (GCRA: the whole limit
// at once, then one attempt every FailurePeriod / limit). Once either is
// exhausted every request that needs the token, from that address or from
// all, is answered 429 with Retry-After, whether its token is right or
// not, so that a guess cannot be told right until it would have been
// admitted; a request with the right token consumes nothing, nor does one
// with no Authorization at all.
const (
	// FailuresPerAddress is how many wrong tokens one client address
	// (an IPv6 address's /64) may send per FailurePeriod.
	FailuresPerAddress = 5
	// FailuresTotal is how many all addresses together may send per
	// FailurePeriod: an attacker with many addresses is held to it, at
	// the price of refusing the right token too while it is exhausted.
	FailuresTotal = 30
	// FailurePeriod is the period of both.
	FailurePeriod = time.Minute
	// failureAddresses bounds the addresses whose failures are kept; past
	// it the least recently seen are forgotten (FailuresTotal still holds).
	failureAddresses = 1 << 14
	// totalKey is the key of FailuresTotal's state, which no address's
	// key (an address or a prefix) can be; logKey prefixes the keys of
	// the refusals' log limits.
	totalKey = "*"
	logKey   = "log "
)

// The limits of the failures, and of the log lines of the 429s: at most
// one per address per FailurePeriod, and FailuresTotal from all (a flood
// of refused requests is not a flood of log lines).
var (
	perAddressLimit = sluice.Per(FailuresPerAddress, FailurePeriod).Using(sluice.GCRA).Named("admin-token-address")
	totalLimit      = sluice.Per(FailuresTotal, FailurePeriod).Using(sluice.GCRA).Named("admin-token-total")
	logAddressLimit = sluice.Per(1, FailurePeriod).Using(sluice.GCRA).Named("admin-token-log")
	logTotalLimit   = sluice.Per(FailuresTotal, FailurePeriod).Using(sluice.GCRA).Named("admin-token-log-total")
)

// door asks for the bearer token where a Handler needs it, and limits the
// requests with a wrong one.
type door struct {
	token string
	log   *slog.Logger
	plain bool // addresses in the clear in the log

	// mu makes each judgement of a token one step: whether a failure
	// would still be admitted, the comparison, and the failure counted.
	mu       sync.Mutex
	failures *sluice.Limiter
}

// newDoor returns the door of token, whose failures are counted at the
// times now returns (nil: the real time).
func newDoor(token string, log *slog.Logger, plain bool, now func() time.Time) *door {
	var (
		mopts = []memory.Option{memory.WithCapacity(failureAddresses)}
		lopts []sluice.Option
	)
	if now != nil {
		mopts, lopts = append(mopts, memory.WithClock(now)), append(lopts, sluice.WithClock(now))
	}
	return &door{token: token, log: log, plain: plain, failures: sluice.New(memory.New(mopts...), lopts...)}
}

// require passes to next the requests that carry the token. Without a
// token (off), it answers 403 with code and off's message.
func (d *door) require(next http.Handler, code, off string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.token == "" {
			httpjson.Error(w, http.StatusForbidden, code, off)
			return
		}
		if d.admit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// admit reports whether r carries the token, and otherwise answers it:
// 401 without the token or with a wrong one, 429 while the failures of
// its address, or of all, are exhausted.
func (d *door) admit(w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		unauthorized(w, needsToken)
		return false
	}
	key := addressKey(r.RemoteAddr)
	right, res, err := d.judge(context.WithoutCancel(r.Context()), auth, key)
	addr := shownAddr(r.RemoteAddr, d.plain)
	switch {
	case right:
		return true
	case err != nil:
		// The memory store does not fail; should it, refuse.
		httpjson.Error(w, http.StatusServiceUnavailable, "UNAVAILABLE", "counting failed token attempts: "+err.Error())
	case res.Allowed:
		left := min(res.Results[0].Remaining, res.Results[1].Remaining)
		d.log.Warn("sluice: admin request refused: a wrong bearer token", "path", r.URL.Path, "remote", addr, "attempts_left", left)
		unauthorized(w, fmt.Sprintf("%s; the token given is not it (%d more wrong ones from this address are answered so, then 429)", needsToken, left))
	default:
		d.tooMany(w, r, res, key, addr)
	}
	return false
}

// judge reports whether auth carries the token, unless the failures of
// the address of key, or of all, are exhausted (res then denies), and
// counts it when it does not (res then admits the failure, or denies it
// had another judgement come first). One judgement at a time: otherwise
// concurrent guesses would all be compared before the first was counted.
func (d *door) judge(ctx context.Context, auth, key string) (right bool, res sluice.MultiResult, err error) {
	parts := []sluice.Part{
		{Key: key, Limits: []sluice.Limit{perAddressLimit}, Cost: 1},
		{Key: totalKey, Limits: []sluice.Limit{totalLimit}, Cost: 1},
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if res, err = d.failures.Peek(ctx, parts...); err != nil || !res.Allowed {
		return false, res, err
	}
	if d.authorized(auth) {
		return true, res, nil
	}
	res, err = d.failures.AllowParts(ctx, parts...)
	return false, res, err
}

// tooMany answers the 429 of a request refused by res, the failures'
// decision for the address of key, shown as addr, and logs it unless
// its log limits are exhausted.
func (d *door) tooMany(w http.ResponseWriter, r *http.Request, res sluice.MultiResult, key, addr string) {
	secs := httplimit.RetryAfterSeconds(res.RetryAfter)
	whose := fmt.Sprintf("this address (%d per %v)", FailuresPerAddress, FailurePeriod)
	if res.Binding == 1 {
		whose = fmt.Sprintf("all addresses together (%d per %v)", FailuresTotal, FailurePeriod)
	}
	logged, err := d.failures.AllowParts(context.WithoutCancel(r.Context()),
		sluice.Part{Key: logKey + key, Limits: []sluice.Limit{logAddressLimit}, Cost: 1},
		sluice.Part{Key: logKey + totalKey, Limits: []sluice.Limit{logTotalLimit}, Cost: 1})
	if err == nil && logged.Allowed {
		d.log.Warn("sluice: admin request refused: too many wrong bearer tokens", "path", r.URL.Path, "remote", addr,
			"limit", []string{perAddressLimit.Name, totalLimit.Name}[res.Binding], "retry_after", res.RetryAfter)
	}
	w.Header().Set("Retry-After", fmt.Sprint(secs))
	httpjson.Write(w, http.StatusTooManyRequests, "application/json", httpjson.ErrorBody{Error: httpjson.ErrorDetail{
		Code: "RATE_LIMITED",
		Message: fmt.Sprintf("too many requests with a wrong bearer token from %s: every request that needs the token is refused, the right one too; retry after %d second(s)",
			whose, secs),
		RetryAfter: secs,
	}})
}

// needsToken says what a 401 wants.
const needsToken = "this endpoint needs the header Authorization: Bearer <the server's " + TokenEnv + ">"

// unauthorized answers 401 saying msg.
func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	httpjson.Error(w, http.StatusUnauthorized, "UNAUTHORIZED", msg)
}

// authorized reports whether the Authorization field auth carries d's
// token as a bearer token (the scheme's case does not matter, RFC 9110
// 11.1). The comparison takes the same time whatever the token given,
// its length included: it compares digests of one length.
func (d *door) authorized(auth string) bool {
	scheme, given, _ := strings.Cut(auth, " ")
	a, b := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(d.token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && strings.EqualFold(scheme, "Bearer")
}

// shownAddr returns the host of remote (a RemoteAddr) as the log shows
// it: as a client key, masked (policy.MaskKey) unless plain.
func shownAddr(remote string, plain bool) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if plain {
		return host
	}
	return policy.MaskKey(host)
}

// addressKey returns the key of remote's failures: its IP address, or
// the /64 of an IPv6 one (which one host often holds whole), or remote
// itself when it is no address.
func addressKey(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
