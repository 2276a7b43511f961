'use strict';

// Reserve and settle, by the client and by the Express middleware, against
// a running sluice serve (test/sluice.yaml: rules tokens, 10000 an hour
// reserving 1000, and downloads, 10000 an hour post-paid; both
// sliding_log, which counts exactly), started by clients/node's Go test.
// Each test has keys of its own.

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const express = require('express'); // Debian's node-express: NODE_PATH=/usr/share/nodejs

const sluice = require('../sluice');
const { sluiceURL, listen, request } = require('./helpers');

const url = sluiceURL();
const LIMIT = 10000; // of both rules
const RESERVE = 1000; // of tokens

// newClient returns a client closed when t ends, with a timeout that a
// loaded machine keeps, failing t on any failure to ask sluice: sluice runs.
function newClient(t) {
  const failures = [];
  const c = sluice.client({ url, timeout: 5000, onFailure: (err) => failures.push(err) });
  t.after(() => {
    c.close();
    assert.deepEqual(failures, [], 'sluice could not be asked');
  });
  return c;
}

// remaining returns what rule has left for key, by a check of cost 0.
async function remaining(c, rule, key) {
  const d = await c.check({ rule, key, cost: 0 });
  assert.equal(d.status, 200, d.raw);
  return d.body.remaining;
}

