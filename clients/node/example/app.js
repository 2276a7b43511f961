// An Express app limited by sluice: logins per client address, failing
// closed, and searches per API key, each page costing one. Put sluice.js
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

const server = app.listen(Number(process.env.PORT || 3000), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
