'use strict';

// The client and the Express middleware against a running sluice serve
// (test/sluice.yaml), started by clients/node's Go test.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const express = require('express'); // Debian's node-express: NODE_PATH=/usr/share/nodejs

const sluice = require('../sluice');
const { sluiceURL, listen, request, tooMany } = require('./helpers');

const url = sluiceURL();

// saved are the 429s that the Go test compares with httplimit's, each
// with the wait in seconds it was written for, in SLUICE_RESULT_FILE.
const saved = [];
function save(name, wait, r) {
  saved.push({ name, wait, status: r.status, headers: r.headers, body: r.body });
  if (process.env.SLUICE_RESULT_FILE) {
    fs.writeFileSync(process.env.SLUICE_RESULT_FILE, JSON.stringify(saved));
  }
}

// newClient returns a client closed when t ends, failing t on any
// failure to ask sluice: sluice runs.
function newClient(t, options = {}) {
  const c = sluice.client({ url, onFailure: (err) => assert.fail(`sluice could not be asked: ${err.message}`), ...options });
  t.after(() => c.close());
  return c;
}

test('check: 5 a minute per API key, then 429 with Retry-After', async (t) => {
  const c = newClient(t);
  for (let i = 0; i < 5; i++) {
    const d = await c.check({ rule: 'search', key: 'team-a' });
    assert.equal(d.allowed, true, `check ${i + 1}`);
    assert.equal(d.status, 200);
    assert.equal(d.body.remaining, 4 - i);
    assert.equal(d.headers['X-RateLimit-Remaining'], String(4 - i));
    assert.equal(d.headers['X-RateLimit-Limit'], '5');
    assert.equal(d.headers['RateLimit-Policy'], '"search-1m";q=5;w=60');
    assert.equal(d.headers['Retry-After'], undefined);
    assert.equal(d.retryAfter, 0);
    assert.equal(d.degraded, false);
  }
  const d = await c.check({ rule: 'search', key: 'team-a' });
  assert.equal(d.allowed, false);
  assert.equal(d.status, 429);
  assert.ok(d.retryAfter >= 1 && d.retryAfter <= 12, `retryAfter ${d.retryAfter}, want 1..12 (a token every 12s)`);
  assert.equal(d.headers['Retry-After'], String(d.retryAfter));
  assert.equal(Math.ceil(d.body.retry_after_ms / 1000), d.retryAfter);
  assert.equal(d.headers['RateLimit'], `"search-1m";r=0;t=${d.retryAfter}`);
  // Another key has its own count.
  assert.equal((await c.check({ rule: 'search', key: 'team-z' })).allowed, true);
});

test('check: cost 0 reports without spending, a cost spends that much', async (t) => {
  const c = newClient(t);
  const steps = [
    { cost: 0, allowed: true, remaining: 5 },
    { cost: 3, allowed: true, remaining: 2 },
    { cost: 0, allowed: true, remaining: 2 },
    { cost: 3, allowed: false, remaining: 2 }, // a denied check spends nothing
    { cost: 2, allowed: true, remaining: 0 },
  ];
  for (const [i, s] of steps.entries()) {
    const d = await c.check({ rule: 'search', key: 'team-b', cost: s.cost });
    assert.equal(d.allowed, s.allowed, `step ${i + 1}: cost ${s.cost}`);
    assert.equal(d.body.remaining, s.remaining, `step ${i + 1}: cost ${s.cost}`);
  }
});

