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
 * client returns a client of the sluice decision service at url.
 *
 * options:
 *   url      sluice's HTTP address, such as 'http://127.0.0.1:8080' (required)
 *   timeout  how long a check waits for the answer, in ms (default 100)
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
  const transport = base.protocol === 'https:' ? https : http;
  const agent = new transport.Agent({ keepAlive: true, ...tls });
  const endpoint = new URL('v1/check', base);

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
   *   error         why sluice could not be asked (a SluiceError), when it could not
   *
   * It rejects with a SluiceError, whatever onError says, when sluice
   * answers that the check is wrong (400: an unknown rule, a key that is
   * not an address for a rule keyed by ip, a cost the rule never admits).
   * checkOptions.onError overrides the client's for this check.
   */
  async function check({ rule, key, cost } = {}, checkOptions = {}) {
    if (typeof rule !== 'string' || rule === '') {
      throw new TypeError(`sluice: check needs a rule name (a non-empty string), got ${describe(rule)}`);
    }
    if (key !== undefined && typeof key !== 'string') {
      throw new TypeError(`sluice: the key of rule "${rule}" must be a string, got ${describe(key)}`);
    }
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
      return {
        allowed: res.status === 200,
        status: res.status,
        headers: forwarded(res.headers),
        retryAfter: res.status === 429 ? retryAfterOf(res.headers, body) : 0,
        body,
        raw: res.text,
        shadowDenied: body.shadow_denied === true,
        degraded: body.degraded === true,
      };
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
      error,
    };
  }

  return {
    check,
    url: base.href,
    timeout,
    onError,
    /** close ends the client's idle connections to sluice. */
    close() {
      agent.destroy();
    },
  };
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
    if (d.allowed) return true;
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

// throttledWarning returns the default onFailure: a console warning, at
// most one every FAILURE_LOG_INTERVAL_MS, counting the failures between.
function throttledWarning() {
  let last = 0;
  let since = 0;
  return (err) => {
    since++;
    const now = Date.now();
    if (now - last >= FAILURE_LOG_INTERVAL_MS) {
      console.warn(`${err.message} (${since} check${since === 1 ? '' : 's'} failed since the last warning; decided by onError)`);
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
  DEFAULT_TIMEOUT_MS,
  ON_ERROR,
  FORWARDED_FIELDS,
};
