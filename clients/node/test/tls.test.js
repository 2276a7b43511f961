'use strict';

// The client and the Express middleware against a sluice serve on mutual
// TLS (--tls-cert, --tls-key, --tls-client-ca), started by clients/node's
// Go test with certificates it made: SLUICE_TEST_CA, the CA of sluice's
// certificate and of the client's (SLUICE_TEST_CERT, SLUICE_TEST_KEY), and
// SLUICE_TEST_STRANGER_CERT and _KEY, a client certificate of a CA sluice
// does not trust. Each is a file.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const express = require('express');

const sluice = require('../sluice');
const { sluiceURL, listen, request } = require('./helpers');

const url = sluiceURL();
assert.ok(url.startsWith('https://'), `SLUICE_URL ${url}: want the https:// of a sluice serve on TLS`);

function pem(name) {
  const file = process.env[name];
  if (!file) throw new Error(`${name} is not set: run these tests with \`go test ./clients/node\``);
  return fs.readFileSync(file);
}
const ca = pem('SLUICE_TEST_CA');
const cert = pem('SLUICE_TEST_CERT');
const key = pem('SLUICE_TEST_KEY');
const stranger = { cert: pem('SLUICE_TEST_STRANGER_CERT'), key: pem('SLUICE_TEST_STRANGER_KEY') };

// newClient returns a client closed when t ends, recording its failures.
function newClient(t, options) {
  const failures = [];
  const c = sluice.client({ url, timeout: 5000, onError: 'deny', onFailure: (err) => failures.push(err), ...options });
  t.after(() => c.close());
  return { c, failures };
}

test('TLS: with the CA and a client certificate, sluice decides', async (t) => {
  const { c, failures } = newClient(t, { ca, cert, key });
  for (let i = 0; i < 3; i++) {
    const d = await c.check({ rule: 'login', key: '198.51.100.1' });
    assert.equal(d.allowed, true, `check ${i + 1}`);
    assert.equal(d.status, 200);
    assert.equal(d.body.remaining, 2 - i);
  }
  const d = await c.check({ rule: 'login', key: '198.51.100.1' });
  assert.equal(d.status, 429);
  assert.equal(d.allowed, false);
  assert.deepEqual(failures, []);
});

// Each refused client cannot ask sluice: onError ('deny') decides, and
// the error says why.
for (const [name, options, codes] of [
  ['without a client certificate', { ca }, ['ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED', 'ECONNRESET']],
  ['with a certificate of a CA sluice does not trust', { ca, ...stranger }, ['ERR_SSL_TLSV1_ALERT_UNKNOWN_CA', 'ECONNRESET']],
  ['without the CA (Node\'s own CAs)', { cert, key }, ['UNABLE_TO_VERIFY_LEAF_SIGNATURE']],
]) {
  test(`TLS: a client ${name} cannot ask sluice`, async (t) => {
    const { c, failures } = newClient(t, options);
    const d = await c.check({ rule: 'login', key: '198.51.100.2' });
    assert.equal(d.allowed, false);
    assert.equal(d.status, 0);
    assert.equal(d.degraded, true);
    assert.ok(d.error instanceof sluice.SluiceError);
    assert.ok(codes.includes(d.error.code), `error code ${d.error.code} (${d.error.message}), want one of ${codes}`);
    assert.deepEqual(failures, [d.error]);
  });
}

test('TLS: the middleware passes its tls options on to its client', async (t) => {
  const app = express();
  app.get('/login', sluice.express({ url, timeout: 5000, rule: 'login', key: () => '198.51.100.3', onError: 'deny', tls: { ca, cert, key } }), (req, res) => {
    res.send('through');
  });
  const base = await listen(t, app);
  const r = await request('GET', `${base}/login`);
  assert.equal(r.status, 200, r.body);
  assert.equal(r.body, 'through');
  assert.equal(r.headers['x-ratelimit-remaining'], '2');
});

test('TLS options: for an https:// url, as PEM, the certificate with its key', () => {
  assert.throws(() => sluice.client({ url: 'http://127.0.0.1:8080', ca }), /ca is a TLS option: url "http:\/\/127.0.0.1:8080\/" must be https:\/\//);
  assert.throws(() => sluice.client({ url, cert }), /cert needs key/);
  assert.throws(() => sluice.client({ url, key }), /key needs cert/);
  assert.throws(() => sluice.client({ url, ca: 42 }), /ca must be PEM text/);
  assert.throws(() => sluice.express({ url: 'http://127.0.0.1:8080', rule: 'login', tls: { cert, key } }), /cert, key are TLS options/);
  assert.throws(() => sluice.express({ url, rule: 'login', tls: { cert, passphrase: 'x' } }), /tls option passphrase is not one of ca, cert, key/);
});