test('check: what sluice refuses is the caller\'s mistake, whatever onError says', async (t) => {
  const c = newClient(t, { onError: 'allow' });
  for (const [args, says] of [
    [{ rule: 'nope', key: 'k' }, 'unknown rule "nope"'],
    [{ rule: 'login', key: 'not-an-address' }, 'is not an IP address'],
    [{ rule: 'search', key: 'k', cost: 1000 }, 'cost'],
  ]) {
    await assert.rejects(c.check(args), (err) => {
      assert.ok(err instanceof sluice.SluiceError, `${JSON.stringify(args)}: ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.code, 'BAD_REQUEST');
      assert.ok(err.message.includes(says), `${JSON.stringify(args)}: ${err.message} does not say ${says}`);
      return true;
    });
  }
});

test('check and client: bad arguments are errors that say what is wrong', async (t) => {
  const c = newClient(t);
  for (const [args, says] of [
    [{}, 'needs a rule name'],
    [{ rule: 'search', key: 7 }, 'key of rule "search" must be a string'],
    [{ rule: 'search', key: 'k', cost: -1 }, 'whole number >= 0'],
    [{ rule: 'search', key: 'k', cost: 1.5 }, 'whole number >= 0'],
  ]) {
    await assert.rejects(c.check(args), (err) => err instanceof TypeError && err.message.includes(says));
  }
  await assert.rejects(c.check({ rule: 'search', key: 'k' }, { onError: 'maybe' }), /onError "maybe" is not one of allow, deny/);
  for (const [options, says] of [
    [{}, 'url must be'],
    [{ url: 'nope' }, 'is not a URL'],
    [{ url: 'ftp://127.0.0.1/' }, 'must be http:// or https://'],
    [{ url, timeout: 0 }, 'timeout must be'],
    [{ url, onError: 'local' }, 'not one of allow, deny'],
    [{ url, onFailure: 'log' }, 'onFailure must be a function'],
  ]) {
    assert.throws(() => sluice.client(options), (err) => err instanceof TypeError && err.message.includes(says), JSON.stringify(options));
  }
  assert.throws(() => sluice.express({ url }), /express needs a rule name/);
  assert.throws(() => sluice.express({ url, rule: 'login', key: 'ip' }), /must be a function of the request/);
});

test('check: a rule in shadow mode reports, never denies', async (t) => {
  const c = newClient(t);
  const first = await c.check({ rule: 'preview', key: '192.0.2.9' });
  const second = await c.check({ rule: 'preview', key: '192.0.2.9' });
  assert.deepEqual([first.allowed, first.shadowDenied], [true, false]);
  assert.deepEqual([second.allowed, second.shadowDenied, second.status], [true, true, 200]);
});

test('express: 3 logins a minute, sluice\'s headers forwarded, the 4th gets the 429 of sluice\'s Go middleware', async (t) => {
  let handled = 0;
  const app = express();
  app.post('/login', sluice.express({ url, rule: 'login', onError: 'deny' }), (req, res) => {
    handled++;
    res.send('welcome');
  });
  const base = await listen(t, app);
  for (let i = 0; i < 3; i++) {
    const r = await request('POST', `${base}/login`);
    assert.equal(r.status, 200, `login ${i + 1}`);
    assert.equal(r.body, 'welcome');
    assert.equal(r.headers['ratelimit-policy'], '"login-1m";q=3;w=60');
    // t: the seconds until the log has forgotten every login, a minute
    // from the first (less the time the test has taken since).
    const m = /^"login-1m";r=(\d+);t=(\d+)$/.exec(r.headers['ratelimit']);
    assert.ok(m && Number(m[1]) === 2 - i && Number(m[2]) > 50 && Number(m[2]) <= 60, `RateLimit ${r.headers['ratelimit']}`);
    assert.equal(r.headers['x-ratelimit-limit'], '3');
    assert.equal(r.headers['x-ratelimit-remaining'], String(2 - i));
    const reset = Number(r.headers['x-ratelimit-reset']) - Date.now() / 1000;
    assert.ok(reset > 50 && reset <= 61, `X-RateLimit-Reset ${r.headers['x-ratelimit-reset']} is not a minute from now`);
    assert.equal(r.headers['retry-after'], undefined);
  }
  const r = await request('POST', `${base}/login`);
  assert.equal(r.status, 429);
  assert.equal(handled, 3, 'the handler ran for a denied request');
  const secs = Number(r.headers['retry-after']);
  assert.ok(Number.isInteger(secs) && secs >= 1 && secs <= 60, `Retry-After ${r.headers['retry-after']}`);
  assert.equal(r.body, tooMany(secs));
  assert.equal(r.headers['content-type'], 'application/json');
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
  assert.equal(r.headers['cache-control'], 'no-store');
  assert.equal(r.headers['ratelimit'], `"login-1m";r=0;t=${secs}`);
  assert.equal(r.headers['x-ratelimit-remaining'], '0');
  save('the Express middleware\'s 429', secs, r);
  // One count through every door: the middleware spent the count of
  // 127.0.0.1 under rule login that a check of that address sees.
  const c = newClient(t);
  const d = await c.check({ rule: 'login', key: '127.0.0.1', cost: 0 });
  assert.equal(d.body.remaining, 0);
});

test('express: a key of the request\'s own, a cost of its own; no key is 401 MISSING_KEY', async (t) => {
  const c = newClient(t);
  let handled = 0;
  const app = express();
  app.get('/search', sluice.express({
    client: c,
    rule: 'search',
    key: (req) => req.get('X-API-Key'),
    cost: (req) => Number(req.query.pages || 1),
  }), (req, res) => {
    handled++;
    res.json({ results: [], decision: res.locals.sluice.body.remaining });
  });
  const base = await listen(t, app);

  const missing = await request('GET', `${base}/search`);
  assert.equal(missing.status, 401);
  assert.deepEqual(JSON.parse(missing.body), { error: { code: 'MISSING_KEY', message: 'this endpoint needs a client key (rule search)' } });
  assert.equal(missing.headers['ratelimit'], undefined);

  const four = await request('GET', `${base}/search?pages=4`, { 'X-API-Key': 'team-c' });
  assert.equal(four.status, 200);
  assert.deepEqual(JSON.parse(four.body), { results: [], decision: 1 });
  assert.equal(four.headers['x-ratelimit-remaining'], '1');
  const two = await request('GET', `${base}/search?pages=2`, { 'X-API-Key': 'team-c' });
  assert.equal(two.status, 429);
  assert.equal(two.body, tooMany(Number(two.headers['retry-after'])));
  const one = await request('GET', `${base}/search`, { 'X-API-Key': 'team-c' });
  assert.equal(one.status, 200);
  assert.equal(handled, 2);
});

test('express: an unknown rule goes to Express\'s error handler, not through', async (t) => {
  let handled = 0;
  const app = express();
  app.get('/x', sluice.express({ url, rule: 'nope', key: () => 'k' }), (req, res) => {
    handled++;
    res.send('through');
  });
  app.use((err, req, res, next) => { // eslint-disable-line no-unused-vars
    res.status(500).json({ message: err.message, code: err.code });
  });
  const base = await listen(t, app);
  const r = await request('GET', `${base}/x`);
  assert.equal(r.status, 500);
  const body = JSON.parse(r.body);
  assert.equal(body.code, 'BAD_REQUEST');
  assert.ok(body.message.includes('unknown rule "nope"'), body.message);
  assert.equal(handled, 0);
});

test('writeTooManyRequests: the 429 of sluice\'s Go middleware for any wait', async (t) => {
  const app = express();
  app.get('/', (req, res) => {
    res.setHeader('RateLimit', '"x-1s";r=0;t=1'); // kept
    sluice.writeTooManyRequests(res, Number(req.query.wait));
  });
  const base = await listen(t, app);
  // Whole seconds, rounded up, and never 0: a client that waits is never early.
  for (const [wait, secs] of [[0, 1], [0.2, 1], [1, 1], [1.001, 2], [12, 12], [3600, 3600]]) {
    const r = await request('GET', `${base}/?wait=${wait}`);
    assert.equal(r.status, 429, `wait ${wait}`);
    assert.equal(r.headers['retry-after'], String(secs), `wait ${wait}`);
    assert.equal(r.body, tooMany(secs), `wait ${wait}`);
    assert.equal(r.headers['ratelimit'], '"x-1s";r=0;t=1');
    save(`writeTooManyRequests for ${wait}s`, wait, r);
  }
});

test('middleware outside Express: a plain Node server, keyed by the connection\'s address', async (t) => {
  const limit = sluice.express({ url, rule: 'preview' }); // shadow mode: reported, never enforced
  const base = await listen(t, (req, res) => limit(req, res, () => res.end('through')));
  for (const remaining of ['0', '0']) {
    const r = await request('GET', `${base}/`);
    assert.equal(r.status, 200);
    assert.equal(r.body, 'through');
    assert.equal(r.headers['ratelimit-policy'], '"preview-1m";q=1;w=60');
    assert.equal(r.headers['x-ratelimit-remaining'], remaining);
  }
});
