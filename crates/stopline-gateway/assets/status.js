// The status page's script. It polls the token-authenticated routes about once a second and
// renders what they say; the stop form posts to /v1/engage. Everything shown comes from the
// gateway and may have been written by an agent (a latch's reason, a scope, a drill's fields), so
// it is only ever set as text (textContent), never parsed as HTML. There is no recovery control
// here, and there must never be one: recovery is the owner console's alone.
"use strict";

const TOKEN_KEY = "stopline.token";
const POLL_MS = 1000;
const DRILLS_EVERY = 5; // polls between reads of the evidence log
const $ = (id) => document.getElementById(id);

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let timer = null;
let polls = 0;
let clockOffsetMs = 0; // server time − browser time, from /v1/budgets
let lastGood = null;

// ---------------------------------------------------------------- small DOM helpers (text only)

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.appendChild(cell);
    else td.textContent = cell === undefined || cell === null ? "" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}

function fill(tableId, rows, emptyId) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
  $(tableId).hidden = rows.length === 0;
  if (emptyId) $(emptyId).hidden = rows.length !== 0;
}

function shellQuote(s) {
  return /^[A-Za-z0-9_:./@%+=,-]+$/.test(s) ? s : "'" + String(s).replace(/'/g, "'\\''") + "'";
}

function age(ts) {
  const then = Date.parse(ts);
  if (!ts || Number.isNaN(then)) return "?";
  let s = Math.max(0, Math.round((Date.now() + clockOffsetMs - then) / 1000));
  if (s < 90) return s + " s";
  let m = Math.round(s / 60);
  if (m < 90) return m + " min";
  const h = Math.floor(m / 60);
  m = m % 60;
  if (h < 48) return h + " h " + m + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}

function levelNode(level) {
  return el("span", "level level-" + level, level);
}

// ---------------------------------------------------------------- talking to the gateway

async function api(path, options) {
  const headers = Object.assign({ Authorization: "Bearer " + token }, (options && options.headers) || {});
  const response = await fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const code = body && body.error ? body.error.code : "http_" + response.status;
    const message = body && body.error ? body.error.message : response.statusText;
    const error = new Error(code + ": " + message);
    error.status = response.status;
    throw error;
  }
  return body;
}

function setConnection(kind, text) {
  const conn = $("conn");
  conn.className = "conn conn-" + kind;
  conn.textContent = text;
  document.querySelector("main").classList.toggle("stale", kind === "down");
}

async function poll() {
  timer = null;
  if (!token) {
    setConnection("idle", "no token");
    return;
  }
  try {
    const wantDrills = polls % DRILLS_EVERY === 0;
    const [status, budgets, drills] = await Promise.all([
      api("/v1/status"),
      api("/v1/budgets"),
      wantDrills ? api("/v1/drills?limit=5") : Promise.resolve(null),
    ]);
    clockOffsetMs = typeof budgets.now_ms === "number" ? budgets.now_ms - Date.now() : 0;
    renderStatus(status);
    renderAgents(budgets);
    if (drills) renderDrills(drills);
    polls += 1;
    lastGood = new Date();
    setConnection("live", "live · " + lastGood.toLocaleTimeString());
  } catch (error) {
    const since = lastGood ? " · data below is from " + lastGood.toLocaleTimeString() : "";
    if (error.status === 401) {
      setConnection("down", "token refused (" + error.message + ")" + since);
    } else {
      setConnection("down", "NOT CONNECTED: " + error.message + since);
    }
  }
  timer = setTimeout(poll, POLL_MS);
}

function restartPolling() {
  if (timer) clearTimeout(timer);
  polls = 0;
  poll();
}

// ---------------------------------------------------------------- rendering

const PHASES = {
  RUNNING: "No latch is active: calls are admitted by each subject's own mode.",
  DRAINING: "A machine stop is draining: only operations durably prepared before it may still dispatch, until the deadline.",
  RECOVERY_PENDING: "A machine recovery is in progress: every gate stays closed until it completes.",
  KILLING: "A stop is active and not yet confirmed everywhere: a covered worker is not observed quiescent, a census failed, or a live gateway has not acknowledged the latch.",
  RECONCILING: "Contained and quiescent, but unresolved operations remain (or a registry is unreadable): the owner must reconcile them.",
  FROZEN_SAFE: "Contained: every covered worker quiescent, every gateway covered, nothing unresolved.",
};

