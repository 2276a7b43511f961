'use strict';

// sluice for Node.js: a client of the decision service (`sluice serve`,
// POST /v1/check) and an Express middleware built on it, with Node's own
// http and https modules and no dependencies (Node >= 18).
//
//   const sluice = require('./sluice');
//
//   const limiter = sluice.client({ url: 'http://127.0.0.1:8080' });
//   const d = await limiter.check({ rule: 'search', key: apiKey });
//   if (!d.allowed) { ... d.retryAfter seconds ... }
//
//   app.post('/api/auth/login',
//     sluice.express({ url: 'http://127.0.0.1:8080', rule: 'login', onError: 'deny' }),
//     login);
//
// A rule that settles (a policy file's settle section: an LLM call's
// tokens, known once the work is done) is reserved and then settled at
// what the work cost:
//
//   const d = await limiter.reserve({ rule: 'tokens', key: apiKey });
//   ... the work ...
//   if (d.reservation) await limiter.settle(d.reservation, used);
//
// and the middleware settles from the response (costFrom: a header or
// trailer, the body's bytes, or a function of the response).
//
// A rule with a concurrency limit ({algorithm: concurrency, limit: 2,
// ttl: 30s}: at most 2 in flight per key) holds a slot from the check
// until it is released, or its lease ends:
//
//   const lease = await limiter.acquire({ rule: 'exports', key: tenant });
//   if (!lease.allowed) { ... lease.retryAfter seconds ... }
//   const stop = limiter.keepAlive(lease); // renews every third of the lease
//   try { ... the work ... } finally { stop(); await limiter.release(lease); }
//
// and the middleware holds one for each request it admits under such a
// rule, until its response has finished or its client has gone.
//
// The middleware asks sluice about every request, copies the rate-limit
// header fields sluice answers (RateLimit-Policy, RateLimit,
// X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset and, on a
// denial, Retry-After) onto the response, and answers a denied request
// with the 429 of sluice's Go middleware (httplimit): the same header
// fields and the same JSON body,
//
//   {"error":{"code":"RATE_LIMITED","message":"rate limit exceeded; retry after 12 seconds","retry_after":12}}
//
// When sluice cannot be asked (refused, reset, no answer within the
// timeout, an answer that is not sluice's), onError decides: 'allow' (the
// default) lets the request through unlimited, 'deny' refuses it with
// 503 RATE_LIMITER_UNAVAILABLE. A rate limiter that is down should not
// take the service down with it, so the default fails open; fail closed
// where a guess costs more than an outage, such as a login.

const http = require('node:http');
const https = require('node:https');

/** How long a check waits for sluice's answer, in milliseconds, by default. */
const DEFAULT_TIMEOUT_MS = 100;

/** The answers to a sluice that cannot be asked, as sluice's own on_error names them. */
const ON_ERROR = Object.freeze(['allow', 'deny']);

/** The header fields of sluice's answer that a response carries on. */
const FORWARDED_FIELDS = Object.freeze([
  'RateLimit-Policy',
  'RateLimit',
  'X-RateLimit-Limit',
  'X-RateLimit-Remaining',
  'X-RateLimit-Reset',
  'Retry-After',
]);

/** How often the default onFailure logs, at most, in milliseconds. */
const FAILURE_LOG_INTERVAL_MS = 10000;

/**
 * The lease of a slot, in milliseconds, that keepAlive renews every third
 * of when neither it nor sluice's answer tells it: sluice's own default
 * ttl of a concurrency limit.
 */
const DEFAULT_SLOT_TTL_MS = 30000;

/** sluice's codes of a renewal that came after the slot's lease ended. */
const LOST_CODES = Object.freeze(['SLOT_LOST', 'RESERVATION_EXPIRED']);

/**
 * SluiceError is what a check throws when the check itself is wrong (an
 * unknown rule, a key the rule cannot use: sluice's 400s), and the error
 * of a decision that onError made because sluice could not be asked.
 * code is sluice's error code (BAD_REQUEST, ...) or TIMEOUT, UNAVAILABLE,
 * or Node's (ECONNREFUSED, ...); status is sluice's HTTP status, 0 when
 * it gave none.
 */