// settles records the middleware's onSettle calls: onSettle is the option,
// next() resolves to the next call's { err, settlement, req }, in order.
function settles() {
  const calls = [];
  const waiting = [];
  return {
    onSettle(err, settlement, req) {
      const call = { err, settlement, req };
      const w = waiting.shift();
      if (w) w(call);
      else calls.push(call);
    },
    next(ms = 10000) {
      if (calls.length > 0) return Promise.resolve(calls.shift());
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the middleware made no settle within ${ms} ms`)), ms);
        waiting.push((call) => {
          clearTimeout(timer);
          resolve(call);
        });
      });
    },
    get pending() {
      return calls.length;
    },
  };
}

// sleep resolves after ms.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('reserve and settle: the reserve is held, the settle leaves exactly the cost spent, once', async (t) => {
  const c = newClient(t);
  const d = await c.reserve({ rule: 'tokens', key: 'reserve-1' });
  assert.equal(d.allowed, true);
  assert.equal(d.status, 200);
  assert.equal(typeof d.reservation, 'string');
  assert.ok(d.reservation.length > 0);
  assert.equal(d.body.remaining, LIMIT - RESERVE);
  assert.equal(d.headers['X-RateLimit-Remaining'], String(LIMIT - RESERVE));
  assert.equal(await remaining(c, 'tokens', 'reserve-1'), LIMIT - RESERVE);

  const s = await c.settle(d.reservation, 1234);
  assert.deepEqual([s.allowed, s.cost, s.retryAfter], [true, 1234, 0]);
  assert.equal(s.body.remaining, LIMIT - 1234);
  assert.equal(s.body.limit, LIMIT);
  assert.deepEqual(s.body.policies.map((p) => [p.name, p.remaining]), [['tokens-1h', LIMIT - 1234]]);
  assert.deepEqual(JSON.parse(s.raw), s.body);
  assert.equal(await remaining(c, 'tokens', 'reserve-1'), LIMIT - 1234);

  // A retry, at any cost, is refused and gives nothing back.
  for (const cost of [1234, 0]) {
    await assert.rejects(c.settle(d.reservation, cost), (err) => {
      assert.ok(err instanceof sluice.SluiceError, String(err));
      assert.deepEqual([err.code, err.status], ['ALREADY_SETTLED', 409]);
      assert.match(err.message, /settled already/);
      return true;
    });
  }
  assert.equal(await remaining(c, 'tokens', 'reserve-1'), LIMIT - 1234);

  // check is the same request: it answers the reservation too; a rule
  // that does not settle reserves nothing.
  const checked = await c.check({ rule: 'tokens', key: 'reserve-1b' });
  assert.equal(typeof checked.reservation, 'string');
  assert.equal((await c.check({ rule: 'search', key: 'reserve-1' })).reservation, null);
});

test('settle above the reserve is a debt: denied until repaid; refund gives units back by rule and key', async (t) => {
  const c = newClient(t);
  const d = await c.reserve({ rule: 'tokens', key: 'debt-1' });
  const s = await c.settle(d.reservation, LIMIT + 500);
  assert.equal(s.allowed, false, 'a debt of 500');
  assert.equal(s.body.remaining, 0);
  assert.ok(s.retryAfter > 3500 && s.retryAfter <= 3600, `retryAfter ${s.retryAfter}: the log forgets the debt in an hour`);
  const denied = await c.check({ rule: 'tokens', key: 'debt-1', cost: 1 });
  assert.equal(denied.status, 429);
  assert.equal(denied.reservation, null);

  const back = await c.refund({ rule: 'tokens', key: 'debt-1', cost: 2000 });
  assert.deepEqual([back.allowed, back.cost, back.retryAfter, back.body.remaining], [true, 2000, 0, 1500]);
  assert.equal(await remaining(c, 'tokens', 'debt-1'), 1500);
  // Without a cost, the rule's: 1 for search (nothing spent: a full bucket stays full).
  const rule = await c.refund({ rule: 'search', key: 'debt-1' });
  assert.deepEqual([rule.allowed, rule.cost, rule.body.remaining], [true, null, 5]);
});

test('settleBatch: each settle on its own, with its status, or its error and code', async (t) => {
  const c = newClient(t);
  const a = await c.reserve({ rule: 'tokens', key: 'batch-a' });
  const b = await c.reserve({ rule: 'downloads', key: 'batch-b' });
  const results = await c.settleBatch([
    { reservation: a.reservation, cost: 10 },
    { reservation: b.reservation, cost: 300 },
    { reservation: a.reservation, cost: 10 },
    { reservation: 'nonsense', cost: 1 },
    { rule: 'tokens', key: 'batch-a', cost: 5 },
    { rule: 'nope', key: 'k', cost: 1 },
  ]);
  assert.deepEqual(results.map((r) => r.status), [200, 200, 409, 400, 200, 400]);
  assert.deepEqual([results[0].allowed, results[0].cost, results[0].body.remaining], [true, 10, LIMIT - 10]);
  assert.deepEqual([results[1].allowed, results[1].cost, results[1].body.remaining], [true, 300, LIMIT - 300]);
  assert.deepEqual(results.map((r) => r.error && r.error.code), [undefined, undefined, 'ALREADY_SETTLED', 'INVALID_RESERVATION', undefined, 'BAD_REQUEST']);
  for (const r of results.filter((r) => r.error)) {
    assert.ok(r.error instanceof sluice.SluiceError);
    assert.equal(r.error.status, r.status);
  }
  assert.match(results[5].error.message, /^sluice: settles\[5\]: unknown rule "nope"/);
  assert.equal(results[4].body.remaining, LIMIT - 5);
  // The batch itself: sluice's 400.
  await assert.rejects(c.settleBatch([]), (err) => err instanceof sluice.SluiceError && err.code === 'BAD_REQUEST' && /1 to 100 settles/.test(err.message));
});

test('settle: what sluice refuses rejects with its code; bad arguments are errors that say what is wrong', async (t) => {
  const c = newClient(t);
  await assert.rejects(c.settle('nonsense', 1), (err) => err instanceof sluice.SluiceError && err.code === 'INVALID_RESERVATION' && err.status === 400);
  await assert.rejects(c.refund({ rule: 'login', key: 'nope', cost: 1 }), (err) => err.code === 'BAD_REQUEST' && /is not an IP address/.test(err.message));
  for (const [call, says] of [
    [() => c.settle(undefined, 1), 'settle needs a reservation'],
    [() => c.settle('r'), 'the cost of a settle must be a whole number >= 0, got undefined'],
    [() => c.settle('r', -1), 'whole number >= 0'],
    [() => c.settle('r', 1.5), 'whole number >= 0'],
    [() => c.refund({}), 'refund needs a rule name'],
    [() => c.refund({ rule: 'tokens', key: 7 }), 'key of rule "tokens" must be a string'],
    [() => c.reserve({ rule: 'tokens', key: 'k', cost: 0 }), 'a cost of 0 reserves nothing'],
    [() => c.settleBatch('r'), 'needs an array of settles'],
    [() => c.settleBatch([{ reservation: 'r' }]), 'settles[0].cost must be a whole number'],
    [() => c.settleBatch([null]), 'settles[0] must be'],
  ]) {
    await assert.rejects(call(), (err) => err instanceof TypeError && err.message.includes(says), says);
  }
  for (const [options, says] of [
    [{ costFrom: 'X-Tokens-Used' }, 'write \'header:X-Tokens-Used\''],
    [{ costFrom: 'header:' }, 'must be \'header:<Name>\''],
    [{ costFrom: 5 }, 'must be \'header:<Name>\''],
    [{ costFrom: 'bytes', strip: true }, 'strip of rule "tokens" applies to a cost read from a header'],
    [{ strip: true }, 'applies to a cost read from a header'],
    [{ costFrom: 'bytes', strip: 'yes' }, 'must be true or false'],
    [{ costFrom: 'bytes', onSettle: 'log' }, 'onSettle of rule "tokens" must be a function'],
  ]) {
    assert.throws(() => sluice.express({ client: c, rule: 'tokens', ...options }), (err) => err instanceof TypeError && err.message.includes(says), says);
  }
});

// app returns the base URL of an Express app serving route with the
// middleware of options (rule tokens keyed by X-API-Key, settling into
// log) before handler.
async function app(t, c, log, options, handler) {
  const a = express();
  a.all('/', sluice.express({ client: c, rule: 'tokens', key: (req) => req.get('X-API-Key'), onSettle: log.onSettle, ...options }), handler);
  return listen(t, a);
}

test('express: settles from a header, stripped before the client sees it or left', async (t) => {
  const c = newClient(t);
  const log = settles();
  const stripped = await app(t, c, log, { costFrom: 'header:X-Tokens-Used', strip: true }, (req, res) => {
    res.set('X-Tokens-Used', '321');
    res.json({ text: 'hello' });
  });
  const r = await request('POST', stripped, { 'X-API-Key': 'mw-header' });
  assert.equal(r.status, 200);
  assert.equal(r.body, '{"text":"hello"}');
  assert.equal(r.headers['x-tokens-used'], undefined, 'strip: the header reached the client');
  assert.equal(r.headers['x-ratelimit-remaining'], String(LIMIT - RESERVE), 'the reserve, as admitted');
  const { err, settlement, req } = await log.next();
  assert.equal(err, null);
  assert.equal(req.get('X-API-Key'), 'mw-header');
  assert.deepEqual([settlement.allowed, settlement.cost, settlement.body.remaining], [true, 321, LIMIT - 321]);
  assert.equal(await remaining(c, 'tokens', 'mw-header'), LIMIT - 321);

  // A header given to writeHead itself, stripped there.
  const given = await app(t, c, log, { costFrom: 'header:x-tokens-used', strip: true }, (req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain', 'X-Tokens-Used': '55' });
    res.end('hello');
  });
  const g = await request('POST', given, { 'X-API-Key': 'mw-header-2' });
  assert.deepEqual([g.status, g.body, g.headers['content-type'], g.headers['x-tokens-used']], [200, 'hello', 'text/plain', undefined]);
  assert.equal((await log.next()).settlement.cost, 55);
  assert.equal(await remaining(c, 'tokens', 'mw-header-2'), LIMIT - 55);

  // Not stripped: the client sees it.
  const kept = await app(t, c, log, { costFrom: 'header:X-Tokens-Used' }, (req, res) => {
    res.set('X-Tokens-Used', '56');
    res.send('hello');
  });
  const k = await request('POST', kept, { 'X-API-Key': 'mw-header-3' });
  assert.equal(k.headers['x-tokens-used'], '56');
  assert.equal((await log.next()).settlement.cost, 56);
  assert.equal(await remaining(c, 'tokens', 'mw-header-3'), LIMIT - 56);
});

// stream answers a chunked response of chunks writes, a tick apart, then
// its cost as the trailer X-Tokens-Used, announced.
function stream(cost, chunks = 5) {
  return (req, res) => {
    res.setHeader('Content-Type', 'text/plain');
    res.setHeader('Trailer', 'X-Tokens-Used');
    let i = 0;
    const tick = () => {
      if (i++ < chunks) {
        res.write(`token ${i}\n`);
        setTimeout(tick, 5);
        return;
      }
      res.addTrailers({ 'X-Tokens-Used': String(cost) });
      res.end();
    };
    tick();
  };
}

test('express: settles from the trailer at the end of a chunked streamed response', async (t) => {
  const c = newClient(t);
  const log = settles();
  const plain = await app(t, c, log, { costFrom: 'header:X-Tokens-Used' }, stream(777));
  const r = await request('POST', plain, { 'X-API-Key': 'mw-trailer' });
  assert.equal(r.status, 200);
  assert.equal(r.headers['transfer-encoding'], 'chunked');
  assert.equal(r.headers['trailer'], 'X-Tokens-Used');
  assert.equal(r.body, 'token 1\ntoken 2\ntoken 3\ntoken 4\ntoken 5\n');
  assert.equal(r.trailers['x-tokens-used'], '777');
  const first = await log.next();
  assert.equal(first.err, null);
  assert.equal(first.settlement.cost, 777);
  assert.equal(await remaining(c, 'tokens', 'mw-trailer'), LIMIT - 777);

  // Stripped: neither the trailer nor its announcement is sent.
  const stripped = await app(t, c, log, { costFrom: 'header:X-Tokens-Used', strip: true }, stream(778));
  const s = await request('POST', stripped, { 'X-API-Key': 'mw-trailer-2' });
  assert.equal(s.headers['trailer'], undefined);
  assert.deepEqual(s.trailers, {});
  assert.equal(s.body, 'token 1\ntoken 2\ntoken 3\ntoken 4\ntoken 5\n');
  assert.equal((await log.next()).settlement.cost, 778);
  assert.equal(await remaining(c, 'tokens', 'mw-trailer-2'), LIMIT - 778);
});

test('express: a client gone mid-stream is settled (bytes) at what it was sent', async (t) => {
  const c = newClient(t);
  const log = settles();
  const CHUNK = 100;
  const CHUNKS = 60; // 6000 bytes, 10 ms apart, written whether the client stays or not
  let written = 0;
  let finished = null;
  const a = express();
  a.get('/download', sluice.express({ client: c, rule: 'downloads', key: () => 'mw-gone', costFrom: 'bytes', onSettle: log.onSettle }), (req, res) => {
    res.setHeader('Content-Type', 'application/octet-stream');
    const timer = setInterval(() => {
      if (written >= CHUNK * CHUNKS) {
        clearInterval(timer);
        res.end();
        return;
      }
      res.write(Buffer.alloc(CHUNK, 'x'));
      written += CHUNK;
    }, 10);
    // A handler that never notices its client has gone: what it writes
    // after is not sent, and not counted.
    res.on('close', () => {
      finished = res.writableFinished;
    });
  });
  const base = await listen(t, a);

  // The client reads 1000 bytes, then goes.
  const received = await new Promise((resolve, reject) => {
    const req = http.get(`${base}/download`, { agent: false }, (res) => {
      assert.equal(res.headers['x-ratelimit-remaining'], String(LIMIT - 1), 'post-paid: admitted at 1');
      let n = 0;
      res.on('data', (chunk) => {
        n += chunk.length;
        if (n >= 1000) {
          req.destroy();
          resolve(n);
        }
      });
    });
    req.on('error', (err) => { if (err.code !== 'ECONNRESET') reject(err); });
  });
  const { err, settlement } = await log.next();
  assert.equal(err, null);
  assert.equal(finished, false, 'the response finished: the client did not go mid-stream');
  assert.ok(settlement.cost >= received && settlement.cost <= written && settlement.cost < CHUNK * CHUNKS,
    `settled at ${settlement.cost} bytes: want at least the ${received} the client read, at most the ${written} written by then, fewer than the whole ${CHUNK * CHUNKS}`);
  // Post-paid: its 1 became the bytes sent. Unsettled, 9999 would be left.
  assert.equal(settlement.body.remaining, LIMIT - settlement.cost);
  assert.equal(await remaining(c, 'downloads', 'mw-gone'), LIMIT - settlement.cost);
});

test('express, control: the same response under a middleware without costFrom keeps its reserve; one without a cost too', async (t) => {
  const c = newClient(t);
  const log = settles();
  const reports = (req, res) => {
    res.set('X-Tokens-Used', '10');
    res.send('hello');
  };
  const unsettled = await app(t, c, log, {}, reports);
  const settling = await app(t, c, log, { costFrom: 'header:X-Tokens-Used' }, reports);
  const silent = await app(t, c, log, { costFrom: 'header:X-Tokens-Used' }, (req, res) => res.send('hello'));

  assert.equal((await request('GET', unsettled, { 'X-API-Key': 'ctl-none' })).status, 200);
  assert.equal((await request('GET', silent, { 'X-API-Key': 'ctl-silent' })).status, 200);
  assert.equal((await request('GET', settling, { 'X-API-Key': 'ctl-settled' })).status, 200);
  assert.equal((await log.next()).settlement.cost, 10);
  await sleep(50); // a settle the others should not have made would have come by now
  assert.equal(log.pending, 0, 'a settle of a response that reported no cost, or of a middleware without costFrom');
  assert.equal(await remaining(c, 'tokens', 'ctl-none'), LIMIT - RESERVE);
  assert.equal(await remaining(c, 'tokens', 'ctl-silent'), LIMIT - RESERVE);
  assert.equal(await remaining(c, 'tokens', 'ctl-settled'), LIMIT - 10);
});

test('express: a settle that fails is told to onSettle, never to the request; costFrom as a function', async (t) => {
  const c = newClient(t);
  const log = settles();
  // The handler settles the reservation itself: the middleware's settle is a retry.
  const twice = await app(t, c, log, { costFrom: 'header:X-Tokens-Used' }, async (req, res) => {
    await c.settle(res.locals.sluice.reservation, 5);
    res.set('X-Tokens-Used', '7');
    res.send('hello');
  });
  const r = await request('GET', twice, { 'X-API-Key': 'fail-twice' });
  assert.deepEqual([r.status, r.body], [200, 'hello']);
  const retried = await log.next();
  assert.equal(retried.settlement, null);
  assert.ok(retried.err instanceof sluice.SluiceError);
  assert.deepEqual([retried.err.code, retried.err.status], ['ALREADY_SETTLED', 409]);
  assert.equal(await remaining(c, 'tokens', 'fail-twice'), LIMIT - 5);

  const nonsense = await app(t, c, log, { costFrom: 'header:X-Tokens-Used', strip: true }, (req, res) => {
    res.set('X-Tokens-Used', '12.5');
    res.send('hello');
  });
  const n = await request('GET', nonsense, { 'X-API-Key': 'fail-nonsense' });
  assert.deepEqual([n.status, n.headers['x-tokens-used']], [200, undefined]);
  const bad = await log.next();
  assert.equal(bad.err.code, 'INVALID_COST');
  assert.match(bad.err.message, /X-Tokens-Used: "12\.5"/);
  assert.equal(await remaining(c, 'tokens', 'fail-nonsense'), LIMIT - RESERVE, 'a cost that is no number keeps the reserve');

  const throws = await app(t, c, log, { costFrom: () => { throw new Error('no usage'); } }, (req, res) => res.send('hello'));
  assert.equal((await request('GET', throws, { 'X-API-Key': 'fail-throws' })).status, 200);
  assert.equal((await log.next()).err.message, 'no usage');

  // A function of the response, here of what the handler left in res.locals, asynchronously.
  const fn = await app(t, c, log, { costFrom: async (req, res) => res.locals.tokens }, (req, res) => {
    res.locals.tokens = 42;
    res.send('hello');
  });
  assert.equal((await request('GET', fn, { 'X-API-Key': 'fn' })).status, 200);
  assert.equal((await log.next()).settlement.cost, 42);
  assert.equal(await remaining(c, 'tokens', 'fn'), LIMIT - 42);
});