function renderStatus(s) {
  const phase = String(s.phase || "unknown");
  $("phase").textContent = phase;
  $("phase").dataset.phase = phase;
  $("phase").className = "phase phase-" + (PHASES[phase] ? phase : "unknown");
  $("phase-detail").textContent = (PHASES[phase] || "") + " Machine state (state.json): " + (s.state || "?") + ".";
  document.title = phase + " · stopline";

  const latches = Array.isArray(s.latches) ? s.latches : [];
  $("latch-count").textContent = latches.length ? "(" + latches.length + ")" : "";
  fill(
    "latches",
    latches.map((l) => {
      const tr = row([
        el("span", "mono", l.scope),
        levelNode(l.level),
        l.by || "?",
        l.reason || l.problem || "",
        age(l.ts),
        el("span", "mono", l.file),
      ]);
      tr.children[3].className = "reason";
      tr.dataset.scope = l.scope || "";
      tr.dataset.level = l.level || "";
      return tr;
    }),
    "latches-empty",
  );
  const faults = Array.isArray(s.faults) ? s.faults : [];
  $("faults").replaceChildren(
    ...faults.map((f) => el("li", "", "fault (closes every gate): " + (f.code || "?") + ": " + (f.message || ""))),
  );

  renderRecovery(latches);

  const epoch = s.epoch || {};
  $("epoch-seq").textContent = epoch.seq === undefined ? "?" : String(epoch.seq);
  const scopes = Object.entries(epoch.scopes || {}).sort((a, b) => b[1] - a[1]);
  fill("epochs", scopes.map(([scope, rev]) => row([el("span", "mono", scope), rev])));

  const gw = s.gateway || {};
  $("gateway-self").textContent =
    "This gateway: " + (gw.id || "?") + ", view generation " + (gw.view_generation ?? "?") +
    ", view age " + (gw.view_age_ms ?? "?") + " ms" + (gw.view_degraded ? " (DEGRADED: periodic reload only)" : "") + ".";
  const uncovered = Array.isArray(s.uncovered_servers) ? s.uncovered_servers : [];
  $("gateway-uncovered").textContent = uncovered.length
    ? "Uncovered gateways (not acknowledging): " + uncovered.map((u) => (typeof u === "string" ? u : u.id || JSON.stringify(u))).join(", ")
    : "Every live gateway acknowledges the active latches.";
  $("gateway-uncovered").className = uncovered.length ? "error" : "";

  const workers = Array.isArray(s.workers) ? s.workers : [];
  fill(
    "workers",
    workers.map((w) =>
      row([
        w.agent,
        el("span", "mono", w.run),
        w.state,
        w.covered ? "yes" : "no",
        (w.method || "?") + (w.unconfined ? ", UNCONFINED" : w.user ? ", as " + w.user : "") + (w.net ? ", net " + w.net : ""),
        w.pid,
        w.kill_issued_at || "",
        w.quiescent_observed_at || "",
      ]),
    ),
    "workers-empty",
  );
  const confirmed = s.affected_worker_quiescence_confirmed === true;
  $("quiescence").textContent = confirmed ? "quiescence confirmed" : "quiescence NOT confirmed";
  $("quiescence").className = "badge " + (confirmed ? "good" : "bad");

  const unresolved = s.unresolved || {};
  const ops = [];
  for (const kind of ["file", "destination", "model"]) {
    for (const op of unresolved[kind] || []) {
      const prepared = typeof op.prepared_ms === "number" ? age(new Date(op.prepared_ms).toISOString()) + " ago" : "?";
      const blocks = op.in_flight ? "nobody yet (in flight)" : op.blocks === "nobody" ? "nobody" : op.blocks === "everyone" ? "every agent" : String(op.blocks || "").replace(/^agent:/, "") + " and its sub-agents";
      ops.push(row([kind, el("span", "mono", op.op || ""), el("span", "mono", op.target || ""), op.agent || "", el("span", op.blocking ? "bad" : "", blocks), prepared]));
    }
  }
  $("unresolved-count").textContent = ops.length ? "(" + ops.length + ")" : "";
  fill("unresolved", ops, "unresolved-empty");
  $("registry-errors").replaceChildren(
    ...(unresolved.errors || []).map((e) => el("li", "", "registry error: " + (typeof e === "string" ? e : JSON.stringify(e)))),
  );
}