class SluiceError extends Error {
  constructor(message, { code, status = 0, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'SluiceError';
    this.code = code;
    this.status = status;
  }
}

/**
 * SlotLostError is the SluiceError of a renewal that came after the
 * slot's lease had ended: another request may hold the slot now, and the
 * work should stop (or acquire a new slot). code is sluice's: SLOT_LOST
 * (409), or RESERVATION_EXPIRED (410) when the reservation itself had
 * expired too (a rule whose longest period is the lease, such as one of a
 * concurrency limit alone).
 */
class SlotLostError extends SluiceError {
  constructor(message, options) {
    super(message, options);
    this.name = 'SlotLostError';
  }
}

// leases holds what a client knows of each lease (a decision of check
// whose reservation holds a slot, or any object given to renew, release,
// settle or keepAlive): chain, the promise of its last renewal, release
// or settle, so that each runs after the one before and takes the newest
// reservation; done, once it is released or settled; names, its
// concurrency limits' (null: not known).
const leases = new WeakMap();

// leaseState returns what is known of lease, made on first use.
function leaseState(lease) {
  let s = leases.get(lease);
  if (!s) {
    s = { chain: Promise.resolve(), done: false, names: null };
    leases.set(lease, s);
  }
  return s;
}

// serially runs fn after every renewal, release and settle of lease
// before it, and resolves or rejects as it does.
function serially(lease, fn) {
  const s = leaseState(lease);
  const run = s.chain.then(fn);
  s.chain = run.then(() => {}, () => {});
  return run;
}

/**
 * client returns a client of the sluice decision service at url.
 *
 * options:
 *   url      sluice's HTTP address, such as 'http://127.0.0.1:8080' (required)
 *   timeout  how long a check, a settle, a renewal or a release waits for
 *            the answer, in ms (default 100)
 *   onError  'allow' (default) or 'deny': the decision when sluice cannot be asked
 *   onFailure(err)  told of each check sluice could not answer; by default a
 *            warning on the console, at most one every 10 seconds
 *   ca       for an https:// url: the CA certificates (PEM, a string or a
 *            Buffer, or an array of them) to verify sluice's certificate
 *            against, instead of Node's own (sluice serve --tls-cert)
 *   cert, key  for an https:// url: a client certificate and its private
 *            key (PEM), for a sluice serve run with --tls-client-ca
 *
 * It keeps its connections to sluice open between checks; close() ends them.
 */
function client(options = {}) {
  const base = parseURL(options.url);
  const tls = tlsOptions(base, options);
  const timeout = options.timeout === undefined ? DEFAULT_TIMEOUT_MS : options.timeout;
  checkTimeout(timeout);
  const onError = options.onError === undefined ? 'allow' : options.onError;
  checkOnError(onError);
  const onFailure = options.onFailure === undefined ? throttledWarning() : options.onFailure;
  if (typeof onFailure !== 'function') {
    throw new TypeError(`sluice: onFailure must be a function, got ${typeof onFailure}`);
  }
  const warnRenew = throttledWarning('renewal', 'a slot is renewed until it is lost or refused');
  const renewWarning = (err) => { if (err) warnRenew(err); };
  const transport = base.protocol === 'https:' ? https : http;
  const agent = new transport.Agent({ keepAlive: true, ...tls });
  const endpoint = new URL('v1/check', base);
  const settleEndpoint = new URL('v1/settle', base);
  const settleBatchEndpoint = new URL('v1/settle/batch', base);
  const renewEndpoint = new URL('v1/renew', base);
  const releaseEndpoint = new URL('v1/release', base);

  /**
   * check asks sluice whether one request fits in rule for key, spending
   * cost (default: the rule's cost; 0 reports the state without spending).
   * It resolves to a decision:
   *
   *   allowed       whether the request may go on
   *   status        sluice's status (200, 429, 503), 0 when it was not asked
   *   headers       the rate-limit header fields to carry on, by FORWARDED_FIELDS name
   *   retryAfter    the seconds to wait when denied (Retry-After), else 0
   *   body          sluice's answer (limit, remaining, policies, ...), null when none
   *   raw           sluice's answer as it came (text), '' when none
   *   shadowDenied  a rule in shadow mode would have denied it
   *   degraded      sluice's store failed, or sluice could not be asked
   *   reservation   what settle takes, when a rule that settles admitted the
   *                 request (see reserve), and what release takes, when a
   *                 rule with a concurrency limit did (see acquire); else null
   *   ttl           the lease of the slot the request holds, in ms, when a
   *                 rule with a concurrency limit admitted it (see acquire);
   *                 else null
   *   lost          null, until a renewal finds the slot lost (see renew)
   *   error         why sluice could not be asked (a SluiceError), when it could not
   *
   * It rejects with a SluiceError, whatever onError says, when sluice
   * answers that the check is wrong (400: an unknown rule, a key that is
   * not an address for a rule keyed by ip, a cost the rule never admits).
   * checkOptions.onError overrides the client's for this check.
   */
  async function check({ rule, key, cost } = {}, checkOptions = {}) {
    checkRuleKey(rule, key, 'check');
    if (cost !== undefined && !(Number.isSafeInteger(cost) && cost >= 0)) {
      throw new TypeError(`sluice: the cost of rule "${rule}" must be a whole number >= 0, got ${describe(cost)}`);
    }
    const policy = checkOptions.onError === undefined ? onError : checkOptions.onError;
    checkOnError(policy);
    const request = { rule };
    if (key !== undefined) request.key = key;
    if (cost !== undefined) request.cost = cost;

    let res;
    try {
      res = await post(transport, agent, endpoint, JSON.stringify(request), timeout);
    } catch (err) {
      return failed(err, policy);
    }
    let body = null;
    try {
      body = JSON.parse(res.text);
    } catch {
      // not sluice's JSON: said below
    }
    const code = body && body.error && body.error.code;
    if ((res.status === 200 || res.status === 429) && body && typeof body.allowed === 'boolean') {
      const reservation = res.status === 200 && typeof body.reservation === 'string' && body.reservation !== '' ? body.reservation : null;
      // The reservation holds a slot when the rule has a concurrency
      // limit, which RateLimit-Policy names (qu="concurrent-requests").
      const names = reservation === null ? [] : slotNames(res.headers['ratelimit-policy']);
      const d = {
        allowed: res.status === 200,
        status: res.status,
        headers: forwarded(res.headers),
        retryAfter: res.status === 429 ? retryAfterOf(res.headers, body) : 0,
        body,
        raw: res.text,
        shadowDenied: body.shadow_denied === true,
        degraded: body.degraded === true,
        reservation,
        ttl: names.length > 0 ? slotTTL(body, names) || DEFAULT_SLOT_TTL_MS : null,
        lost: null,
      };
      if (names.length > 0) leaseState(d).names = names;
      return d;
    }
    if (res.status === 503 && code === 'RATE_LIMITER_UNAVAILABLE') {
      // sluice's own store failed and its error policy refused: sluice
      // decided, and its answer is carried on as it is.
      return {
        allowed: false,
        status: 503,
        headers: forwarded(res.headers),
        retryAfter: parseRetryAfter(res.headers['retry-after']),
        body,
        raw: res.text,
        shadowDenied: false,
        degraded: true,
        reservation: null,
        ttl: null,
        lost: null,
      };
    }
    if (res.status >= 400 && res.status < 500 && code) {
      throw new SluiceError(`sluice: rule "${rule}": ${body.error.message}`, { code, status: res.status });
    }
    // A busy sluice (SERVER_BUSY), a proxy's error page, anything else:
    // sluice did not decide.
    const what = code ? `${code}: ${body.error.message}` : JSON.stringify(res.text.slice(0, 200));
    return failed(new SluiceError(`sluice answered ${res.status} (${what})`, { code: code || 'UNAVAILABLE', status: res.status }), policy);
  }

  // failed is the decision of policy when sluice could not be asked.
  function failed(err, policy) {
    const error = err instanceof SluiceError
      ? err
      : new SluiceError(`sluice at ${base.origin} cannot be asked: ${err.message}`, { code: err.code || 'UNAVAILABLE', cause: err });
    try {
      onFailure(error);
    } catch {
      // a failing logger is no reason to fail the request
    }
    return {
      allowed: policy === 'allow',
      status: 0,
      headers: {},
      retryAfter: 0,
      body: null,
      raw: '',
      shadowDenied: false,
      degraded: true,
      reservation: null,
      ttl: null,
      lost: null,
      error,
    };
  }

  /**
   * reserve is check for a rule that settles (a policy file's settle
   * section): the request is admitted or denied at cost (default: the
   * rule's reserve, 1 for a post-paid rule), which it holds until settled,
   * and an admitted one's decision carries d.reservation, for settle once
   * the work is done. A reservation never settled keeps what it reserved.
   * d.reservation is null when nothing was reserved: denied, the rule does
   * not settle, or sluice's error policy or this client's onError decided.
   * A cost of 0 would reserve nothing, and is an error.
   */
  async function reserve(args = {}, checkOptions = {}) {
    checkRuleKey(args.rule, args.key, 'reserve');
    if (args.cost === 0) {
      throw new TypeError(`sluice: a reserve of rule "${args.rule}" needs a cost of at least 1 (or none: the rule's reserve); a cost of 0 reserves nothing`);
    }
    return check(args, checkOptions);
  }

  /**
   * settle settles a reservation (a decision's d.reservation, or the
   * decision itself: see renew) at cost, what the work actually cost: the
   * difference from the reserve is given back, or charged as a debt when
   * the work cost more (never denied; the key's next requests are denied
   * until it is repaid). It resolves to the state after the settle, as a
   * request of cost 0 sees it:
   *
   *   allowed     false while the key is in debt
   *   cost        the cost settled at
   *   retryAfter  the seconds until the debt is repaid when not allowed, else 0
   *   body        sluice's answer (limit, remaining, reset_after_ms, policies, ...)
   *   raw         sluice's answer as it came (text)
   *
   * A reservation settles once, on whichever replica of sluice: a retry
   * rejects with a SluiceError of code ALREADY_SETTLED (409), and gives
   * nothing back, so a settle whose answer was lost may be retried safely.
   * It rejects with code RESERVATION_EXPIRED (410) once the longest period
   * of its limits has passed, RESERVATION_STALE (409) when its rules no
   * longer settle or their limits changed, INVALID_RESERVATION (400) for a
   * string sluice did not issue; each keeps what it reserved. A sluice that
   * cannot be asked rejects too (TIMEOUT, UNAVAILABLE, ECONNREFUSED, ...):
   * onError decides checks, not settles. A settle releases the slots the
   * reservation holds under concurrency limits too.
   */
  async function settle(reservation, cost) {
    if (!(typeof reservation === 'string' && reservation !== '') && !(isObject(reservation) && typeof reservation.reservation === 'string' && reservation.reservation !== '')) {
      throw new TypeError(`sluice: settle needs a reservation (a decision's d.reservation, a non-empty string, or the decision), got ${describe(reservation)}`);
    }
    checkSettleCost(cost, 'the cost of a settle', false);
    return onLease(reservation, 'settle', true, async (r) => {
      const { body, raw } = await ask(settleEndpoint, { reservation: r, cost }, 'settle');
      return settlement(body, cost, raw);
    });
  }

  /**
   * acquire is check for a rule with a concurrency limit ({algorithm:
   * concurrency, limit: N, ttl: 30s}: at most N requests of a key in
   * flight): an admitted request holds one of the key's N slots, whatever
   * its cost, until it is released or its lease (ttl) ends, and a request
   * while all N are held is denied, d.retryAfter the seconds until the
   * first lease ends (a release may free one sooner). The decision is the
   * lease: d.reservation, what renew, release and keepAlive take (or take
   * d itself, which they keep up to date), and d.ttl, the lease in ms, as
   * sluice answered it. A cost of 0 would acquire nothing, and is an
   * error.
   *
   * d.reservation is null when no slot is held: denied, or sluice's error
   * policy or this client's onError decided (release and keepAlive then
   * do nothing); d.ttl is null when the rule has no concurrency limit.
   */
  async function acquire(args = {}, checkOptions = {}) {
    checkRuleKey(args.rule, args.key, 'acquire');
    if (args.cost === 0) {
      throw new TypeError(`sluice: an acquire of rule "${args.rule}" needs a cost of at least 1 (or none: the rule's cost); a cost of 0 holds no slot`);
    }
    return check(args, checkOptions);
  }

  /**
   * renew extends the lease of the slots that lease holds (acquire's
   * decision, or its reservation) to a whole ttl from now, on any replica
   * of sluice, and resolves to the renewal:
   *
   *   allowed      true
   *   reservation  the reservation that replaces the one renewed, which
   *                sluice has settled: only the newest renews, releases
   *                or settles the slot (an older one is ALREADY_SETTLED)
   *   ttl          the lease from now, in ms (null for a renewal of a
   *                reservation string, whose limits this client does not know)
   *   body, raw    sluice's answer, parsed and as it came
   *
   * Given the decision, renew replaces its reservation (and ttl) with the
   * renewal's, and runs after each renewal, release and settle of it
   * before, with the newest reservation. A renewal that comes after the
   * lease ended rejects with a SlotLostError (code SLOT_LOST, or
   * RESERVATION_EXPIRED for a reservation expired too), set as the
   * decision's lost: another request may hold the slot, and the work
   * should stop. It rejects with a SluiceError of code ALREADY_SETTLED
   * (409) for a reservation released, settled or renewed already, and as
   * settle does otherwise (RESERVATION_STALE, TIMEOUT, ...).
   */
  async function renew(lease) {
    return onLease(lease, 'renew', false, async (reservation) => {
      let answer;
      try {
        answer = await ask(renewEndpoint, { reservation }, 'renewal');
      } catch (err) {
        if (!(err instanceof SluiceError && LOST_CODES.includes(err.code))) throw err;
        const what = err.code === 'SLOT_LOST' ? '' : '; its slot\'s lease has ended, and another request may hold it now';
        const lost = new SlotLostError(err.message + what, { code: err.code, status: err.status });
        if (isObject(lease)) lease.lost = lost;
        throw lost;
      }
      const { body, raw } = answer;
      if (typeof body.reservation !== 'string' || body.reservation === '') {
        throw new SluiceError(`sluice answered a renewal without a reservation (${JSON.stringify(raw.slice(0, 200))})`, { code: 'UNAVAILABLE', status: 200 });
      }
      const names = isObject(lease) ? leaseState(lease).names : null;
      const ttl = (names && slotTTL(body, names)) || null;
      if (isObject(lease)) {
        lease.reservation = body.reservation;
        if (ttl) lease.ttl = ttl;
      }
      return { allowed: body.allowed === true, reservation: body.reservation, ttl, body, raw };
    });
  }

  /**
   * release frees the slots that lease holds (acquire's decision, or its
   * newest reservation), on any replica of sluice: the work is over. It
   * is a settle at what the check reserved (the rule's rate limits keep
   * their count), and resolves to the state after it, as settle's (cost
   * null). Given the decision, it runs after each renewal of it under way,
   * with the newest reservation, and ends its keepAlive; a decision that
   * holds no reservation (denied, or admitted without sluice) resolves to
   * null, releasing nothing. A reservation releases once: a second
   * release, or one of a reservation renewed since, rejects with a
   * SluiceError of code ALREADY_SETTLED (409); otherwise it rejects as
   * settle does.
   */
  async function release(lease) {
    if (isObject(lease) && lease.reservation === null) return null;
    return onLease(lease, 'release', true, async (reservation) => {
      const { body, raw } = await ask(releaseEndpoint, { reservation }, 'release');
      return settlement(body, null, raw);
    });
  }

  /**
   * keepAlive renews lease (acquire's decision) every third of its ttl
   * (d.ttl, which each renewal updates; or keepOptions.ttl, in ms; or 30
   * s), replacing its reservation with each renewal's, until the returned
   * stop() is called, it is released or settled, or a renewal finds it
   * lost (a SlotLostError, set as d.lost) or refused (any other 4xx of
   * sluice's: ALREADY_SETTLED, ...). A renewal that fails otherwise
   * (TIMEOUT, UNAVAILABLE, STORE_UNAVAILABLE, ...) is tried again a third
   * of the ttl later, within the lease. keepOptions.onRenew(err, renewal)
   * is told of each renewal (by default a failure is a console warning,
   * at most one every 10 s). stop() returns at once, with a promise of the
   * end of the renewal under way, if any; the timer does not keep Node
   * running. A decision that holds no reservation has nothing to renew:
   * its stop does nothing.
   */
  function keepAlive(lease, keepOptions = {}) {
    if (!isObject(lease)) {
      throw new TypeError(`sluice: keepAlive needs a decision holding a slot (acquire's), got ${describe(lease)}`);
    }
    const { ttl } = keepOptions;
    if (ttl !== undefined && !(typeof ttl === 'number' && Number.isFinite(ttl) && ttl > 0)) {
      throw new TypeError(`sluice: the ttl of a keepAlive must be a number of milliseconds > 0, got ${describe(ttl)}`);
    }
    const onRenew = keepOptions.onRenew === undefined ? renewWarning : keepOptions.onRenew;
    if (typeof onRenew !== 'function') {
      throw new TypeError(`sluice: onRenew must be a function, got ${describe(onRenew)}`);
    }
    const state = leaseState(lease);
    if (typeof lease.reservation !== 'string' || lease.reservation === '' || state.done) {
      return () => Promise.resolve();
    }
    let stopped = false;
    let timer = null;
    let inflight = Promise.resolve();
    const tell = (err, renewal) => {
      try {
        onRenew(err, renewal);
      } catch {
        // a failing logger is no reason to stop renewing
      }
    };
    const schedule = () => {
      if (stopped || state.done) return;
      const every = (ttl || lease.ttl || DEFAULT_SLOT_TTL_MS) / 3;
      timer = setTimeout(tick, Math.max(1, Math.floor(every)));
      timer.unref();
    };
    const tick = () => {
      timer = null;
      if (stopped || state.done) return;
      inflight = renew(lease).then((renewal) => {
        tell(null, renewal);
        schedule();
      }, (err) => {
        tell(err, null);
        if (!(err instanceof TypeError) && !(err.status >= 400 && err.status < 500)) schedule();
      });
    };
    schedule();
    return function stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      timer = null;
      return inflight;
    };
  }

