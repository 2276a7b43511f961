// firefox.cjs: a headless Firefox for the dashboard's end-to-end tests
// (browser_e2e_test.go), driven by puppeteer-core over WebDriver BiDi.
//
//	node firefox.cjs MODULES FIREFOX
//
// MODULES is the directory where npm installed puppeteer-core, FIREFOX the
// browser. It opens one page, then reads requests from stdin, one JSON
// object a line, and writes each reply on fd 3, one a line:
//
//	{"id": 1, "op": "navigate", "url": "http://..."}       -> {"id": 1}
//	{"id": 2, "op": "evaluate", "expr": "document.title"}  -> {"id": 2, "value": "..."}
//	{"id": 3, "op": "viewport", "width": 1280, "height": 860}
//	{"id": 4, "op": "screenshot", "full": true}            -> {"id": 4, "value": "<base64 PNG>"}
//
// A failed request is {"id", "error"}; a value of undefined is {"id",
// "undefined": true}. It writes {"ready": pid} on fd 3 once the page is open
// (pid: Firefox's, the leader of its process group), and {"pageError":
// text} for each error the page reports. When stdin ends, it closes the
// browser and exits. Firefox's own output goes to stdout and stderr.
'use strict';

const fs = require('node:fs');
const readline = require('node:readline');

const [modules, firefox] = process.argv.slice(2);
const puppeteer = require(require.resolve('puppeteer-core', { paths: [modules] }));
const out = fs.createWriteStream(null, { fd: 3 });
const send = (msg) => out.write(JSON.stringify(msg) + '\n');

// The browser's own request for the page's icon (/favicon.ico unless the
// page names one), which Chromium does not report either.
const isIcon = (url) => { try { return new URL(url).pathname === '/favicon.ico'; } catch { return false; } };

// The requests' handler, set once the page is open: the Go test sends
// none before {"ready"}.
let handle = null;
let browser = null;
const input = readline.createInterface({ input: process.stdin });
input.on('line', (line) => handle && handle(line));
input.on('close', async () => {
  // The test is done, or gone: close the browser (if it is still
  // starting, exiting kills it: puppeteer kills it when node exits).
  if (browser) await browser.close().catch(() => {});
  out.end(() => process.exit(0));
});

async function main() {
  browser = await puppeteer.launch({
    browser: 'firefox',
    protocol: 'webDriverBiDi',
    executablePath: firefox,
    headless: true,
    timeout: 0, // the start is bounded by the Go test, which ends stdin
    dumpio: true,
    env: { ...process.env, MOZ_CRASHREPORTER_DISABLE: '1' },
    // A pixel per CSS pixel, and scrollbars that take no room (as
    // Chromium's --hide-scrollbars), so that a page is as wide as its
    // viewport.
    extraPrefsFirefox: { 'layout.css.devPixelsPerPx': '1.0', 'ui.useOverlayScrollbars': 1 },
  });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  page.setDefaultTimeout(0); // each wait is bounded by the Go test's context
  page.setDefaultNavigationTimeout(0);

  const report = (text) => send({ pageError: text });
  page.on('pageerror', (e) => report('uncaught ' + (e && e.message ? e.message : String(e))));
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'assert') {
      report(`console.${m.type()}: ${m.text()} ${m.location().url ?? ''}`.trim());
    }
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && !isIcon(r.url())) {
      report(`failed to load ${r.url()}: the server responded with a status of ${r.status()} ${r.statusText()}`);
    }
  });
  page.on('requestfailed', (r) => {
    const why = (r.failure() && r.failure().errorText) || 'failed';
    // A request the page gave up itself (an AbortController, a navigation
    // away) is no error of the page's.
    if (!why.includes('NS_BINDING_ABORTED') && !isIcon(r.url())) {
      report(`failed to load ${r.url()}: ${why}`);
    }
  });

  const ops = {
    navigate: async (q) => { await page.goto(q.url, { waitUntil: 'load' }); },
    evaluate: (q) => page.evaluate(q.expr),
    viewport: (q) => page.setViewport({ width: q.width, height: q.height, deviceScaleFactor: 1 }),
    screenshot: (q) => page.screenshot({ type: 'png', fullPage: q.full, encoding: 'base64' }),
  };
  handle = async (line) => {
    const q = JSON.parse(line);
    try {
      if (!ops[q.op]) throw new Error(`no op ${q.op}`);
      const value = await ops[q.op](q);
      send(value === undefined ? { id: q.id, undefined: true } : { id: q.id, value });
    } catch (e) {
      send({ id: q.id, error: String(e && e.stack ? e.stack.split('\n')[0] : e) });
    }
  };
  send({ ready: browser.process().pid });
}

main().catch((e) => {
  process.stderr.write(`firefox.cjs: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
