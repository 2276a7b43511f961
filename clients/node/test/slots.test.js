'use strict';

// Concurrency limits, by the client (acquire, renew, release, keepAlive)
// and by the Express middleware, against a running sluice serve
// (test/sluice.yaml: exports, 2 in flight per key with leases of 30s;
// uploads, 1 in flight with leases of 30s; jobs, 1 in flight with leases
// of 2s and 1000 an hour; tasks, 1 in flight with leases of 1s alone;
// calls, 1 in flight and 10000 tokens an hour, reserving 1000), started
// by clients/node's Go test. Each test has keys of its own. Nothing waits
// on a timer for something to happen: each test waits for the event it
// needs (a handler entered, a renewal or a release told), or polls sluice
// for the state it needs (a lease ended).

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const express = require('express'); // Debian's node-express: NODE_PATH=/usr/share/nodejs

const sluice = require('../sluice');
const { sluiceURL, listen, request, tooMany } = require('./helpers');

const url = sluiceURL();

// clientOptions are the options of a client with a timeout that a loaded
// machine keeps, recording any failure to ask sluice into failures.
function clientOptions(t) {
  const failures = [];
  t.after(() => assert.deepEqual(failures, [], 'sluice could not be asked'));
  return { url, timeout: 5000, onFailure: (err) => failures.push(err) };
}

// newClient returns a client closed when t ends, failing t on any failure
// to ask sluice: sluice runs.
function newClient(t) {
  const c = sluice.client(clientOptions(t));
  t.after(() => c.close());
  return c;
}

// free returns how many slots of rule's concurrency limit (<rule>-concurrent)
// key has free, by a check of cost 0 (which holds none).
async function free(c, rule, key) {
  const d = await c.check({ rule, key, cost: 0 });
  assert.equal(d.status, 200, d.raw);
  assert.equal(d.reservation, null, 'a check of cost 0 holds no slot');
  return policy(d.body, `${rule}-concurrent`).remaining;
}

// policy returns the entry of name in an answer's policies.
function policy(body, name) {
  const p = body.policies.find((q) => q.name === name);
  assert.ok(p, `no policy ${name} in ${JSON.stringify(body)}`);
  return p;
}

// events records the calls of a callback: push is the callback, with its
// arguments gathered as an array; next() resolves to the next call's, in
// order, failing after ms.
function events(what) {
  const calls = [];
  const waiting = [];
  return {
    push(...args) {
      const w = waiting.shift();
      if (w) w(args);
      else calls.push(args);
    },
    next(ms = 10000) {
      if (calls.length > 0) return Promise.resolve(calls.shift());
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms);
        waiting.push((args) => {
          clearTimeout(timer);
          resolve(args);
        });
      });
    },
    get pending() {
      return calls.length;
    },
  };
}