function renderRecovery(latches) {
  const box = $("recovery-commands");
  if (!latches.length) {
    box.replaceChildren(el("p", "hint", "Nothing to recover: no latch is active."));
    return;
  }
  const scopes = [...new Set(latches.map((l) => l.scope))];
  const nodes = [];
  for (const scope of scopes) {
    const levels = latches.filter((l) => l.scope === scope).map((l) => l.level);
    const lines = [
      "stopline recover plan --scope " + shellQuote(scope) + ' --reason "<why it is safe to resume>" --by operator',
      "stopline recover apply --plan <plan id printed by the line above> --by operator",
    ];
    if (!levels.includes("emergency")) {
      lines.push("# a halt can instead be lifted by an operator or monitor:");
      lines.push("stopline disengage --scope " + shellQuote(scope) + ' --reason "<why>" --by operator');
    }
    const pre = el("pre", "", lines.join("\n"));
    pre.dataset.scope = scope;
    nodes.push(pre);
  }
  box.replaceChildren(...nodes);
}

function bar(kind, use) {
  const line = el("div", "bar-row");
  line.appendChild(el("span", "mono", kind));
  const track = el("div", "bar");
  const limit = Number(use.limit) || 0;
  const usedFrac = limit > 0 ? Math.min(1, use.used / limit) : 1;
  const reservedFrac = limit > 0 ? Math.min(1 - usedFrac, use.reserved / limit) : 0;
  const used = el("div", "used");
  used.style.width = (usedFrac * 100).toFixed(1) + "%";
  const reserved = el("div", "reserved");
  reserved.style.left = (usedFrac * 100).toFixed(1) + "%";
  reserved.style.width = (reservedFrac * 100).toFixed(1) + "%";
  track.append(used, reserved);
  if (usedFrac >= 1) track.classList.add("full");
  else if (usedFrac >= 0.8) track.classList.add("warn");
  line.appendChild(track);
  const fmt = (n) => (Number.isInteger(n) ? String(n) : Number(n).toFixed(kind === "spend_usd" ? 4 : 1));
  line.appendChild(el("span", "mono", fmt(use.used) + " / " + fmt(limit) + (use.reserved > 0 ? " (+" + fmt(use.reserved) + " reserved)" : "")));
  return line;
}

function renderAgents(b) {
  const thresholds = b.thresholds || {};
  $("agents-note").textContent =
    "As seen by this gateway since it started (its ledger is in memory). Breakers trip an agent latch at " +
    (thresholds.trip_level || "?") + ": unauthorized calls ≥ " + thresholds.unauthorized_calls +
    ", refused egress ≥ " + thresholds.refused_egress + ", anomaly score ≥ " + thresholds.anomaly_score + ".";
  const agents = Array.isArray(b.agents) ? b.agents : [];
  const known = $("known-scopes");
  const options = ["machine", ...agents.map((a) => "agent:" + a.agent)];
  known.replaceChildren(...options.map((v) => Object.assign(document.createElement("option"), { value: v })));
  const nodes = agents.map((a) => {
    const box = el("div", "agent");
    box.dataset.agent = a.agent;
    box.appendChild(el("h3", "", a.agent));
    for (const account of a.accounts || []) {
      const who = account.chain && account.chain.length > 1 ? " (delegated: " + account.chain.join(" → ") + ")" : "";
      box.appendChild(el("div", "hint", "token " + account.token + "…" + who));
      for (const [kind, use] of Object.entries(account.budgets || {})) box.appendChild(bar(kind, use));
    }
    const br = a.breaker;
    const line = el("div", "breaker");
    if (br) {
      line.appendChild(el("span", "", "unauthorized calls " + br.unauthorized_calls + "/" + thresholds.unauthorized_calls));
      line.appendChild(el("span", "", "refused egress " + br.refused_egress + "/" + thresholds.refused_egress));
      line.appendChild(el("span", "", "anomaly " + (br.last_anomaly_score ?? "–") + " (trips ≥ " + thresholds.anomaly_score + ")"));
      line.appendChild(el("span", "badge " + (br.tripped ? "bad" : "good"), br.tripped ? "TRIPPED " + (br.latch || "(engaging)") : "breaker closed"));
    } else {
      line.appendChild(el("span", "badge good", "breaker closed, nothing counted"));
    }
    box.appendChild(line);
    return box;
  });
  $("agents").replaceChildren(...nodes);
  $("agents-empty").hidden = nodes.length !== 0;
  fill("adapters", (b.adapters || []).map((a) => row([el("span", "mono", a.upstream), a.state])));
}