  // onLease runs fn with the reservation of lease: a reservation string
  // at once, a decision (any object holding a reservation) after each
  // renewal, release and settle of it before, with its newest, marking it
  // done first when ends (a release or a settle: no renewal follows).
  function onLease(lease, what, ends, fn) {
    if (typeof lease === 'string' && lease !== '') return fn(lease);
    if (!isObject(lease) || typeof lease.reservation !== 'string' || lease.reservation === '') {
      throw new TypeError(`sluice: ${what} needs a decision holding a reservation (acquire's), or its reservation (a non-empty string), got ${isObject(lease) ? `a decision whose reservation is ${describe(lease.reservation)}` : describe(lease)}`);
    }
    if (ends) leaseState(lease).done = true;
    return serially(lease, () => fn(lease.reservation));
  }

  /**
   * refund gives units back under rule for key without a reservation (a
   * caller that learns later that a request cost less than it spent): cost
   * units (default: the rule's cost), the current window's if it holds
   * that many, a bucket's at most to full. It resolves and rejects as
   * settle does; an unknown rule, a key the rule cannot use or a negative
   * cost reject with BAD_REQUEST.
   */
  async function refund({ rule, key, cost } = {}) {
    checkRuleKey(rule, key, 'refund');
    checkSettleCost(cost, `the cost of a refund of rule "${rule}"`, true);
    const req = { rule };
    if (key !== undefined) req.key = key;
    if (cost !== undefined) req.cost = cost;
    const { body, raw } = await ask(settleEndpoint, req, `refund of rule "${rule}"`);
    return settlement(body, cost === undefined ? null : cost, raw);
  }

