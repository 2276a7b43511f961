'use strict';

// The client and the Express middleware against a sluice serve whose own
// store is down under on_error deny (its Redis refuses connections):
// sluice still answers, a 503 RATE_LIMITER_UNAVAILABLE with Retry-After,
// and that answer is carried on as it is. Run by clients/node's Go test.

const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');

const sluice = require('../sluice');
const { sluiceURL, listen, request } = require('./helpers');

const url = sluiceURL();

test('store down: the check is sluice\'s refusal, not a failure to ask', async (t) => {
  // The client's own onError never applies: sluice decided.
  const c = sluice.client({ url, timeout: 5000, onError: 'allow', onFailure: (err) => assert.fail(err.message) });
  t.after(() => c.close());
  const d = await c.check({ rule: 'login', key: '192.0.2.1' });
  assert.equal(d.allowed, false);
  assert.equal(d.status, 503);
  assert.equal(d.degraded, true);
  assert.equal(d.retryAfter, 1);
  assert.equal(d.error, undefined);
  assert.equal(d.body.error.code, 'RATE_LIMITER_UNAVAILABLE');
  assert.deepEqual(Object.keys(d.headers), ['Retry-After']); // no made-up numbers
});

test('store down: the middleware answers sluice\'s 503', async (t) => {
  let handled = 0;
  const app = express();
  app.post('/login', sluice.express({ url, timeout: 5000, rule: 'login', onFailure: (err) => assert.fail(err.message) }), (req, res) => {
    handled++;
    res.send('through');
  });
  const base = await listen(t, app);
  const r = await request('POST', `${base}/login`);
  assert.equal(r.status, 503);
  assert.equal(r.headers['retry-after'], '1');
  assert.equal(r.headers['ratelimit'], undefined);
  assert.equal(r.headers['content-type'], 'application/json');
  assert.deepEqual(JSON.parse(r.body), {
    error: { code: 'RATE_LIMITER_UNAVAILABLE', message: 'the rate limiter\'s store is unavailable and the error policy is deny; retry later' },
  });
  assert.equal(handled, 0);
});
