'use strict';

// The client and the Express middleware when sluice cannot be asked:
// SLUICE_STATE=hung, sluice serve stopped by SIGSTOP (it accepts
// connections and never answers: the timeout decides), or
// SLUICE_STATE=down, sluice serve gone (connections are refused). Run by
// clients/node's Go test.

const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');

const sluice = require('../sluice');
const { sluiceURL, listen, request } = require('./helpers');

const url = sluiceURL();
const state = process.env.SLUICE_STATE;
const code = { hung: 'TIMEOUT', down: 'ECONNREFUSED' }[state];
if (!code) throw new Error(`SLUICE_STATE is ${JSON.stringify(state)}, want hung or down`);
const timeout = 300;

test(`${state}: the client fails open by default, and says why`, async (t) => {
  const failures = [];
  const c = sluice.client({ url, timeout, onFailure: (err) => failures.push(err) });
  t.after(() => c.close());
  const start = Date.now();
  const d = await c.check({ rule: 'login', key: '192.0.2.1' });
  const took = Date.now() - start;
  assert.equal(d.allowed, true);
  assert.equal(d.status, 0);
  assert.equal(d.degraded, true);
  assert.deepEqual(d.headers, {});
  assert.ok(d.error instanceof sluice.SluiceError);
  assert.equal(d.error.code, code, d.error.message);
  assert.deepEqual(failures, [d.error]);
  // Answered, not never: a hung sluice is cut off by the client's own
  // timer (the TIMEOUT code and message say it was that timer, whatever
  // the machine's load made of the wall-clock time), a refused connection
  // by the refusal. Only the lower bound is the clock's: the timer never
  // fires before its time.
  if (state === 'hung') {
    assert.ok(took >= timeout - 50, `the check gave up after ${took} ms, before its ${timeout} ms timeout`);
    assert.ok(d.error.message.includes(`did not answer within ${timeout} ms`), d.error.message);
  }
});

test(`${state}: onError deny fails closed, for the client or for one check`, async (t) => {
  const closed = sluice.client({ url, timeout, onError: 'deny', onFailure: () => {} });
  const open = sluice.client({ url, timeout, onFailure: () => {} });
  t.after(() => { closed.close(); open.close(); });
  const d = await closed.check({ rule: 'login', key: '192.0.2.2' });
  assert.deepEqual([d.allowed, d.status, d.error.code], [false, 0, code]);
  assert.equal((await open.check({ rule: 'login', key: '192.0.2.2' }, { onError: 'deny' })).allowed, false);
  assert.equal((await closed.check({ rule: 'login', key: '192.0.2.2' }, { onError: 'allow' })).allowed, true);
});

test(`${state}: the middleware lets requests through under allow, answers 503 under deny`, async (t) => {
  const failures = [];
  const c = sluice.client({ url, timeout, onFailure: (err) => failures.push(err.code) });
  t.after(() => c.close());
  const handled = [];
  const app = express();
  const ok = (req, res) => { handled.push(req.path); res.send('through'); };
  app.get('/open', sluice.express({ client: c, rule: 'search', key: () => 'team-a' }), ok);
  app.post('/login', sluice.express({ client: c, rule: 'login', onError: 'deny' }), ok);
  const base = await listen(t, app);

  const open = await request('GET', `${base}/open`);
  assert.equal(open.status, 200);
  assert.equal(open.body, 'through');
  for (const f of ['ratelimit', 'ratelimit-policy', 'x-ratelimit-limit', 'retry-after']) {
    assert.equal(open.headers[f], undefined, `${f} on a request sluice did not decide`);
  }
  const login = await request('POST', `${base}/login`);
  assert.equal(login.status, 503);
  assert.deepEqual(JSON.parse(login.body), {
    error: { code: 'RATE_LIMITER_UNAVAILABLE', message: 'the rate limiter cannot be reached and the error policy is deny; retry later' },
  });
  assert.equal(login.headers['retry-after'], undefined);
  assert.equal(login.headers['cache-control'], 'no-store');
  assert.deepEqual(handled, ['/open']);
  assert.deepEqual(failures, [code, code]);
});

test(`${state}: the middleware follows a shared client's onError when it names none`, async (t) => {
  const closed = sluice.client({ url, timeout, onError: 'deny', onFailure: () => {} });
  t.after(() => closed.close());
  const handled = [];
  const app = express();
  const ok = (req, res) => { handled.push(req.path); res.send('through'); };
  app.get('/closed', sluice.express({ client: closed, rule: 'search', key: () => 'team-a' }), ok);
  app.get('/opened', sluice.express({ client: closed, rule: 'search', key: () => 'team-a', onError: 'allow' }), ok);
  const base = await listen(t, app);

  const denied = await request('GET', `${base}/closed`);
  assert.equal(denied.status, 503, denied.body);
  assert.equal(JSON.parse(denied.body).error.code, 'RATE_LIMITER_UNAVAILABLE');
  const through = await request('GET', `${base}/opened`);
  assert.equal(through.status, 200, through.body);
  assert.deepEqual(handled, ['/opened']);
});

test(`${state}: settle, refund and settleBatch reject with why sluice could not be asked`, async (t) => {
  // onError decides checks, not settles: a settle that cannot be made
  // rejects, and onFailure is not told (the rejection tells).
  const failures = [];
  const c = sluice.client({ url, timeout, onFailure: (err) => failures.push(err) });
  t.after(() => c.close());
  for (const [what, call] of [
    ['settle', () => c.settle('a-reservation', 1)],
    ['refund', () => c.refund({ rule: 'tokens', key: 'k', cost: 1 })],
    ['settleBatch', () => c.settleBatch([{ reservation: 'a-reservation', cost: 1 }])],
  ]) {
    await assert.rejects(call(), (err) => {
      assert.ok(err instanceof sluice.SluiceError, `${what}: ${err}`);
      assert.equal(err.code, code, `${what}: ${err.message}`);
      assert.equal(err.status, 0);
      return true;
    });
  }
  assert.deepEqual(failures, []);
});