  /**
   * settleBatch settles up to 100 settles in one request, each
   * { reservation, cost } (as settle) or { rule, key, cost } (as refund),
   * each on its own: one that fails leaves the others settled. It resolves
   * to one result per settle, in their order: a settlement (as settle's)
   * with status 200, or { status, error }, error a SluiceError of the
   * settle's code (ALREADY_SETTLED, ...). It rejects when the batch itself
   * fails: no settles, more than 100, a bad field, sluice not asked.
   */
  async function settleBatch(settles) {
    if (!Array.isArray(settles)) {
      throw new TypeError(`sluice: settleBatch needs an array of settles, got ${describe(settles)}`);
    }
    const wire = settles.map((s, i) => {
      if (typeof s !== 'object' || s === null) {
        throw new TypeError(`sluice: settles[${i}] must be { reservation, cost } or { rule, key, cost }, got ${describe(s)}`);
      }
      if (s.reservation !== undefined) {
        if (typeof s.reservation !== 'string' || s.reservation === '') {
          throw new TypeError(`sluice: settles[${i}].reservation must be a non-empty string, got ${describe(s.reservation)}`);
        }
        checkSettleCost(s.cost, `settles[${i}].cost`, false);
        return { reservation: s.reservation, cost: s.cost };
      }
      checkRuleKey(s.rule, s.key, `settles[${i}]`);
      checkSettleCost(s.cost, `settles[${i}].cost`, true);
      const w = { rule: s.rule };
      if (s.key !== undefined) w.key = s.key;
      if (s.cost !== undefined) w.cost = s.cost;
      return w;
    });
    const { body } = await ask(settleBatchEndpoint, { settles: wire }, 'settle batch');
    if (!Array.isArray(body.results) || body.results.length !== wire.length) {
      throw new SluiceError(`sluice answered a settle batch of ${wire.length} with ${JSON.stringify(body).slice(0, 200)}`, { code: 'UNAVAILABLE', status: 200 });
    }
    return body.results.map((r, i) => {
      if (r.status === 200) {
        const { status, ...rest } = r;
        return { status, ...settlement(rest, wire[i].cost === undefined ? null : wire[i].cost, '') };
      }
      const code = (r.error && r.error.code) || 'UNAVAILABLE';
      const message = (r.error && r.error.message) || `status ${r.status}`;
      return { status: r.status, error: new SluiceError(`sluice: settles[${i}]: ${message}`, { code, status: r.status }) };
    });
  }

