// The sluice dashboard: polls /admin/v1/stats every second and draws it.
// No framework, no build step; every value is written with textContent.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const LINES = [["allowed", "allowed"], ["denied", "denied"], ["shadow_denied", "shadow"]];
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function rate(v) {
    if (!v) return "0";
    return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2).replace(/\.?0+$/, "");
  }
  function count(v) { return Math.round(v || 0).toLocaleString("en-US"); }
  function seconds(s) {
    if (s === null || s === undefined) return "–";
    if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
    if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
    return s.toFixed(2) + " s";
  }
  function span(s) {
    if (s < 120) return Math.round(s) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function last(a) { return a && a.length ? a[a.length - 1] : 0; }
  function limits(r) {
    return (r.limits || []).map((l) => {
      // A concurrency limit's period is its slots' lease.
      let s = l.algorithm === "concurrency" ? l.limit + " in flight, concurrency (lease " + l.period + ")" : l.limit + "/" + l.period + " " + l.algorithm;
      if (l.burst && l.burst !== l.limit) s += " burst " + l.burst;
      return s;
    }).join(" + ") + (r.plans && r.plans.length ? " (plans: " + r.plans.join(", ") + ")" : "");
  }

  // slotsLine says how many of a concurrency limit's slots are in use.
  function slotsLine(s) {
    const d = el("div", { class: "slots", "data-field": "slots", "data-limit": s.limit });
    if (s.per_key) {
      d.textContent = "slots: " + count(s.slots) + " per key";
    } else if (s.in_use === null || s.in_use === undefined) {
      d.textContent = "slots in use: – of " + count(s.slots) + (s.error ? " (" + s.error + ")" : "");
    } else {
      d.append("slots in use: ", el("b", { "data-field": "in_use" }, count(s.in_use)), " of " + count(s.slots));
    }
    return d;
  }

  // shedLine lists the requests a rule that sheds by class shed, by each
  // class below the highest (which is never shed).
  function shedLine(r, shed) {
    const d = el("div", { class: "shed", "data-field": "shed", title: "requests shed since the start; " + r.classes[0] + ", the highest class, is never shed" }, "shed:");
    for (const c of r.classes.slice(1)) {
      d.append(" ", el("span", { "data-class": c }, c + " "), el("b", { "data-class-shed": c }, count((shed || {})[c])));
    }
    return d;
  }

  function renderRules(st, byRule) {
    const slots = {};
    for (const s of st.slots || []) (slots[s.rule] = slots[s.rule] || []).push(s);
    const body = $("rules").tBodies[0];
    body.replaceChildren();
    $("no-rules").hidden = st.rules.length > 0;
    $("window-head").textContent = "allowed (" + span(st.series.steps * (st.series.step_seconds || 1)) + ")";
    for (const r of st.rules) {
      const s = byRule[r.name] || { per_second: {}, window: {} };
      const tr = el("tr", { "data-rule": r.name });
      const lim = el("td", {}, limits(r));
      if (s.settled) {
        // A rule that settles: what its settles gave back and charged.
        lim.append(el("div", { class: "settled", "data-field": "settled" },
          "settled: " + count(s.settled.refunded || 0) + " back, " + count(s.settled.charged || 0) + " charged"));
      }
      for (const sl of slots[r.name] || []) lim.append(slotsLine(sl));
      if (r.classes && r.classes.length > 1) lim.append(shedLine(r, s.shed));
      tr.append(el("td", {}, r.name), el("td", {}, r.match || (r.key === "request" ? "(by name: /v1/check, gRPC)" : "(every request)")), el("td", {}, r.key), lim);
      const mode = el("td");
      if (r.shadow) mode.append(el("span", { class: "tag" }, "shadow")); else mode.textContent = "enforce";
      tr.append(mode);
      for (const o of ["allowed", "denied", "shadow_denied"]) {
        tr.append(el("td", { class: "num", "data-field": o + "_per_second" }, rate(last(s.per_second[o]))));
      }
      for (const o of ["allowed", "denied", "shadow_denied"]) {
        tr.append(el("td", { class: "num", "data-field": o }, count(s.window[o])));
      }
      body.append(tr);
    }
  }

  // chart draws series (name -> [per second]) as lines in a box W units
  // wide (about its width in pixels, so that its text keeps its size).
  function chart(title, series, step, classes, W = 400) {
    const box = el("div", { class: "chart" });
    if (title) box.append(el("h3", {}, title));
    const H = 120, L = 34, B = 14;
    const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
    let n = 0, max = 0;
    for (const v of Object.values(series)) { n = Math.max(n, v.length); for (const x of v) max = Math.max(max, x); }
    const top = max > 0 ? max * 1.1 : 1;
    s.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W, y2: H - B }), svg("line", { class: "axis", x1: L, y1: 2, x2: L, y2: H - B }));
    const t1 = svg("text", { x: 2, y: 12 }); t1.textContent = rate(top); s.append(t1);
    const t0 = svg("text", { x: 2, y: H - B }); t0.textContent = "0"; s.append(t0);
    const tx = svg("text", { x: L + 2, y: H - 2 }); tx.textContent = "−" + span(n * step); s.append(tx);
    const tn = svg("text", { x: W - 20, y: H - 2 }); tn.textContent = "now"; s.append(tn);
    for (const [name, cls] of classes) {
      const v = series[name];
      if (!v || !v.length) continue;
      const pts = v.map((x, i) => {
        const px = L + (W - L) * (n <= 1 ? 1 : i / (n - 1));
        const py = (H - B) - (H - B - 4) * (x / top);
        return px.toFixed(1) + "," + py.toFixed(1);
      });
      s.append(svg("polyline", { class: cls, points: pts.join(" ") }));
    }
    box.append(s);
    return box;
  }

  function renderCharts(st, byRule) {
    const c = $("charts");
    c.replaceChildren();
    const names = st.rules.map((r) => r.name);
    for (const rs of st.series.rules) if (!names.includes(rs.rule)) names.push(rs.rule);
    for (const name of names) {
      const rs = byRule[name];
      const box = chart(name, rs ? rs.per_second : {}, st.series.step_seconds || 1, LINES);
      box.setAttribute("data-rule", name);
      c.append(box);
    }
    if (!names.length) c.append(el("p", { class: "muted" }, "No decisions yet."));
  }

  function renderTop(top) {
    const body = $("top").tBodies[0];
    body.replaceChildren();
    $("no-top").hidden = top.keys.length > 0;
    $("top-span").textContent = top.counted ? "(last " + span(top.span_seconds) + ", " + (top.masked ? "masked" : "in the clear") + ")" : "";
    for (const k of top.keys) {
      const tr = el("tr", { "data-rule": k.rule, "data-key": k.key });
      const rule = el("td", {}, k.rule + " ");
      if (k.shadow) rule.append(el("span", { class: "tag" }, "shadow"));
      tr.append(rule, el("td", { class: "key" }, k.key), el("td", { class: "num", "data-field": "denied" }, count(k.denied)),
        el("td", { class: "num" }, k.error ? count(k.error) : "0"));
      body.append(tr);
    }
  }

  function renderStore(st) {
    const s = st.store, l = s.latency;
    const b = $("breaker");
    b.textContent = s.breaker; b.className = "badge " + s.breaker;
    // A store of several nodes (a Cluster's masters): each node's breaker.
    $("nodes").replaceChildren(...(s.nodes || []).map(n =>
      el("b", { class: "badge " + n.breaker, title: n.node + ": " + n.breaker, "data-node": n.node }, n.node)));
    $("p50").textContent = seconds(l.p50_seconds);
    $("p90").textContent = seconds(l.p90_seconds);
    $("p99").textContent = seconds(l.p99_seconds);
    $("errors").textContent = rate(s.errors_per_second);
    $("degraded").textContent = rate(s.degraded_per_second);
    $("takes").textContent = rate(last(st.series.takes));
    $("latency-note").textContent = l.calls ? "percentiles of " + count(l.calls) + " store calls over the last " + span(l.window_seconds) : "no store calls in the last minute";
    const box = chart("store errors (red) and degraded decisions (violet) per second",
      { errors: st.series.store_errors || [], degraded: st.series.degraded || [] }, st.series.step_seconds || 1,
      [["errors", "denied"], ["degraded", "degraded"]], 600);
    $("store-chart").replaceChildren(...box.childNodes);
  }

  function renderReloads(rs) {
    const ul = $("reloads");
    ul.replaceChildren();
    $("no-reloads").hidden = rs.length > 0;
    for (const r of rs) {
      const li = el("li");
      li.append(el("span", {}, new Date(r.time).toLocaleTimeString() + " "), el("span", { class: r.outcome }, r.outcome));
      if (r.error) li.append(el("pre", {}, r.error));
      ul.append(li);
    }
  }

  function render(st) {
    const byRule = {};
    for (const rs of st.series.rules) byRule[rs.rule] = rs;
    const c = st.config || {};
    $("config").textContent = [c.path, c.summary].filter(Boolean).join(" · ") + " · up " + span(st.uptime_seconds);
    renderRules(st, byRule);
    renderCharts(st, byRule);
    renderTop(st.top);
    renderStore(st);
    renderReloads(st.reloads);
    $("status").textContent = "updated " + new Date(st.now).toLocaleTimeString();
    document.body.setAttribute("data-updated", st.now);
  }

  // A poll is given up after POLL_TIMEOUT ms: one that never gets an
  // answer would stop the updates for good.
  const POLL_TIMEOUT = 5000;
  // TOKEN is where the tab keeps the admin token of a server that asks for
  // it (sluice serve --admin-auth all): sent as the polls' bearer token.
  const TOKEN = "sluice-admin-token";
  function token() {
    try { return sessionStorage.getItem(TOKEN) || ""; } catch (e) { return ""; }
  }
  function keep(t) {
    try { if (t) sessionStorage.setItem(TOKEN, t); else sessionStorage.removeItem(TOKEN); } catch (e) { /* no storage: ask again */ }
  }
  function ask(why) {
    $("login").hidden = false;
    $("forget").hidden = true;
    $("login-error").textContent = why;
    $("status").textContent = "needs the admin token";
  }

  let timer = 0, busy = false, again = false;
  // poll reads the stats once, and schedules the next read: in a second,
  // after a 429's Retry-After, or (after a 401) once a token is given.
  async function poll() {
    if (busy) { again = true; return; }
    busy = true;
    let next = 1000;
    try {
      const t = token();
      const resp = await fetch("/admin/v1/stats", { cache: "no-store", headers: t ? { Authorization: "Bearer " + t } : {}, signal: AbortSignal.timeout(POLL_TIMEOUT) });
      if (resp.status === 401) {
        keep("");
        ask(t ? "The server refused that token." : "");
        next = -1;
      } else if (resp.status === 429) {
        const body = await resp.json().catch(() => ({}));
        const wait = (body.error && body.error.retry_after) || Number(resp.headers.get("Retry-After")) || 10;
        $("status").textContent = "too many wrong tokens: asking again in " + wait + " s";
        next = wait * 1000;
      } else if (!resp.ok) {
        throw new Error("HTTP " + resp.status);
      } else {
        const st = await resp.json();
        $("login").hidden = true;
        $("forget").hidden = !t;
        render(st);
      }
    } catch (e) {
      $("status").textContent = "not updating: " + e.message;
    }
    busy = false;
    if (again) { again = false; next = 0; }
    clearTimeout(timer);
    if (next >= 0) timer = setTimeout(poll, next);
  }
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    if (!t) return;
    keep(t);
    $("token").value = "";
    $("login").hidden = true;
    $("status").textContent = "connecting…";
    poll();
  });
  $("forget").addEventListener("click", () => { keep(""); poll(); });
  poll();
})();