// until polls sluice (cond, an async function) every 20 ms until it
// resolves to true, failing after ms: a lease ends at a time, which no
// event tells.
async function until(what, cond, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// gate returns a promise and the function that resolves it.
function gate() {
  let open;
  const p = new Promise((resolve) => { open = resolve; });
  return { wait: p, open };
}

// rejectsWith asserts that p rejects with a SluiceError of code and status.
async function rejectsWith(p, code, status, type = sluice.SluiceError) {
  let got;
  await assert.rejects(p, (err) => {
    got = err;
    assert.ok(err instanceof type, `${err} is no ${type.name}`);
    assert.deepEqual([err.code, err.status], [code, status], err.message);
    return true;
  });
  return got;
}

test('acquire: slots up to the limit, then denied with Retry-After; a release frees one', async (t) => {
  const c = newClient(t);
  const key = 'acquire-1';
  const a = await c.acquire({ rule: 'exports', key });
  const b = await c.acquire({ rule: 'exports', key });
  for (const [i, d] of [a, b].entries()) {
    assert.deepEqual([d.allowed, d.status, d.lost], [true, 200, null], d.raw);
    assert.equal(typeof d.reservation, 'string');
    assert.ok(d.ttl > 29000 && d.ttl <= 30000, `ttl ${d.ttl}: the lease, 30s`);
    assert.match(d.headers['RateLimit-Policy'], /"exports-concurrent";q=2;qu="concurrent-requests"/);
    assert.equal(policy(d.body, 'exports-concurrent').remaining, 1 - i);
  }
  assert.notEqual(a.reservation, b.reservation);

  const denied = await c.acquire({ rule: 'exports', key });
  assert.deepEqual([denied.allowed, denied.status, denied.reservation, denied.ttl], [false, 429, null, null], denied.raw);
  assert.ok(denied.retryAfter >= 1 && denied.retryAfter <= 30, `retryAfter ${denied.retryAfter}: until the first lease ends`);
  assert.equal(denied.headers['Retry-After'], String(denied.retryAfter));
  assert.equal(await free(c, 'exports', key), 0);
  assert.equal(await free(c, 'exports', 'acquire-other'), 2, 'another key has slots of its own');

  const released = await c.release(a);
  assert.equal(released.allowed, true);
  assert.equal(policy(released.body, 'exports-concurrent').remaining, 1);
  assert.deepEqual(JSON.parse(released.raw), released.body);
  assert.equal(await free(c, 'exports', key), 1);

  const again = await c.acquire({ rule: 'exports', key });
  assert.equal(again.allowed, true, 'the released slot is free again');
  assert.equal((await c.acquire({ rule: 'exports', key })).status, 429, 'one slot was freed, not more');
  await c.release(b);
  await c.release(again);
  assert.equal(await free(c, 'exports', key), 2);
});

test('release: once; a second release is ALREADY_SETTLED and frees nothing', async (t) => {
  const c = newClient(t);
  const key = 'double-1';
  const a = await c.acquire({ rule: 'exports', key });
  const b = await c.acquire({ rule: 'exports', key });
  const reservation = a.reservation;
  await c.release(a);
  assert.equal(await free(c, 'exports', key), 1);
  await rejectsWith(c.release(a), 'ALREADY_SETTLED', 409);
  await rejectsWith(c.release(reservation), 'ALREADY_SETTLED', 409);
  assert.equal(await free(c, 'exports', key), 1, 'b still holds its slot');
  await c.release(b.reservation); // a reservation string releases too
  assert.equal(await free(c, 'exports', key), 2);
});

test('renew: a new reservation that replaces the old one, which is settled', async (t) => {
  const c = newClient(t);
  const key = 'renew-1';
  const a = await c.acquire({ rule: 'exports', key });
  const old = a.reservation;
  const r = await c.renew(a);
  assert.equal(r.allowed, true);
  assert.equal(typeof r.reservation, 'string');
  assert.notEqual(r.reservation, old);
  assert.equal(a.reservation, r.reservation, 'the decision holds the newest reservation');
  assert.ok(r.ttl > 29000 && r.ttl <= 30000, `ttl ${r.ttl}: the lease from now, 30s`);
  assert.equal(a.ttl, r.ttl);
  assert.deepEqual(JSON.parse(r.raw), r.body);
  assert.equal(await free(c, 'exports', key), 1, 'one slot, renewed: not two');

  // The old reservation is settled: it neither releases nor renews.
  await rejectsWith(c.release(old), 'ALREADY_SETTLED', 409);
  const err = await rejectsWith(c.renew(old), 'ALREADY_SETTLED', 409);
  assert.ok(!(err instanceof sluice.SlotLostError), 'a settled reservation is no lost slot');
  assert.equal(await free(c, 'exports', key), 1);

  // A renewal of the string answers the same, the decision is not told.
  const s = await c.renew(r.reservation);
  assert.notEqual(s.reservation, r.reservation);
  assert.equal(s.ttl, null, 'a string says nothing of its limits');
  assert.equal(a.reservation, r.reservation);
  await rejectsWith(c.release(a), 'ALREADY_SETTLED', 409);
  const released = await c.release(s.reservation);
  assert.equal(policy(released.body, 'exports-concurrent').remaining, 2);
});

test('renew and release of one decision run in turn: the release takes the renewal\'s reservation', async (t) => {
  const c = newClient(t);
  const key = 'order-1';
  const a = await c.acquire({ rule: 'exports', key });
  // Not awaited: the release is asked while the renewal is under way.
  const renewing = c.renew(a);
  const releasing = c.release(a);
  const [renewal, released] = await Promise.all([renewing, releasing]);
  assert.equal(a.reservation, renewal.reservation);
  assert.equal(policy(released.body, 'exports-concurrent').remaining, 2);
  assert.equal(await free(c, 'exports', key), 2);
});

test('renew after the lease ended: a SlotLostError, SLOT_LOST, or RESERVATION_EXPIRED for a reservation expired too', async (t) => {
  const c = newClient(t);
  for (const [rule, code, status] of [['jobs', 'SLOT_LOST', 409], ['tasks', 'RESERVATION_EXPIRED', 410]]) {
    const key = `lost-${rule}`;
    const a = await c.acquire({ rule, key });
    assert.equal(a.allowed, true, a.raw);
    assert.equal((await c.acquire({ rule, key })).status, 429, 'the one slot is held');
    await until(`${rule}: the lease of ${a.ttl} ms ends`, async () => (await free(c, rule, key)) === 1);
    const err = await rejectsWith(c.renew(a), code, status, sluice.SlotLostError);
    assert.equal(err.name, 'SlotLostError');
    assert.match(err.message, /another request may hold it now/);
    assert.equal(a.lost, err, 'the decision says it is lost');
    const other = await c.acquire({ rule, key });
    assert.equal(other.allowed, true, 'the lost slot is free for another request');
    await c.release(other);
  }
});

test('keepAlive: renews every third of the lease, past its end, replacing the reservation with each renewal\'s', async (t) => {
  const c = newClient(t);
  const key = 'keep-1';
  const a = await c.acquire({ rule: 'jobs', key });
  const start = Date.now();
  assert.ok(a.ttl > 1900 && a.ttl <= 2000, `ttl ${a.ttl}`);
  const first = a.reservation;
  const renewals = events('renewal');
  const stop = c.keepAlive(a, { onRenew: renewals.push });
  t.after(stop);

  const seen = new Set([first]);
  let n = 0;
  while (Date.now() - start < 2500) { // past the lease acquired, 2s
    const [err, renewal] = await renewals.next();
    assert.equal(err, null);
    n++;
    assert.equal(a.reservation, renewal.reservation, `renewal ${n}: the decision holds its reservation`);
    assert.ok(!seen.has(renewal.reservation), `renewal ${n}: a new reservation`);
    seen.add(renewal.reservation);
    assert.ok(renewal.ttl > 1900 && renewal.ttl <= 2000, `renewal ${n}: ttl ${renewal.ttl}`);
  }
  assert.ok(n >= 3, `${n} renewals in ${Date.now() - start} ms of a lease of 2s`);
  assert.equal(await free(c, 'jobs', key), 0, 'the slot is held past the lease');
  assert.equal((await c.acquire({ rule: 'jobs', key })).status, 429);
  await rejectsWith(c.release(first), 'ALREADY_SETTLED', 409);

  await stop();
  const released = await c.release(a);
  assert.equal(policy(released.body, 'jobs-concurrent').remaining, 1);
  assert.equal(a.lost, null);
});

test('keepAlive stops at a lost slot, telling onRenew; its ttl option sets the pace', async (t) => {
  const c = newClient(t);
  const key = 'keep-lost';
  const a = await c.acquire({ rule: 'tasks', key });
  await until(`the lease of ${a.ttl} ms ends`, async () => (await free(c, 'tasks', key)) === 1);
  const renewals = events('renewal');
  const stop = c.keepAlive(a, { ttl: 60, onRenew: renewals.push }); // every 20 ms
  t.after(stop);
  const [err, renewal] = await renewals.next();
  assert.ok(err instanceof sluice.SlotLostError, String(err));
  assert.equal(renewal, null);
  assert.equal(a.lost, err);
  // Stopped: no renewal in ten of its periods. (A wait for nothing to
  // happen, which passes at once when the code is right; it cannot fail
  // by being slow.)
  await assert.rejects(renewals.next(200), /no renewal within 200 ms/);
});

test('a decision that holds no slot: keepAlive and release do nothing, renew and a cost of 0 are errors', async (t) => {
  const c = newClient(t);
  const key = 'none-1';
  const held = await c.acquire({ rule: 'uploads', key });
  const denied = await c.acquire({ rule: 'uploads', key });
  assert.equal(denied.status, 429);
  const stop = c.keepAlive(denied);
  await stop();
  assert.equal(await c.release(denied), null);
  await assert.rejects(c.renew(denied), TypeError);
  await assert.rejects(c.acquire({ rule: 'uploads', key, cost: 0 }), TypeError);
  assert.throws(() => c.keepAlive('a string'), TypeError);
  assert.throws(() => c.keepAlive(held, { ttl: 0 }), TypeError);
  // A rule without a concurrency limit: no lease.
  const plain = await c.check({ rule: 'tokens', key: 'none-1' });
  assert.equal(plain.ttl, null);
  await c.release(held);
});

// slotApp serves GET /work under the middleware of rule for the key in
// X-Tenant: a request with ?hold=1 answers once its gate opens (after
// writing its header and 'started' when ?stream=1), any other at once;
// entered is told of each request the handler gets, with its decision.
async function slotApp(t, rule, options = {}) {
  const entered = events('request in the handler');
  const releases = events('release');
  const renewals = events('renewal');
  const gates = [];
  const a = express();
  a.get('/work', sluice.express({
    ...clientOptions(t),
    rule,
    key: (req) => req.get('X-Tenant'),
    onRelease: releases.push,
    onRenew: renewals.push,
    ...options,
  }), async (req, res) => {
    const g = gate();
    gates.push(g);
    if (req.query.stream) {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.write('started\n');
    }
    entered.push(res.locals.sluice);
    if (req.query.hold) await g.wait;
    res.end('done\n');
  });
  t.after(() => gates.forEach((g) => g.open()));
  return { base: await listen(t, a), entered, releases, renewals, open: () => gates.forEach((g) => g.open()) };
}

test('express: a request holds a slot while its handler runs, another is denied 429, and the slot is free once the response has finished', async (t) => {
  const c = newClient(t);
  const key = 'mw-1';
  const app = await slotApp(t, 'uploads');
  const headers = { 'X-Tenant': key };
  const slow = request('GET', `${app.base}/work?hold=1`, headers);
  const [d] = await app.entered.next();
  assert.equal(typeof d.reservation, 'string');
  assert.ok(d.ttl > 29000 && d.ttl <= 30000, `ttl ${d.ttl}`);
  assert.equal(await free(c, 'uploads', key), 0);

  const second = await request('GET', `${app.base}/work`, headers);
  assert.equal(second.status, 429, second.body);
  const secs = Number(second.headers['retry-after']);
  assert.ok(secs >= 1 && secs <= 30, `Retry-After ${second.headers['retry-after']}`);
  assert.equal(second.body, tooMany(secs));
  assert.match(second.headers['ratelimit-policy'], /"uploads-concurrent";q=1;qu="concurrent-requests"/);
  assert.equal(app.entered.pending, 0, 'the denied request never reached the handler');
  assert.equal(app.releases.pending, 0, 'nothing released while the handler runs');

  app.open();
  const done = await slow;
  assert.deepEqual([done.status, done.body], [200, 'done\n']);
  const [err, released] = await app.releases.next();
  assert.equal(err, null);
  assert.equal(policy(released.body, 'uploads-concurrent').remaining, 1);
  assert.equal(await free(c, 'uploads', key), 1);

  // Admitted again; its release, once, is the only other one.
  const third = await request('GET', `${app.base}/work`, headers);
  assert.equal(third.status, 200);
  const [err3] = await app.releases.next();
  assert.equal(err3, null, 'a release of each request, once: none is ALREADY_SETTLED');
  assert.equal(await free(c, 'uploads', key), 1);
  assert.equal(app.releases.pending, 0);
});

test('express: the slot is released when the client goes mid-response, while the handler still runs', async (t) => {
  const c = newClient(t);
  const key = 'mw-gone';
  const app = await slotApp(t, 'uploads');
  await new Promise((resolve, reject) => {
    const req = http.get(`${app.base}/work?hold=1&stream=1`, { headers: { 'X-Tenant': key }, agent: false }, (res) => {
      assert.equal(res.statusCode, 200);
      res.once('data', () => {
        req.destroy(); // gone, with the handler waiting for its gate
        resolve();
      });
    });
    req.on('error', (err) => { if (err.code !== 'ECONNRESET') reject(err); });
  });
  await app.entered.next();
  const [err, released] = await app.releases.next();
  assert.equal(err, null);
  assert.equal(policy(released.body, 'uploads-concurrent').remaining, 1);
  assert.equal(await free(c, 'uploads', key), 1);
  const again = await request('GET', `${app.base}/work`, { 'X-Tenant': key });
  assert.equal(again.status, 200, 'the slot of the client gone is free');
  await app.releases.next();
});

test('express: the slot is kept alive past its lease while the handler runs, and released with the newest reservation', async (t) => {
  const c = newClient(t);
  const key = 'mw-keep';
  const app = await slotApp(t, 'jobs');
  const slow = request('GET', `${app.base}/work?hold=1`, { 'X-Tenant': key });
  const [d] = await app.entered.next();
  const start = Date.now();
  const first = d.reservation;
  let n = 0;
  while (Date.now() - start < d.ttl + 500) {
    const [err, renewal] = await app.renewals.next();
    assert.equal(err, null);
    assert.equal(d.reservation, renewal.reservation);
    n++;
  }
  assert.ok(n >= 3, `${n} renewals`);
  assert.notEqual(d.reservation, first);
  const denied = await request('GET', `${app.base}/work`, { 'X-Tenant': key });
  assert.equal(denied.status, 429, 'the slot is held past its first lease');

  app.open();
  assert.equal((await slow).status, 200);
  const [err, released] = await app.releases.next();
  assert.equal(err, null, 'released with the newest reservation, not ALREADY_SETTLED');
  assert.equal(policy(released.body, 'jobs-concurrent').remaining, 1);
  assert.equal(await free(c, 'jobs', key), 1);
  assert.equal(d.lost, null);
});

test('express: a rule that settles and holds a slot is settled with the newest reservation, which frees the slot; a response without a cost releases it at its reserve', async (t) => {
  const c = newClient(t);
  const settles = events('settle');
  const releases = events('release');
  const a = express();
  a.get('/call', sluice.express({
    client: c,
    rule: 'calls',
    key: (req) => req.get('X-Tenant'),
    costFrom: 'header:X-Tokens-Used',
    onSettle: settles.push,
    onRelease: releases.push,
  }), async (req, res) => {
    await c.renew(res.locals.sluice); // the reservation the check answered is settled now
    if (req.query.used) res.set('X-Tokens-Used', req.query.used);
    res.send('answered\n');
  });
  const base = await listen(t, a);
  const tokens = async (key) => policy((await c.check({ rule: 'calls', key, cost: 0 })).body, 'calls-1h').remaining;

  const r = await request('GET', `${base}/call?used=300`, { 'X-Tenant': 'mw-call' });
  assert.equal(r.status, 200, r.body);
  const [err, settled] = await settles.next();
  assert.equal(err, null, 'settled with the renewal\'s reservation');
  assert.equal(settled.cost, 300);
  assert.equal(policy(settled.body, 'calls-concurrent').remaining, 1, 'the settle freed the slot');
  assert.equal(await free(c, 'calls', 'mw-call'), 1);
  assert.equal(await tokens('mw-call'), 10000 - 300);
  assert.equal(releases.pending, 0, 'the settle released it: no release');

  const silent = await request('GET', `${base}/call`, { 'X-Tenant': 'mw-call-silent' });
  assert.equal(silent.status, 200, silent.body);
  const [rerr, released] = await releases.next();
  assert.equal(rerr, null);
  assert.equal(policy(released.body, 'calls-concurrent').remaining, 1);
  assert.equal(await free(c, 'calls', 'mw-call-silent'), 1);
  assert.equal(await tokens('mw-call-silent'), 10000 - 1000, 'no cost: the reserve stays');
  assert.equal(settles.pending, 0);
});