  // ask posts request to url and resolves to sluice's 200 answer, parsed
  // (body) and as it came (raw); it rejects with a SluiceError of sluice's
  // code, or of TIMEOUT, UNAVAILABLE or Node's when sluice could not be
  // asked.
  async function ask(url, request, what) {
    let res;
    try {
      res = await post(transport, agent, url, JSON.stringify(request), timeout);
    } catch (err) {
      if (err instanceof SluiceError) throw err;
      throw new SluiceError(`sluice at ${base.origin} cannot be asked (${what}): ${err.message}`, { code: err.code || 'UNAVAILABLE', cause: err });
    }
    let body = null;
    try {
      body = JSON.parse(res.text);
    } catch {
      // not sluice's JSON: said below
    }
    if (res.status === 200 && body && typeof body === 'object') {
      return { body, raw: res.text };
    }
    const code = body && body.error && body.error.code;
    if (code) {
      throw new SluiceError(`sluice: ${what}: ${body.error.message}`, { code, status: res.status });
    }
    throw new SluiceError(`sluice answered ${res.status} to a ${what} (${JSON.stringify(res.text.slice(0, 200))})`, { code: 'UNAVAILABLE', status: res.status });
  }

  return {
    check,
    reserve,
    settle,
    refund,
    settleBatch,
    acquire,
    renew,
    release,
    keepAlive,
    url: base.href,
    timeout,
    onError,
    /** close ends the client's idle connections to sluice. */
    close() {
      agent.destroy();
    },
  };
}

// settlement returns the result of a settle of cost whose answer is body,
// raw as it came ('' for one of a batch).
function settlement(body, cost, raw) {
  const allowed = body.allowed === true;
  return {
    allowed,
    cost,
    retryAfter: allowed ? 0 : Math.max(1, Math.ceil((Number(body.retry_after_ms) || 0) / 1000)),
    body,
    raw,
  };
}

// slotNames returns the names of the concurrency limits in a
// RateLimit-Policy field: its items of quota unit "concurrent-requests".
// (A limit's name holds letters, digits, '-', '_' and '.' only.)
function slotNames(field) {
  const names = [];
  for (const item of typeof field === 'string' ? field.split(',') : []) {
    const m = /^\s*"([^"]*)"(.*)$/.exec(item);
    if (m && /;\s*qu="concurrent-requests"\s*(;|$)/.test(m[2])) names.push(m[1]);
  }
  return names;
}

// slotTTL returns the lease of the slot that an answer of sluice (a
// check's, a renewal's) reports for the concurrency limits names, in ms:
// their shortest reset_after_ms (the time until the key's slots are all
// free, the newest lease, the one just taken or renewed); 0 when none
// reports one.
function slotTTL(body, names) {
  let ttl = 0;
  for (const p of Array.isArray(body.policies) ? body.policies : []) {
    const ms = p && names.includes(p.name) ? Number(p.reset_after_ms) : 0;
    if (Number.isFinite(ms) && ms > 0 && (ttl === 0 || ms < ttl)) ttl = ms;
  }
  return ttl;
}

function isObject(v) {
  return typeof v === 'object' && v !== null;
}

// checkRuleKey checks the rule and key of a check or a refund.
function checkRuleKey(rule, key, what) {
  if (typeof rule !== 'string' || rule === '') {
    throw new TypeError(`sluice: ${what} needs a rule name (a non-empty string), got ${describe(rule)}`);
  }
  if (key !== undefined && typeof key !== 'string') {
    throw new TypeError(`sluice: the key of rule "${rule}" must be a string, got ${describe(key)}`);
  }
}

// checkSettleCost checks the cost of a settle (required) or a refund
// (optional: the rule's cost).
function checkSettleCost(cost, what, optional) {
  if (optional && cost === undefined) return;
  if (!(Number.isSafeInteger(cost) && cost >= 0)) {
    throw new TypeError(`sluice: ${what} must be a whole number >= 0, got ${describe(cost)}`);
  }
}

/**
 * express returns Express (or Connect, or plain (req, res, next))
 * middleware that limits every request it sees by rule: it asks sluice,
 * sets the rate-limit header fields sluice answers on the response, and
 * calls next() when the request is admitted; a denied request gets the
 * 429 of writeTooManyRequests, and one that sluice's store refused
 * (sluice's on_error: deny) sluice's 503.
 *
 * options:
 *   rule     the rule of sluice's policy file to check (required)
 *   key      req => the client key (default: req.ip, Express's client
 *            address, which honours app.set('trust proxy', ...), or outside
 *            Express the connection's address); a missing key (undefined,
 *            null or '') answers 401 MISSING_KEY
 *   cost     a number, or req => a number (default: the rule's cost)
 *   onError  'allow' or 'deny': when sluice cannot be asked, let the request
 *            through unlimited, or answer 503 RATE_LIMITER_UNAVAILABLE
 *            (default: the client's onError, 'allow' unless it says otherwise)
 *   tls      for an https:// url: { ca, cert, key }, the client's TLS options
 *            (key is the client key's function here)
 *   client   a client() to share; else one is made of url, timeout,
 *            onFailure and tls
 *
 * For a rule that settles (a policy file's settle section), where the
 * response reports what its work cost (sluice's check does not say: the
 * policy file's cost_from is for sluice's own middleware and proxy):
 *
 *   costFrom  'header:<Name>': the response's header or trailer (a streamed
 *            response's cost, known at its end: res.addTrailers), a whole
 *            number; 'bytes': the body's bytes, what was written before the
 *            client went away mid-stream; or (req, res) => a number, or a
 *            promise of one (undefined or null: none)
 *   strip    with 'header:<Name>', true removes the header, and the
 *            trailer and its announcement (Trailer), before the client
 *            sees them
 *   onSettle (err, settlement, req, res) => ..., told of each settle: the
 *            settlement (client's settle) or the SluiceError it failed with
 *            (ALREADY_SETTLED, TIMEOUT, ..., or INVALID_COST for a cost that
 *            is not a whole number); by default a failure is a console
 *            warning, at most one every 10 s
 *
 * An admitted request's reservation is then settled once its response
 * has finished, or once its client has gone ('close' before 'finish'),
 * at that cost; a response that reports none keeps the reserve, with no
 * settle. A settle that fails never fails the request, which has been
 * answered: the reservation keeps what it reserved. Without costFrom, the
 * handler may settle res.locals.sluice.reservation itself (client's
 * settle); it keeps its reserve otherwise.
 *
 * For a rule with a concurrency limit ({algorithm: concurrency, limit: N,
 * ttl: 30s}), an admitted request holds a slot (client's acquire): the
 * middleware keeps it alive while the handler runs (client's keepAlive,
 * every third of the lease) and releases it once, when the response has
 * finished or its client has gone ('finish' or 'close', whichever comes
 * first); a request while all N are held is denied 429. With costFrom
 * the settle releases it (with the newest reservation); a response that
 * reports no cost, or one that is no whole number, releases it at its
 * reserve.
 *
 *   onRenew  (err, renewal, req, res) => ..., told of each renewal (client's
 *            renew): a SlotLostError when the slot was lost (its lease
 *            ended first: res.locals.sluice.lost says so to the handler);
 *            by default a failure is a console warning, at most one every 10 s
 *   onRelease (err, released, req, res) => ..., told of each release: its
 *            result (client's release) or its SluiceError (TIMEOUT, ...: the
 *            slot is free once its lease ends); by default a failure is a
 *            console warning, at most one every 10 s
 *
 * Errors, a key function that throws and a check that sluice says is
 * wrong (an unknown rule), go to next(err): Express answers 500.
 * res.locals.sluice holds the decision, where res.locals exists.
 */
