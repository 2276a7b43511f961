'use strict';

// What the tests share: sluice's address, an Express app on a loopback
// port, and an HTTP request that reads the whole answer.

const http = require('node:http');

// sluiceURL returns the address of the sluice serve that clients/node's Go
// test started (go test ./clients/node), which these tests need.
function sluiceURL() {
  const url = process.env.SLUICE_URL;
  if (!url) {
    throw new Error('SLUICE_URL is not set: run these tests with `go test ./clients/node`, which starts sluice serve with test/sluice.yaml');
  }
  return url;
}

// listen serves app on a free loopback port until the test t ends, and
// returns its base URL.
async function listen(t, app) {
  const server = http.createServer(app);
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  t.after(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${server.address().port}`;
}

// request sends one request, on a connection of its own, and resolves to
// its status, header fields and trailers (lower-case names) and body.
function request(method, url, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, trailers: res.trailers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.setTimeout(10000, () => req.destroy(new Error(`${method} ${url}: no answer within 10s`)));
    req.on('error', reject);
    req.end();
  });
}

// tooMany returns the exact 429 body of sluice's Go middleware for a
// Retry-After of secs.
function tooMany(secs) {
  return `{"error":{"code":"RATE_LIMITED","message":"rate limit exceeded; retry after ${secs} second${secs === 1 ? '' : 's'}","retry_after":${secs}}}\n`;
}

module.exports = { sluiceURL, listen, request, tooMany };