function renderDrills(d) {
  const drills = Array.isArray(d.drills) ? d.drills : [];
  const ms = (v) => (typeof v === "number" ? (Number.isInteger(v) ? v : v.toFixed(1)) + " ms" : "?");
  fill(
    "drills",
    drills.map((x) => {
      const t = x.time_to_first_rejection_ms || {};
      const after = [x.tool_calls_after_trip, x.writes_after_trip, x.model_calls_after_trip];
      const pass = x.pass === true;
      return row([
        x.pulled_at || x.ts || "?",
        x.harness_version || "?",
        (x.scope || "?") + " / " + (x.level || "?"),
        (x.agents ?? "?") + " × " + (x.subagents ?? 0),
        ms(t.p50) + " / " + ms(t.p99) + " / " + ms(t.max) + (x.target_ms ? " (target " + x.target_ms + " ms)" : ""),
        after.map((n) => (n === undefined ? "?" : n)).join(" / ") + " (tool/write/model)",
        x.in_flight_at_trip ?? "?",
        el("span", "badge " + (pass ? "good" : "bad"), pass ? "pass" : "FAIL"),
      ]);
    }),
    "drills-empty",
  );
  $("drills-error").hidden = !d.error;
  $("drills-error").textContent = d.error ? "The evidence log cannot be read: " + d.error : "";
}

// ---------------------------------------------------------------- forms

$("token").value = token;
$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  restartPolling();
});
$("token-forget").addEventListener("click", () => {
  token = "";
  $("token").value = "";
  sessionStorage.removeItem(TOKEN_KEY);
  if (timer) clearTimeout(timer);
  setConnection("idle", "no token");
});

$("stop-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const receipt = $("stop-receipt");
  receipt.hidden = false;
  receipt.className = "receipt";
  if (!token) {
    receipt.textContent = "Enter a token first: the gateway only accepts a stop from a token it signed.";
    return;
  }
  const body = {
    scope: $("stop-scope").value.trim(),
    level: $("stop-level").value,
    reason: $("stop-reason").value,
  };
  $("stop-button").disabled = true;
  receipt.textContent = "engaging…";
  try {
    const r = await api("/v1/engage", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const latch = r.latch || {};
    const lines = [
      "ENGAGED " + (latch.scope || body.scope) + " at " + (latch.level || body.level) + " (" + (latch.file || "?") + ")" +
        (r.coalesced ? ", coalesced into the existing latch" : ""),
      "acknowledged by: " + ((r.acknowledged_by || []).join(", ") || "none"),
    ];
    if ((r.unacknowledged || []).length) lines.push("NOT acknowledged by: " + r.unacknowledged.join(", "));
    for (const w of r.warnings || []) lines.push("warning: " + w);
    receipt.className = "receipt ok";
    receipt.replaceChildren(...lines.map((l) => el("div", "", l)));
    receipt.dataset.latch = latch.file || "";
  } catch (error) {
    receipt.textContent =
      "The gateway did not confirm the stop (" + error.message + "). It may or may not be engaged: " +
      "check the latches, or stop from a terminal: stopline engage --scope " + shellQuote(body.scope) +
      " --level " + body.level + ' --reason "…"';
  } finally {
    $("stop-button").disabled = false;
    restartPolling();
  }
});

if (token) poll();