function express(options = {}) {
  const { rule } = options;
  if (typeof rule !== 'string' || rule === '') {
    throw new TypeError(`sluice: express needs a rule name (a non-empty string), got ${describe(rule)}`);
  }
  const key = options.key === undefined ? clientAddress : options.key;
  if (typeof key !== 'function') {
    throw new TypeError(`sluice: the key of rule "${rule}" must be a function of the request, got ${describe(key)}`);
  }
  const { cost } = options;
  if (cost !== undefined && typeof cost !== 'function' && !(Number.isSafeInteger(cost) && cost >= 0)) {
    throw new TypeError(`sluice: the cost of rule "${rule}" must be a whole number >= 0 or a function, got ${describe(cost)}`);
  }
  // Unset, the client's own onError decides ('allow' unless it says otherwise).
  const { onError } = options;
  if (onError !== undefined) checkOnError(onError);
  const c = options.client || client({ url: options.url, timeout: options.timeout, onError, onFailure: options.onFailure, ...tlsOf(options.tls) });
  const finisher = responseFinisher(rule, c, options);

  return function sluiceMiddleware(req, res, next) {
    decide(req, res).then((admitted) => { if (admitted) next(); }, next);
  };

  async function decide(req, res) {
    const k = key(req);
    if (k === undefined || k === null || k === '') {
      writeError(res, 401, 'MISSING_KEY', `this endpoint needs a client key (rule ${rule})`);
      return false;
    }
    const d = await c.check({ rule, key: String(k), cost: typeof cost === 'function' ? cost(req) : cost }, { onError });
    if (res.locals) res.locals.sluice = d;
    for (const [name, value] of Object.entries(d.headers)) {
      res.setHeader(name, value);
    }
    if (d.allowed) {
      if (d.reservation) finisher(req, res, d);
      return true;
    }
    if (d.status === 429) {
      writeTooManyRequests(res, d.retryAfter);
    } else if (d.status === 503) {
      writeBody(res, 503, d.raw);
    } else {
      writeError(res, 503, 'RATE_LIMITER_UNAVAILABLE', 'the rate limiter cannot be reached and the error policy is deny; retry later');
    }
    return false;
  }
}

// responseFinisher returns the function that ends the reservation of
// an admitted request of rule, d.reservation, with client c, by options
// (express's costFrom, strip, onSettle, onRenew and onRelease): it keeps
// alive the slot that d holds (d.ttl is set) while the handler runs, and
// once the response has finished or its client has gone, it settles at
// the cost the response reports (with costFrom), or else releases the
// slot. A reservation that holds no slot, without costFrom, is left to
// the handler.
function responseFinisher(rule, c, options) {
  const from = costSource(rule, options.costFrom);
  const { strip = false } = options;
  if (typeof strip !== 'boolean') {
    throw new TypeError(`sluice: strip of rule "${rule}" must be true or false, got ${describe(strip)}`);
  }
  if (strip && !(from && from.header)) {
    throw new TypeError(`sluice: strip of rule "${rule}" applies to a cost read from a header (costFrom 'header:<Name>'), which it removes`);
  }
  const callback = (name, what, outcome) => {
    const warn = throttledWarning(what, outcome);
    const fn = options[name] === undefined ? (err) => { if (err) warn(err); } : options[name];
    if (typeof fn !== 'function') {
      throw new TypeError(`sluice: ${name} of rule "${rule}" must be a function, got ${describe(fn)}`);
    }
    return (...args) => {
      try {
        fn(...args);
      } catch {
        // a failing logger is no reason to fail the process
      }
    };
  };
  const onSettle = callback('onSettle', 'settle', 'each keeps what it reserved');
  const onRenew = callback('onRenew', 'renewal', 'a slot is renewed until it is lost or refused');
  const onRelease = callback('onRelease', 'release', 'each slot is free once its lease ends');

  return function finishResponse(req, res, d) {
    const slot = d.ttl !== null;
    if (from === null && !slot) return; // the handler may settle it
    const read = from && from.header ? readCostHeader(res, from.header, strip) : null;
    const bytes = from && from.bytes ? countBytes(res) : null;
    const stop = slot ? c.keepAlive(d, { onRenew: (err, renewal) => onRenew(err, renewal, req, res) }) : null;
    let done = false;
    const end = async () => {
      if (done) return;
      done = true;
      if (stop) stop(); // a renewal under way comes before the settle or release
      if (from !== null) {
        let settled = null;
        let error = null;
        let cost = null;
        try {
          cost = read ? read() : bytes ? bytes() : await from.fn(req, res);
          if (cost !== undefined && cost !== null && !(Number.isSafeInteger(cost) && cost >= 0)) {
            throw new SluiceError(`sluice: rule "${rule}": the response reports a cost that is no whole number >= 0 (${from.name ? `${from.name}: ` : ''}${JSON.stringify(cost)}); the reservation keeps what it reserved`, { code: 'INVALID_COST' });
          }
        } catch (err) {
          error = err;
        }
        if (error === null && cost !== undefined && cost !== null) {
          try {
            settled = await c.settle(d, cost);
          } catch (err) {
            error = err;
          }
          onSettle(error, settled, req, res);
          return;
        }
        if (error !== null) onSettle(error, null, req, res);
        // no cost, or none that settles: the reserve stays
      }
      if (slot) {
        let released = null;
        let error = null;
        try {
          released = await c.release(d);
        } catch (err) {
          error = err;
        }
        onRelease(error, released, req, res);
      }
    };
    res.once('finish', end);
    res.once('close', end); // the client gone mid-response: settled at what it reports so far, or released
  };
}

