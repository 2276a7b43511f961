// An Express app limited by sluice: logins per client address, failing
// closed, searches per API key, each page costing one, and completions
// per API key, each costing the tokens it used. Put sluice.js
// beside this file (or npm install the clients/node directory and
// require('sluice-client')), start sluice serve with sluice.yaml, then:
//
//   node app.js
//   curl -si -X POST localhost:3000/api/auth/login    # the fourth in a minute: 429
const express = require('express');
const sluice = require('./sluice');

const url = process.env.SLUICE_URL || 'http://127.0.0.1:8080'; // sluice serve --listen
const app = express();

// Logins: the client's address (req.ip, the default key), 3 a minute,
// refused while sluice cannot be asked.
app.post('/api/auth/login', sluice.express({ url, rule: 'login', onError: 'deny' }), (req, res) => {
  res.send('welcome\n');
});

// Searches: per API key, a request for n pages costing n.
app.get('/api/search', sluice.express({
  url,
  rule: 'search',
  key: (req) => req.get('X-API-Key'), // none: 401 MISSING_KEY
  cost: (req) => Number(req.query.pages || 1),
}), (req, res) => {
  res.json({ results: [] });
});

// Completions: per API key, a call reserves 4096 tokens (the most a reply
// may use) and is settled, once answered, at the tokens it used: the
// handler reports them in X-Tokens-Used, removed before the client sees it.
app.post('/api/complete', sluice.express({
  url,
  rule: 'tokens',
  key: (req) => req.get('X-API-Key'),
  costFrom: 'header:X-Tokens-Used',
  strip: true,
}), async (req, res) => {
  const reply = await complete();
  res.set('X-Tokens-Used', String(reply.usage.total_tokens));
  res.json({ text: reply.text });
});

// complete stands in for a model call: its reply and the tokens it used.
async function complete() {
  return { text: 'Hello!', usage: { total_tokens: 1200 } };
}

const server = app.listen(Number(process.env.PORT || 3000), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