// costSource parses express's costFrom: { header (lower case), name (as
// given) }, { bytes }, { fn }, or null when it is undefined.
function costSource(rule, costFrom) {
  if (costFrom === undefined) return null;
  if (typeof costFrom === 'function') return { fn: costFrom };
  if (costFrom === 'bytes') return { bytes: true };
  if (typeof costFrom === 'string') {
    const name = costFrom.startsWith('header:') ? costFrom.slice('header:'.length) : '';
    if (TOKEN_RE.test(name)) return { header: name.toLowerCase(), name };
    if (TOKEN_RE.test(costFrom)) {
      throw new TypeError(`sluice: costFrom of rule "${rule}" is ${JSON.stringify(costFrom)}; for a header or trailer, write 'header:${costFrom}'`);
    }
  }
  throw new TypeError(`sluice: costFrom of rule "${rule}" must be 'header:<Name>' (a response header or trailer holding the cost), 'bytes' (the body's bytes) or (req, res) => cost, got ${describe(costFrom)}`);
}

// TOKEN_RE matches a header field name (RFC 9110 token).
const TOKEN_RE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

// readCostHeader watches res for the header or trailer name (lower case),
// stripping both (and the trailer's announcement) when strip says so, and
// returns the function that reads the cost they report: the trailer's,
// else the header's, as a number; undefined when there is none; the text
// when it is not a whole number.
function readCostHeader(res, name, strip) {
  let header;
  let trailer;
  const { writeHead, addTrailers } = res;
  res.writeHead = function sluiceWriteHead(statusCode, ...rest) {
    if (!res.headersSent) {
      // writeHead(status[, reason][, headers]): headers given here are
      // merged over those set before, and may never be in res's own.
      const at = typeof rest[0] === 'string' ? 1 : 0;
      const own = res.getHeader(name);
      const given = rest[at] === undefined ? undefined : fieldOf(rest[at], name);
      header = given !== undefined ? given : own;
      if (strip) {
        if (own !== undefined) res.removeHeader(name);
        const announced = res.getHeader('trailer');
        if (announced !== undefined) {
          const keep = withoutName(announced, name);
          if (keep === '') res.removeHeader('trailer');
          else res.setHeader('Trailer', keep);
        }
        if (rest[at] !== undefined) rest[at] = withoutField(rest[at], name);
      }
    }
    return writeHead.call(this, statusCode, ...rest);
  };
  res.addTrailers = function sluiceAddTrailers(headers) {
    const v = fieldOf(headers, name);
    if (v !== undefined) trailer = v;
    return addTrailers.call(this, strip ? withoutField(headers, name) : headers);
  };
  return () => {
    let v = trailer !== undefined ? trailer : header !== undefined ? header : res.getHeader(name);
    if (Array.isArray(v)) v = v[0];
    if (v === undefined || v === null || String(v).trim() === '') return undefined;
    const text = String(v).trim();
    return /^[0-9]+$/.test(text) && Number.isSafeInteger(Number(text)) ? Number(text) : text;
  };
}

// fieldOf returns the value of the field name (lower case) in headers, an
// object, an array of [name, value] pairs or a flat [name, value, ...]
// array, as writeHead and addTrailers take them; undefined when absent.
function fieldOf(headers, name) {
  for (const [k, v] of fields(headers)) {
    if (String(k).toLowerCase() === name) return v;
  }
  return undefined;
}

// withoutField returns headers, in their own shape, without the field
// name (lower case), and without name in an announcement of trailers.
function withoutField(headers, name) {
  const keep = [];
  for (const [k, v] of fields(headers)) {
    const lower = String(k).toLowerCase();
    if (lower === name) continue;
    if (lower === 'trailer') {
      const rest = withoutName(v, name);
      if (rest !== '') keep.push([k, rest]);
      continue;
    }
    keep.push([k, v]);
  }
  if (!Array.isArray(headers)) return Object.fromEntries(keep);
  return headers.length > 0 && !Array.isArray(headers[0]) ? keep.flat() : keep;
}

// fields returns the [name, value] pairs of headers (see fieldOf).
function fields(headers) {
  if (headers === null || typeof headers !== 'object') return [];
  if (!Array.isArray(headers)) return Object.entries(headers);
  if (headers.length > 0 && Array.isArray(headers[0])) return headers;
  const out = [];
  for (let i = 0; i + 1 < headers.length; i += 2) out.push([headers[i], headers[i + 1]]);
  return out;
}

// withoutName returns a Trailer announcement (a list of names, a string
// or an array) without name (lower case), '' when none is left.
function withoutName(announced, name) {
  return [].concat(announced).join(',').split(',')
    .map((f) => f.trim())
    .filter((f) => f !== '' && f.toLowerCase() !== name)
    .join(', ');
}

// countBytes counts the body's bytes that res writes from now on, while
// its client is there to be sent them, and returns the function that
// reads the count.
function countBytes(res) {
  let n = 0;
  const size = (chunk, encoding) => {
    if (res.destroyed || res.writableEnded || chunk === undefined || chunk === null || typeof chunk === 'function') return 0;
    if (typeof chunk === 'string') return Buffer.byteLength(chunk, typeof encoding === 'string' ? encoding : 'utf8');
    return chunk.byteLength || 0;
  };
  const { write, end } = res;
  res.write = function sluiceWrite(chunk, encoding, ...rest) {
    n += size(chunk, encoding);
    return write.call(this, chunk, encoding, ...rest);
  };
  res.end = function sluiceEnd(chunk, encoding, ...rest) {
    n += size(chunk, encoding);
    return end.call(this, chunk, encoding, ...rest);
  };
  return () => n;
}

// clientAddress is express's default key: Express's req.ip, else (a plain
// Node http server) the address of the connection.
function clientAddress(req) {
  return req.ip || (req.socket && req.socket.remoteAddress);
}

/**
 * writeTooManyRequests answers res with the 429 of sluice's Go middleware
 * (httplimit.WriteTooManyRequests): Retry-After, in whole seconds and at
 * least 1, and the JSON body
 *
 *   {"error":{"code":"RATE_LIMITED","message":"rate limit exceeded; retry after N seconds","retry_after":N}}
 *
 * Header fields already set on res (the rate-limit fields) are kept.
 */
function writeTooManyRequests(res, retryAfterSeconds) {
  const secs = Math.max(1, Math.ceil(Number(retryAfterSeconds) || 0));
  res.setHeader('Retry-After', String(secs));
  const wait = `retry after ${secs} second${secs === 1 ? '' : 's'}`;
  writeBody(res, 429, JSON.stringify({
    error: { code: 'RATE_LIMITED', message: `rate limit exceeded; ${wait}`, retry_after: secs },
  }) + '\n');
}

// writeError answers res with sluice's JSON error body.
function writeError(res, status, code, message) {
  writeBody(res, status, JSON.stringify({ error: { code, message } }) + '\n');
}

// writeBody answers res with a JSON body and the header fields of
// sluice's answers: a decision is good for one request only.
function writeBody(res, status, text) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('Content-Length', String(Buffer.byteLength(text)));
  res.end(text);
}

// post sends body to url and resolves to the whole answer, or rejects
// with a SluiceError of code TIMEOUT when it has not come within timeout
// ms, or with Node's error.
function post(transport, agent, url, body, timeout) {
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (fn, value) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        fn(value);
      }
    };
    const req = transport.request(url, {
      method: 'POST',
      agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('end', () => settle(resolve, { status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', (err) => settle(reject, err));
      res.on('aborted', () => settle(reject, new SluiceError('sluice closed the connection mid-answer', { code: 'ECONNRESET' })));
    });
    const timer = setTimeout(() => {
      settle(reject, new SluiceError(`sluice at ${url.origin} did not answer within ${timeout} ms`, { code: 'TIMEOUT' }));
      req.destroy();
    }, timeout);
    req.on('error', (err) => settle(reject, err));
    req.end(body);
  });
}

// forwarded returns the rate-limit header fields of sluice's answer, by
// their FORWARDED_FIELDS names.
function forwarded(headers) {
  const out = {};
  for (const name of FORWARDED_FIELDS) {
    const value = headers[name.toLowerCase()];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

// retryAfterOf returns a denial's wait in whole seconds: its Retry-After,
// else its retry_after_ms rounded up; at least 1.
function retryAfterOf(headers, body) {
  const secs = parseRetryAfter(headers['retry-after']);
  if (secs > 0) return secs;
  return Math.max(1, Math.ceil((Number(body.retry_after_ms) || 0) / 1000));
}

// parseRetryAfter returns the whole seconds of a Retry-After field, 0 when
// it has none.
function parseRetryAfter(value) {
  const n = Number.parseInt(value, 10);
  return Number.isFinite(n) && n > 0 ? n : 0;
}

function parseURL(url) {
  if (typeof url !== 'string' && !(url instanceof URL)) {
    throw new TypeError(`sluice: url must be sluice's HTTP address, such as 'http://127.0.0.1:8080', got ${describe(url)}`);
  }
  let u;
  try {
    u = new URL(String(url));
  } catch {
    throw new TypeError(`sluice: url ${JSON.stringify(String(url))} is not a URL (such as 'http://127.0.0.1:8080')`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new TypeError(`sluice: url ${JSON.stringify(u.href)} must be http:// or https://`);
  }
  if (!u.pathname.endsWith('/')) u.pathname += '/'; // v1/check resolves under it
  return u;
}

// tlsOf returns the TLS options of express's tls option.
function tlsOf(tls) {
  if (tls === undefined) return {};
  if (typeof tls !== 'object' || tls === null || Array.isArray(tls)) {
    throw new TypeError(`sluice: tls must be an object of ca, cert and key, got ${describe(tls)}`);
  }
  const unknown = Object.keys(tls).filter((k) => !TLS_OPTIONS.includes(k));
  if (unknown.length > 0) {
    throw new TypeError(`sluice: tls option ${unknown.join(', ')} is not one of ${TLS_OPTIONS.join(', ')}`);
  }
  const out = {};
  for (const k of TLS_OPTIONS) if (tls[k] !== undefined) out[k] = tls[k];
  return out;
}

// TLS_OPTIONS are the options of an https:// url, as Node's https.Agent
// takes them.
const TLS_OPTIONS = Object.freeze(['ca', 'cert', 'key']);

// tlsOptions returns the TLS options of options for the agent of base: none
// for an http:// url, with which they are an error (they would be ignored).
function tlsOptions(base, options) {
  const given = TLS_OPTIONS.filter((k) => options[k] !== undefined);
  if (base.protocol !== 'https:') {
    if (given.length > 0) {
      throw new TypeError(`sluice: ${given.join(', ')} ${given.length === 1 ? 'is a TLS option' : 'are TLS options'}: url ${JSON.stringify(base.href)} must be https://`);
    }
    return {};
  }
  for (const k of given) {
    const v = options[k];
    const ok = (x) => typeof x === 'string' || Buffer.isBuffer(x);
    if (!(ok(v) || (k === 'ca' && Array.isArray(v) && v.every(ok)))) {
      throw new TypeError(`sluice: ${k} must be PEM text (a string or a Buffer${k === 'ca' ? ', or an array of them' : ''}), got ${describe(v)}`);
    }
  }
  if ((options.cert === undefined) !== (options.key === undefined)) {
    throw new TypeError(options.cert === undefined
      ? 'sluice: key needs cert, the client certificate of the key'
      : 'sluice: cert needs key, the client certificate\'s private key');
  }
  const out = {};
  for (const k of given) out[k] = options[k];
  return out;
}

function checkTimeout(timeout) {
  if (!(typeof timeout === 'number' && Number.isFinite(timeout) && timeout > 0)) {
    throw new TypeError(`sluice: timeout must be a number of milliseconds > 0, got ${describe(timeout)}`);
  }
}

function checkOnError(onError) {
  if (!ON_ERROR.includes(onError)) {
    throw new TypeError(`sluice: onError ${describe(onError)} is not one of ${ON_ERROR.join(', ')}`);
  }
}

function describe(v) {
  return typeof v === 'string' ? JSON.stringify(v) : typeof v === 'object' && v !== null ? 'an object' : String(v);
}

// throttledWarning returns the default onFailure (of checks: decided by
// onError) and onSettle (of settles: each keeps what it reserved): a
// console warning, at most one every FAILURE_LOG_INTERVAL_MS, counting
// the failures between.
function throttledWarning(what = 'check', outcome = 'decided by onError') {
  let last = 0;
  let since = 0;
  return (err) => {
    since++;
    const now = Date.now();
    if (now - last >= FAILURE_LOG_INTERVAL_MS) {
      console.warn(`${err.message} (${since} ${what}${since === 1 ? '' : 's'} failed since the last warning; ${outcome})`);
      last = now;
      since = 0;
    }
  };
}

module.exports = {
  client,
  express,
  writeTooManyRequests,
  SluiceError,
  SlotLostError,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_SLOT_TTL_MS,
  ON_ERROR,
  FORWARDED_FIELDS,
};
