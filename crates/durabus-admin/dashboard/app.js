// The durabus dashboard: a small single-page app over the admin API. Everything it shows is
// put on the page as text (textContent, never innerHTML), so a payload or an error message can
// never become markup. The page's Content-Security-Policy forbids inline scripts as well.
'use strict';

const TOKEN_KEY = 'durabus.token';
const REFRESH_MS = 5000;
const state = {
  token: sessionStorage.getItem(TOKEN_KEY), role: null, name: null, timer: null,
  // Bumped by every route change: an answer that arrives for an earlier view is dropped, so a
  // slow read of the page left behind never paints over the page shown now.
  generation: 0,
  // Dead letters selected in the table: refreshing pauses while there are any.
  selected: new Set(),
};

// ---- small DOM helpers ------------------------------------------------------------------

/** Makes an element; `children` may be strings (set as text) or nodes. */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

/** Replaces `target`'s children (arrays flattened; null, undefined and false left out). */
function fill(target, ...children) {
  target.replaceChildren(...children.flat(Infinity)
    .filter((c) => c !== undefined && c !== null && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
}

function svg(tag, attrs) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

const $ = (sel) => document.querySelector(sel);
const view = () => $('#view');
const isAdmin = () => state.role === 'admin';

function badge(status) {
  return el('span', { class: `status ${status}`, text: status });
}

const UTC_KEY = 'durabus.utc';

/** A time as the reader chose: the browser's zone (named), or UTC as the CLI prints it. */
function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  const utc = localStorage.getItem(UTC_KEY) === '1';
  return d.toLocaleString(undefined, {
    year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit',
    second: '2-digit', hour12: false, timeZone: utc ? 'UTC' : undefined, timeZoneName: 'short',
  });
}

/** Free text that may be long (an error): at most four lines in its cell, all of it on hover. */
function clip(text) {
  return el('div', { class: 'clip', title: text }, text);
}

/** A count with the reader's thousands separators. */
function num(n) {
  return typeof n === 'number' ? n.toLocaleString() : String(n);
}

function age(seconds) {
  if (!seconds) return '—';
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

function pretty(value) {
  try { return JSON.stringify(value, null, 2); } catch (_) { return String(value); }
}

/** Shows `message` (an error, or with kind `info` a notice), or hides the banner. A notice
 * stays for a few seconds through the redraws that follow the action it reports. */
function banner(message, kind) {
  const b = $('#banner');
  if (!message) { b.hidden = true; state.noticeUntil = 0; return; }
  b.textContent = message;
  b.className = kind || '';
  b.hidden = false;
  state.noticeUntil = kind === 'info' ? Date.now() + 6000 : 0;
}

/** Hides an error; a fresh notice stays. */
function clearError() {
  if (Date.now() < (state.noticeUntil || 0)) return;
  banner('');
}

function table(headers, rows, empty) {
  const body = el('tbody');
  for (const r of rows) body.append(r);
  if (!rows.length) {
    body.append(el('tr', {}, el('td', { colspan: headers.length, class: 'muted', text: empty || 'Nothing here.' })));
  }
  return el('table', {}, el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))), body);
}

// ---- the API ----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 401) {
    signOut('The token was refused: sign in again.');
    throw new ApiError(401, 'unauthorized', 'unauthorized');
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!res.ok) {
    const err = data && data.error ? data.error : { code: 'http_' + res.status, message: text };
    throw new ApiError(res.status, err.code, err.message);
  }
  return data;
}

const get = (path) => api('GET', path);
const post = (path, body) => api('POST', path, body === undefined ? {} : body);
const del = (path) => api('DELETE', path);

/** Runs an action, showing its error in the banner; returns its result or undefined. */
async function attempt(fn) {
  const generation = state.generation;
  try {
    const out = await fn();
    if (generation !== state.generation) return undefined;
    clearError();
    return out;
  } catch (e) {
    if (generation !== state.generation) return undefined;
    if (e instanceof TypeError) {
      banner(`The server is unreachable (${e.message}); the page retries every ${REFRESH_MS / 1000} s.`);
    } else if (e.status !== 401) {
      banner(e.message || String(e));
    }
    return undefined;
  }
}

// ---- auth -------------------------------------------------------------------------------

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.role = null;
  state.generation++;
  stopRefresh();
  $('#nav').hidden = true;
  $('#logout').hidden = true;
  $('#tz').hidden = true;
  $('#who').textContent = '';
  fill(view());
  $('#login').hidden = false;
  const err = $('#login-error');
  err.textContent = message || '';
  err.hidden = !message;
  $('#token').value = '';
  $('#token').focus();
}

async function signIn(token) {
  state.token = token;
  try {
    const me = await get('/api/v2/whoami');
    state.role = me.role;
    state.name = me.name;
  } catch (e) {
    if (e.status !== 401) signOut(e.message || 'The server did not answer.');
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $('#login').hidden = true;
  $('#login-error').hidden = true;
  $('#nav').hidden = false;
  $('#logout').hidden = false;
  $('#tz').hidden = false;
  $('#who').textContent = `${state.name} (${state.role === 'admin' ? 'admin' : 'read-only'})`;
  route();
}

// ---- routing ----------------------------------------------------------------------------

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || '') };
}

function go(path, params) {
  const q = params ? new URLSearchParams([...params].filter(([, v]) => v !== '' && v != null)).toString() : '';
  location.hash = '#/' + path + (q ? '?' + q : '');
}

function stopRefresh() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

/** Refreshes `render` every few seconds while `paused()` says no. */
function refreshing(render, paused) {
  stopRefresh();
  state.timer = setInterval(() => {
    if (document.hidden || (paused && paused())) return;
    render(true);
  }, REFRESH_MS);
}

async function route() {
  if (!state.token) return;
  state.generation++;
  stopRefresh();
  clearError();
  state.selected.clear();
  bulkInProgress = false;
  const { parts, params } = parseHash();
  const name = parts[0] || 'overview';
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.view === name);
  }
  const views = {
    overview: () => overview(),
    'dead-letters': () => (parts[1] ? deadLetter(parts[1]) : deadLetters(params)),
    groups: () => groups(),
    events: () => (parts[1] ? eventDetail(parts[1]) : events(params)),
    replay: () => replay(),
    operations: () => operations(),
    pauses: () => pauses(),
    metrics: () => metrics(),
  };
  await (views[name] || views.overview)();
}

// ---- overview ---------------------------------------------------------------------------

function card(label, value, id) {
  return el('div', { class: 'card', 'data-card': id }, el('div', { class: 'label', text: label }), el('div', { class: 'value', text: value }));
}

function chart(minutes, now) {
  const width = 1240;
  const height = 180;
  const pad = 28;
  const end = Math.floor(new Date(now).getTime() / 60000);
  const done = new Array(60).fill(0);
  const dead = new Array(60).fill(0);
  for (const m of minutes) {
    const i = 59 - (end - Math.floor(new Date(m.minute).getTime() / 60000));
    if (i >= 0 && i < 60) { done[i] = m.done; dead[i] = m.dead; }
  }
  const max = Math.max(1, ...done.map((d, i) => d + dead[i]));
  const s = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'Events finished per minute, last hour' });
  const bw = (width - pad) / 60;
  for (let i = 0; i < 60; i++) {
    const x = pad + i * bw;
    const hDone = ((height - 20) * done[i]) / max;
    const hDead = ((height - 20) * dead[i]) / max;
    if (done[i]) s.append(svg('rect', { x, y: height - 14 - hDone - hDead, width: Math.max(1, bw - 1), height: hDone, fill: '#1e7f4f' }));
    if (dead[i]) s.append(svg('rect', { x, y: height - 14 - hDead, width: Math.max(1, bw - 1), height: hDead, fill: '#b42318' }));
  }
  s.append(svg('line', { x1: pad, y1: height - 14, x2: width, y2: height - 14, stroke: '#c9ced8' }));
  const top = svg('text', { x: 0, y: 12, 'font-size': 11, fill: '#667085' });
  top.textContent = String(max);
  const left = svg('text', { x: pad, y: height - 2, 'font-size': 11, fill: '#667085' });
  left.textContent = '-60 min';
  const right = svg('text', { x: width - 30, y: height - 2, 'font-size': 11, fill: '#667085' });
  right.textContent = 'now';
  s.append(top, left, right);
  const totalDone = done.reduce((a, b) => a + b, 0);
  const totalDead = dead.reduce((a, b) => a + b, 0);
  const rate = totalDone + totalDead ? ((100 * totalDead) / (totalDone + totalDead)).toFixed(1) : '0.0';
  return el('div', { class: 'chart' }, s,
    el('div', { class: 'legend' },
      el('span', { class: 'done', text: `■ delivered ${totalDone}` }), '  ',
      el('span', { class: 'dead', text: `■ dead-lettered ${totalDead}` }), '  ',
      `failure rate ${rate} % (events per minute, last hour)`));
}

async function overview(quiet) {
  // Gauges only, read by indexed queries and cached by the server: no count of the history on
  // every refresh (`durabus stats` and /api/v2/stats count everything, for when it is needed).
  const data = await attempt(() => Promise.all([
    get('/api/v2/overview'), get('/api/v2/subscriptions'), get('/api/v2/jobs'),
  ]));
  if (!data) return;
  const [o, subs, jobs] = data;
  // This process's breaker if the handler runs here; else each worker process's, as reported.
  const reported = (x) => (x.breakers || []).map((b) => el('div', { class: 'reported', 'data-process': b.process },
    badge(b.state), ` ${b.process}`));
  const subRows = subs.map((x) => el('tr', {},
    el('td', {}, x.name || x.id), el('td', {}, x.event_type),
    el('td', {}, x.breaker ? badge(x.breaker.state)
      : ((x.breakers || []).length ? reported(x) : el('span', { class: 'muted', text: x.in_this_process ? 'closed' : 'in the worker process' }))),
    el('td', {}, x.breaker ? `${(x.breaker.failure_rate * 100).toFixed(0)} % of ${x.breaker.samples}`
      : ((x.breakers || []).length ? x.breakers.map((b) => el('div', { text: `${(b.failure_rate * 100).toFixed(0)} % of ${b.samples}` })) : '—'))));
  const jobRows = jobs.map((j) => el('tr', {},
    el('td', {}, j.name), el('td', {}, j.schedule),
    el('td', {}, j.last && j.last.last_status ? badge(j.last.last_status) : '—'),
    el('td', { class: 'time' }, when(j.last && j.last.last_finished_at)), el('td', { class: 'time' }, j.enabled ? when(j.next_run) : 'disabled')));
  fill(view(),
    el('h1', { text: 'Overview' }),
    el('div', { class: 'cards' },
      card('Pending', num(o.pending), 'pending'), card('Processing', num(o.processing), 'processing'),
      card('Scheduled', num(o.scheduled || 0), 'scheduled'),
      card('Oldest due event', age(o.oldest_due_age_seconds), 'oldest-due'),
      card('Dead letters pending', num(o.dead_letters_pending), 'dl-pending'),
      card('Dead letters retrying', num(o.dead_letters_retrying), 'dl-retrying'),
      card('Oldest pending dead letter', age(o.oldest_pending_dead_letter_age_seconds), 'dl-oldest')),
    el('h2', { text: 'Throughput, last hour' }), chart(o.throughput, o.now),
    el('h2', { text: 'Subscriptions and circuit breakers' }),
    table(['Subscription', 'Pattern', 'Breaker', 'Failures'], subRows, 'No subscriptions stored.'),
    el('h2', { text: 'Scheduled jobs' }),
    table(['Job', 'Schedule', 'Last run', 'Finished', 'Next run'], jobRows),
    el('p', { class: 'muted' }, `Read at ${when(o.now)}; refreshes every ${REFRESH_MS / 1000} s. Prometheus metrics: `,
      el('a', { href: '#/metrics', text: 'the metrics page' }), '.'));
  if (!quiet) refreshing(overview);
}

// ---- dead letters -----------------------------------------------------------------------

const DL_FILTERS = ['status', 'event_type', 'group', 'from', 'to'];

function filterForm(params, fields, onSubmit) {
  const inputs = {};
  const form = el('form', { class: 'filters' });
  for (const f of fields) {
    let input;
    if (f.options) {
      input = el('select', { name: f.name }, el('option', { value: '', text: 'any' }), f.options.map((o) => el('option', { value: o, text: o })));
    } else {
      input = el('input', { name: f.name, type: f.type || 'text', placeholder: f.placeholder || '' });
    }
    const v = params.get(f.name) || '';
    input.value = f.type === 'datetime-local' && v ? toLocalInput(v) : v;
    inputs[f.name] = input;
    form.append(el('label', {}, f.label, input));
  }
  form.append(el('button', { type: 'submit', class: 'primary', text: 'Apply' }));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const out = new URLSearchParams();
    for (const f of fields) {
      let v = inputs[f.name].value.trim();
      if (v && f.type === 'datetime-local') v = new Date(v).toISOString();
      if (v) out.set(f.name, v);
    }
    onSubmit(out);
  });
  return form;
}

function toLocalInput(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** The dead-letter filter of `params` as the bulk API's filter body. */
function bulkFilter(params) {
  return {
    status: params.get('status') ? params.get('status').split(',') : [],
    event_type: params.get('event_type') || null,
    group: params.get('group') || null,
    from: params.get('from') || null,
    to: params.get('to') || null,
  };
}

async function deadLetters(params, quiet) {
  const q = new URLSearchParams();
  for (const k of [...DL_FILTERS, 'before']) if (params.get(k)) q.set(k, params.get(k));
  q.set('limit', '50');
  const load = () => attempt(() => get('/api/v2/dead-letters?' + q));
  const page = await load();
  if (!page) return;
  const selected = state.selected;
  const selectionBar = el('div', { class: 'actions' });
  const updateSelection = () => {
    fill(selectionBar);
    if (!isAdmin() || !selected.size) return;
    selectionBar.append(
      el('span', { text: `${selected.size} selected` }),
      el('button', { text: 'Retry selected', onclick: () => actOnMany([...selected], 'retry') }),
      el('button', { class: 'danger', text: 'Abandon selected', onclick: () => abandonMany([...selected]) }),
      el('button', { text: 'Clear selection', onclick: () => { selected.clear(); for (const c of document.querySelectorAll('input.pick')) c.checked = false; updateSelection(); } }));
  };
  const listing = (pg) => {
    const rows = pg.items.map((d) => el('tr', { 'data-id': d.event_id },
      isAdmin() ? el('td', {}, el('input', { type: 'checkbox', class: 'pick', 'aria-label': 'select', onchange: (ev) => { if (ev.target.checked) selected.add(d.event_id); else selected.delete(d.event_id); updateSelection(); } })) : null,
      el('td', { class: 'time' }, el('a', { href: `#/dead-letters/${encodeURIComponent(d.event_id)}`, text: when(d.created_at) })),
      el('td', {}, d.type), el('td', {}, d.subscription || '—'), el('td', {}, badge(d.status)),
      el('td', {}, String(d.rounds)), el('td', { class: 'err' }, clip(d.last_error)),
      isAdmin() ? el('td', {}, (d.actions || []).includes('retry') ? el('button', { text: 'Retry', class: 'retry', onclick: () => actOnMany([d.event_id], 'retry') }) : '') : null));
    const headers = [isAdmin() ? '' : null, 'Created', 'Type', 'Subscription', 'Status', 'Rounds', 'Last error', isAdmin() ? '' : null].filter((h) => h !== null);
    const pager = el('div', { class: 'pager' },
      params.get('before') ? el('button', { text: '« Newest', onclick: () => { params.delete('before'); go('dead-letters', params); } }) : null,
      pg.next != null ? el('button', { text: 'Older »', onclick: () => { params.set('before', pg.next); go('dead-letters', params); } }) : null);
    return [table(headers, rows, 'No dead letters match.'), pager];
  };
  const list = el('div', { class: 'listing' }, listing(page));
  // After a bulk action the list is read again in place (the operation's result stays shown).
  const reload = async () => {
    const pg = await load();
    if (pg) { selected.clear(); updateSelection(); fill(list, listing(pg)); }
  };
  fill(view(),
    el('h1', { text: 'Dead letters' }),
    filterForm(params, [
      { name: 'status', label: 'Status', options: ['pending', 'retrying', 'resolved', 'abandoned'] },
      { name: 'event_type', label: 'Type (glob)', placeholder: 'order.*' },
      { name: 'group', label: 'Group', placeholder: 'fingerprint' },
      { name: 'from', label: 'From', type: 'datetime-local' },
      { name: 'to', label: 'To', type: 'datetime-local' },
    ], (p) => go('dead-letters', p)),
    selectionBar,
    list,
    isAdmin() ? bulkPanel(params, reload) : null);
  if (!quiet) refreshing((q2) => deadLetters(parseHash().params, q2), () => selected.size > 0 || bulkBusy());
}

let bulkInProgress = false;
const bulkBusy = () => bulkInProgress;

async function actOnMany(ids, action, body) {
  let done = 0;
  for (const id of ids) {
    const ok = await attempt(() => post(`/api/v2/dead-letters/${encodeURIComponent(id)}/${action}`, body));
    if (ok === undefined) break;
    done++;
  }
  const failed = !$('#banner').hidden && $('#banner').className !== 'info';
  await route();
  if (!failed) banner(`${action === 'retry' ? 'Sent back for delivery' : 'Abandoned'}: ${num(done)} dead letter${done === 1 ? '' : 's'}.`, 'info');
}

/** Abandons the selected dead letters after a confirmation that takes a note. */
function abandonMany(ids) {
  const bar = $('.selection-confirm') || el('div', { class: 'panel selection-confirm' });
  const note = el('input', { name: 'abandon-note', placeholder: 'why (optional)' });
  fill(bar,
    el('p', { text: `Abandon ${num(ids.length)} dead letter${ids.length === 1 ? '' : 's'}? They get no more automatic retries.` }),
    el('div', { class: 'actions' }, note,
      el('button', { class: 'danger', text: `Confirm: abandon ${num(ids.length)}`, onclick: () => actOnMany(ids, 'abandon', { note: note.value.trim() || null }) }),
      el('button', { text: 'Cancel', onclick: () => bar.remove() })));
  if (!bar.isConnected) view().insertBefore(bar, view().querySelector('.listing'));
}

function bulkPanel(params, reload) {
  const action = el('select', { name: 'bulk-action' }, ['retry', 'resolve', 'abandon', 'purge'].map((a) => el('option', { value: a, text: a })));
  const note = el('input', { name: 'bulk-note', placeholder: 'note (required to resolve)' });
  const out = el('div', { class: 'bulk-result' });
  const filter = bulkFilter(params);
  const empty = !filter.status.length && !filter.event_type && !filter.group && !filter.from && !filter.to;
  // Changing the action or the note after a preview discards it: the confirmation can only run
  // what was previewed.
  const discard = () => { if (!bulkRunning) { bulkInProgress = false; fill(out); } };
  let bulkRunning = false;
  action.addEventListener('change', discard);
  note.addEventListener('input', discard);
  const preview = async () => {
    bulkInProgress = true;
    const frozen = { action: action.value, note: note.value.trim() || null, filter, all: empty };
    const p = await attempt(() => post('/api/v2/dead-letters/bulk/preview', { filter }));
    if (!p) { bulkInProgress = false; return; }
    const confirm = el('button', { class: 'primary', 'data-action': frozen.action, text: `Confirm: ${frozen.action} ${num(p.count)} dead letters`, onclick: async () => {
      confirm.disabled = true;
      bulkRunning = true;
      const op = await attempt(() => post('/api/v2/dead-letters/bulk', frozen));
      if (!op) { confirm.disabled = false; bulkRunning = false; return; }
      follow(op.id, out, () => {
        reload();
        out.append(el('button', { text: 'Close', onclick: () => { bulkInProgress = false; route(); } }));
      });
    } });
    fill(out,
      el('p', { class: 'preview-count', text: `${num(p.count)} dead letters match this filter${empty ? ' (every dead letter)' : ''}. Samples:` }),
      el('ul', {}, p.samples.map((d) => el('li', {}, `${d.type}: ${d.last_error}`))),
      el('div', { class: 'actions' }, confirm, el('button', { text: 'Cancel', onclick: () => { bulkInProgress = false; fill(out); } })));
  };
  return el('div', { class: 'panel' },
    el('h2', { text: 'Bulk action on everything matching this filter' }),
    el('div', { class: 'actions' }, action, note, el('button', { text: 'Preview', class: 'bulk-preview', onclick: preview })),
    out);
}

/** Follows an operation's progress in `out` until it ends. */
function follow(id, out, done, path) {
  const url = path || `/api/v2/operations/${encodeURIComponent(id)}`;
  const show = async () => {
    const data = await attempt(() => get(url));
    if (!data) return true;
    const op = data.operation || data;
    const bar = el('progress', { max: Math.max(op.total, 1), value: op.processed + op.skipped });
    const cancel = isAdmin() && (op.status === 'running' || op.status === 'pending')
      ? el('button', { class: 'danger', text: 'Cancel', onclick: () => attempt(() => post(path ? `${url}/cancel` : `/api/v2/operations/${encodeURIComponent(id)}/cancel`)) })
      : null;
    fill(out, el('div', { class: 'operation', 'data-status': op.status },
      el('p', {}, 'Operation ', el('code', { text: op.id }), ' ', badge(op.status)),
      bar, ` ${op.processed} processed, ${op.skipped} skipped, ${op.errors} errors of ${op.total}`,
      op.last_error ? el('p', { class: 'error', text: op.last_error }) : null, cancel));
    return ['completed', 'failed', 'cancelled'].includes(op.status);
  };
  const tick = async () => {
    if (await show()) { if (done) done(); return; }
    setTimeout(tick, 500);
  };
  tick();
}

async function deadLetter(id) {
  const d = await attempt(() => get(`/api/v2/dead-letters/${encodeURIComponent(id)}`));
  if (!d) return;
  const note = el('textarea', { name: 'note', placeholder: 'What was done (required to resolve)' });
  // Exactly the actions the record's status allows, as the API says (d.actions).
  const allowed = new Set(d.actions || []);
  const buttons = [
    allowed.has('retry') ? el('button', { class: 'primary', text: 'Retry', onclick: () => act('retry') }) : null,
    allowed.has('resolve') ? el('button', { text: 'Resolve', onclick: () => {
      if (!note.value.trim()) { banner('A note is required to resolve a dead letter.'); return; }
      act('resolve', { note: note.value.trim() });
    } }) : null,
    allowed.has('abandon') ? el('button', { class: 'danger', text: 'Abandon', onclick: () => act('abandon', { note: note.value.trim() || null }) }) : null,
  ].filter(Boolean);
  const actions = isAdmin() && buttons.length
    ? el('div', { class: 'panel' },
      el('h2', { text: 'Actions' }),
      d.status === 'retrying' ? el('p', { class: 'muted', text: 'Sent back for delivery: resolving or abandoning it now calls the retry off, unless a worker has already picked it up.' }) : null,
      allowed.has('resolve') || allowed.has('abandon') ? note : null,
      el('div', { class: 'actions' }, buttons))
    : null;
  const DONE_WORDS = { retry: 'sent back for delivery', resolve: 'resolved', abandon: 'abandoned' };
  async function act(action, body) {
    const r = await attempt(() => post(`/api/v2/dead-letters/${encodeURIComponent(id)}/${action}`, body));
    if (r) { await deadLetter(id); banner(`Dead letter ${DONE_WORDS[action]}.`, 'info'); }
  }
  const rounds = (d.error_history || []).map((r) => el('div', { class: 'round panel' },
    el('strong', { text: `Round ${r.round}` }), ` ended ${when(r.failed_at)}`, r.retried_by ? ` (sent back by ${r.retried_by})` : '',
    el('ol', {}, r.errors.map((e) => el('li', { text: e }))),
    r.causes && r.causes.length ? el('p', { class: 'muted', text: 'Caused by: ' + r.causes.join(' ← ') }) : null));
  fill(view(),
    el('p', {}, el('a', { href: '#/dead-letters', text: '← Dead letters' })),
    el('h1', {}, 'Dead letter ', el('code', { text: d.event_id }), ' ', badge(d.status)),
    el('dl', { class: 'fields' }, [
      ['Type', d.type], ['Subscription', d.subscription || '—'], ['Last error', d.last_error],
      ['Ordering key', d.ordering_key ? el('span', {}, el('a', { href: `#/events?ordering_key=${encodeURIComponent(d.ordering_key)}`, text: d.ordering_key }), ` (${d.key_waiting || 0} later event(s) of the key were waiting when it died)`) : '—'],
      ['Group', el('a', { href: `#/dead-letters?group=${encodeURIComponent(d.fingerprint)}`, text: d.fingerprint })],
      ['Attempts', d.attempts], ['Created', when(d.created_at)], ['Updated', when(d.updated_at)],
      ['Auto retries', `${d.auto_retry_count} (next ${when(d.next_auto_retry_at)})`],
      ['Manual retries', d.manual_retry_count], ['Last retry', d.last_retry_at ? `${when(d.last_retry_at)} by ${d.last_retry_by}` : '—'],
      [d.status === 'abandoned' ? 'Abandoned' : 'Resolved', d.resolved_at ? `${when(d.resolved_at)} by ${d.resolved_by}` : '—'], ['Note', d.resolution_note || '—'],
      ['Event', el('a', { href: `#/events/${encodeURIComponent(d.event_id)}`, text: 'history and payload snapshots' })],
    ].map(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)])),
    actions,
    el('h2', { text: 'Payload' }), el('pre', { class: 'payload', text: pretty(d.payload) }),
    el('h2', { text: 'Error history' }), rounds.length ? rounds : el('p', { class: 'muted', text: 'No rounds recorded.' }));
}

// ---- groups -----------------------------------------------------------------------------

/** A group's dead letters per hour over the last day, as bars, oldest first. */
function hourly(counts) {
  const list = counts || [];
  const max = Math.max(1, ...list);
  const total = list.reduce((a, b) => a + b, 0);
  const bars = list.map((n) => {
    const bar = el('span', { class: n ? 'bar' : 'bar zero', 'data-n': n });
    // Set through the CSSOM: the page's policy refuses inline style attributes.
    bar.style.height = `${n ? Math.max(2, Math.round((n / max) * 18)) : 1}px`;
    return bar;
  });
  return el('span', {
    class: 'spark', role: 'img', 'aria-label': `${total} dead letters in the last 24 hours`,
    title: `${total} in the last 24 hours; per hour, oldest first: ${list.join(' ')}`,
  }, bars);
}

async function groups(quiet) {
  const gs = await attempt(() => get('/api/v2/dead-letter-groups?limit=200'));
  if (!gs) return;
  const rows = gs.map((g) => el('tr', { 'data-group': g.fingerprint, class: g.new ? 'new' : null },
    el('td', { class: 'wide' },
      g.new ? el('span', { class: 'badge new', title: 'first seen less than a day ago', text: 'new' }) : null,
      el('a', { href: `#/dead-letters?group=${encodeURIComponent(g.fingerprint)}`, class: 'clip', title: g.signature || g.fingerprint, text: g.signature || g.fingerprint })),
    el('td', {}, num(g.count)), el('td', {}, num(g.open)), el('td', {}, hourly(g.hourly)),
    el('td', { class: 'types' }, (g.event_types || []).join(', ')),
    el('td', {}, g.subscription || '—'), el('td', { class: 'time' }, when(g.first_seen)), el('td', { class: 'time' }, when(g.last_seen)),
    el('td', { class: 'err' }, clip(g.sample_error))));
  fill(view(),
    el('h1', { text: 'Failure groups' }),
    el('p', { class: 'muted', text: 'Dead letters gathered by the shape of their failure (the error with ids, numbers and times taken out), with their dead letters per hour over the last day; a group first seen less than a day ago is marked new. Click a group for its dead letters.' }),
    table(['Group', 'Dead letters', 'Open', 'Last 24 h', 'Types', 'Subscription', 'First seen', 'Last seen', 'Sample error'], rows, 'No failure groups.'));
  if (!quiet) refreshing(groups);
}

// ---- events -----------------------------------------------------------------------------

async function events(params, quiet) {
  const q = new URLSearchParams();
  for (const k of ['status', 'event_type', 'ordering_key', 'from', 'to', 'offset']) if (params.get(k)) q.set(k, params.get(k));
  q.set('limit', '50');
  const page = await attempt(() => get('/api/v2/events?' + q));
  if (!page) return;
  const rows = page.items.map((e) => el('tr', {},
    el('td', { class: 'time' }, el('a', { href: `#/events/${encodeURIComponent(e.id)}`, text: when(e.created_at) })),
    el('td', {}, e.type), el('td', {}, badge(e.status)), el('td', {}, String(e.priority || 0)),
    el('td', {}, e.ordering_key ? el('a', { class: 'key', href: `#/events?ordering_key=${encodeURIComponent(e.ordering_key)}`, text: e.ordering_key }) : '—'),
    el('td', {}, String(e.retry_count)),
    el('td', { class: 'time' }, e.next_attempt_at ? when(e.next_attempt_at) : (e.ordering_key && (e.status === 'pending' || e.status === 'scheduled') ? 'after its key' : '—')),
    el('td', { class: 'time' }, when(e.updated_at))));
  const offset = Number(params.get('offset') || 0);
  fill(view(),
    el('h1', { text: 'Events' }),
    filterForm(params, [
      { name: 'status', label: 'Status', options: ['scheduled', 'pending', 'processing', 'done', 'dlq', 'cancelled'] },
      { name: 'event_type', label: 'Type', placeholder: 'order.created' },
      { name: 'ordering_key', label: 'Ordering key', placeholder: 'order-7' },
      { name: 'from', label: 'From', type: 'datetime-local' },
      { name: 'to', label: 'To', type: 'datetime-local' },
    ], (p) => go('events', p)),
    table(['Created', 'Type', 'Status', 'Priority', 'Ordering key', 'Retries', 'Due', 'Updated'], rows, 'No events match.'),
    el('div', { class: 'pager' },
      offset > 0 ? el('button', { text: '« Newer', onclick: () => { params.set('offset', Math.max(0, offset - 50)); go('events', params); } }) : null,
      page.next_offset != null ? el('button', { text: 'Older »', onclick: () => { params.set('offset', page.next_offset); go('events', params); } }) : null));
  if (!quiet) refreshing((q2) => events(parseHash().params, q2));
}

async function eventDetail(id) {
  const e = await attempt(() => get(`/api/v2/events/${encodeURIComponent(id)}`));
  if (!e) return;
  const snaps = (await attempt(() => get(`/api/v2/events/${encodeURIComponent(id)}/payloads`))) || [];
  const cancels = (await attempt(() => get(`/api/v2/events/${encodeURIComponent(id)}/cancellations`))) || [];
  // Cancel: an event not yet delivered, for every subscription or one; the reason is required.
  const open = ['scheduled', 'pending', 'processing'].includes(e.status) && !e.cancel_requested;
  const reason = el('input', { name: 'cancel-reason', placeholder: 'Why (required)' });
  const only = el('input', { name: 'cancel-subscription', placeholder: 'only this subscription (optional)' });
  const cancelPanel = isAdmin() && open && !(e.dlq_count > 0)
    ? el('div', { class: 'panel' },
      el('h2', { text: 'Cancel' }),
      el('p', { class: 'muted', text: e.status === 'processing'
        ? 'An attempt is running: it finishes, and no retry follows it.'
        : 'It will never be delivered (or, for one subscription, never to that one).' }),
      reason, only,
      el('div', { class: 'actions' }, el('button', { class: 'danger', text: 'Cancel event', onclick: async () => {
        if (!reason.value.trim()) { banner('A reason is required to cancel an event.'); return; }
        const body = { reason: reason.value.trim() };
        if (only.value.trim()) body.subscription = only.value.trim();
        const r = await attempt(() => post(`/api/v2/events/${encodeURIComponent(id)}/cancel`, body));
        if (r) { await eventDetail(id); banner(r.outcome === 'running' ? 'Cancelled: the running attempt finishes and no retry follows it.' : 'Event cancelled.', 'info'); }
      } })))
    : null;
  const cancelViews = cancels.map((c) => el('li', { text: `${when(c.cancelled_at)} by ${c.actor}${c.subscription ? ` for ${c.subscription}` : ''}: ${c.reason}${c.outcome === 'running' ? ' (while an attempt ran: no retry)' : ''}` }));
  const snapViews = snaps.map((s) => el('div', { class: 'panel snapshot' },
    el('strong', { text: s.stage }), ` ${when(s.created_at)} — ${s.size_original} bytes (${s.size_compressed} compressed)`,
    s.contains_media ? ' · media' : '', s.contains_base64 ? ' · base64' : '',
    s.deleted ? el('p', { class: 'muted', text: `Deleted ${when(s.deleted.deleted_at)} by ${s.deleted.deleted_by}: ${s.deleted.reason}` }) : el('pre', { text: pretty(s.payload) })));
  fill(view(),
    el('p', {}, el('a', { href: '#/events', text: '← Events' })),
    el('h1', {}, 'Event ', el('code', { text: e.id }), ' ', badge(e.status)),
    el('dl', { class: 'fields' }, [
      ['Type', e.type], ['Created', when(e.created_at)], ['Updated', when(e.updated_at)],
      ['Scheduled for', when(e.deliver_at)], ['Priority', e.priority || 0],
      ['Ordering key', e.ordering_key ? el('a', { href: `#/events?ordering_key=${encodeURIComponent(e.ordering_key)}`, text: e.ordering_key }) : '—'],
      ['Retries', e.retry_count], ['Next attempt', nextAttempt(e.next_attempt_at)], ['Delivered to', (e.delivered || []).join(', ') || '—'],
      ['Times dead-lettered', e.dlq_count], ['Cancelled for', (e.cancelled || []).join(', ') || '—'], ['Metadata', pretty(e.metadata)],
    ].map(([k, v]) => [el('dt', { text: k }), el('dd', {}, String(v))])),
    cancelPanel,
    cancelViews.length ? [el('h2', { text: 'Cancellations' }), el('ul', { class: 'cancellations' }, cancelViews)] : null,
    el('h2', { text: 'Payload' }), el('pre', { class: 'payload', text: pretty(e.payload) }),
    (e.errors || []).length ? [el('h2', { text: 'Errors' }), el('ol', {}, e.errors.map((x) => el('li', { text: x })))] : null,
    el('h2', { text: 'Payload snapshots by stage' }), snapViews.length ? snapViews : el('p', { class: 'muted', text: 'No snapshots stored for this event.' }));
}

// ---- replay -----------------------------------------------------------------------------

function replay() {
  const from = el('input', { type: 'datetime-local', name: 'from' });
  const to = el('input', { type: 'datetime-local', name: 'to' });
  const types = el('input', { name: 'types', placeholder: 'order.*, user.created' });
  const rate = el('input', { name: 'rate', type: 'number', min: 1, placeholder: '2000' });
  const statuses = ['pending', 'processing', 'done', 'dlq'].map((s) => el('label', {}, s, el('input', { type: 'checkbox', value: s, class: 'replay-status' })));
  // Without a start time a replay covers every stored event: that takes an explicit choice.
  const everything = el('input', { type: 'checkbox', name: 'all', class: 'replay-all' });
  const out = el('div', { class: 'replay-result' });
  const body = (mode) => {
    const b = { mode };
    // A preview or a dry run changes nothing: without a start time it looks at everything.
    if (from.value) b.from = new Date(from.value).toISOString(); else if (mode !== 'run' || everything.checked) b.all = true;
    if (to.value) b.to = new Date(to.value).toISOString();
    b.types = types.value.split(',').map((t) => t.trim()).filter(Boolean);
    b.statuses = [...document.querySelectorAll('.replay-status:checked')].map((c) => c.value);
    if (rate.value) b.rate_limit = Number(rate.value);
    return b;
  };
  const check = async (mode) => {
    const r = await attempt(() => post('/api/v2/replay', body(mode)));
    if (!r) return;
    const p = r.preview || r.dry_run;
    fill(out, el('div', { class: 'panel' },
      el('p', { class: 'replay-count', text: `${mode === 'preview' ? 'Preview' : 'Dry run'}: ${num(p.count)} events` + (r.dry_run ? ` would be replayed (${num(r.dry_run.skipped)} skipped, ${r.dry_run.duration_ms} ms)` : ' selected') }),
      el('ul', {}, Object.entries(p.by_type).map(([t, n]) => el('li', { text: `${t}: ${num(n)}` }))),
      el('h2', { text: 'First events' }),
      el('ul', {}, (p.samples || []).map((s) => el('li', { text: `${s.type} ${s.id || s.event_id || ''}` })))));
  };
  // Running asks first: the preview's count, then a confirmation that runs exactly what was
  // previewed (changing the form discards it).
  const run = async () => {
    if (!from.value && !everything.checked) {
      banner('Give a start time (From), or tick "every stored event" to replay the whole history.');
      return;
    }
    const frozen = body('run');
    const r = await attempt(() => post('/api/v2/replay', { ...frozen, mode: 'preview' }));
    if (!r) return;
    const n = r.preview.count;
    const rateText = frozen.rate_limit ? `${num(frozen.rate_limit)} events/s` : 'the server\'s default rate (2,000 events/s)';
    const confirm = el('button', { class: 'primary replay-confirm', text: `Confirm: replay ${num(n)} events`, onclick: async () => {
      confirm.disabled = true;
      const op = await attempt(() => post('/api/v2/replay', frozen));
      if (op) follow(op.id, out, null, `/api/v2/replay/${encodeURIComponent(op.id)}`);
      else confirm.disabled = false;
    } });
    fill(out, el('div', { class: 'panel replay-confirmation' },
      el('p', { class: 'replay-count', text: `Replay ${num(n)} events${frozen.all ? ' (every stored event)' : ''} at ${rateText}? Each is published again as a new event to today's subscribers.` }),
      el('div', { class: 'actions' }, confirm, el('button', { text: 'Cancel', onclick: () => fill(out) }))));
  };
  fill(view(),
    el('h1', { text: 'Replay' }),
    el('p', { class: 'muted', text: 'Republish stored events as new events (new ids, linked to the original) to today\'s subscribers. Preview and dry run change nothing.' }),
    el('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
      el('label', {}, 'From', from), el('label', {}, 'To', to),
      el('label', { class: 'inline' }, 'every stored event (no start time)', everything),
      el('label', {}, 'Types', types), el('label', {}, 'Events per second', rate), statuses),
    el('div', { class: 'actions' },
      el('button', { text: 'Preview', class: 'replay-preview', onclick: () => check('preview') }),
      el('button', { text: 'Dry run', class: 'replay-dry', onclick: () => check('dry_run') }),
      isAdmin() ? el('button', { class: 'primary replay-run', text: 'Run replay', onclick: run }) : null),
    out);
  for (const input of [from, to, types, rate, everything, ...document.querySelectorAll('.replay-status')]) {
    input.addEventListener('input', () => { if (out.querySelector('.replay-confirmation')) fill(out); });
  }
}

// ---- metrics ----------------------------------------------------------------------------

async function metrics() {
  const res = await attempt(async () => {
    const r = await fetch('/metrics', { headers: { Authorization: `Bearer ${state.token}` } });
    if (!r.ok) throw new ApiError(r.status, 'http_' + r.status, `/metrics answered ${r.status}`);
    return r.text();
  });
  if (res === undefined) return;
  fill(view(),
    el('h1', { text: 'Metrics' }),
    el('p', { class: 'muted', text: 'What Prometheus scrapes at /metrics (this server\'s own counters and the store\'s gauges; the workers serve their delivery counters themselves).' }),
    el('pre', { class: 'metrics', text: res }));
}

// ---- operations and jobs ----------------------------------------------------------------

async function operations(quiet) {
  const data = await attempt(() => Promise.all([get('/api/v2/operations?limit=50'), get('/api/v2/jobs'), get('/api/v2/periodic')]));
  if (!data) return;
  const [ops, jobs, periodic] = data;
  const opRows = ops.map((o) => el('tr', { 'data-op': o.id },
    el('td', {}, el('code', { text: o.id })), el('td', {}, o.kind), el('td', {}, badge(o.status)),
    el('td', {}, el('progress', { max: Math.max(o.total, 1), value: o.processed + o.skipped }), ` ${o.processed + o.skipped}/${o.total}`),
    el('td', {}, o.actor ? o.actor.name : '—'), el('td', { class: 'time' }, when(o.created_at)),
    el('td', {}, isAdmin() && (o.status === 'running' || o.status === 'pending')
      ? el('button', { class: 'danger', text: 'Cancel', onclick: async () => { await attempt(() => post(`/api/v2/operations/${encodeURIComponent(o.id)}/cancel`)); operations(true); } })
      : '')));
  const jobRows = jobs.map((j) => el('tr', {},
    el('td', {}, j.name), el('td', {}, j.schedule), el('td', {}, j.enabled ? 'yes' : 'no'),
    el('td', {}, j.last && j.last.last_status ? badge(j.last.last_status) : '—'),
    el('td', { class: 'err' }, clip((j.last && j.last.last_message) || '')), el('td', { class: 'time' }, when(j.next_run)),
    el('td', {}, isAdmin() ? el('button', { text: 'Run now', onclick: async () => {
      const r = await attempt(() => post(`/api/v2/jobs/${encodeURIComponent(j.name)}/run`));
      if (r) { banner(`${r.name}: ${r.status} — ${r.message}`, 'info'); operations(true); }
    } }) : '')));
  const act = (p, what) => async () => {
    const path = `/api/v2/periodic/${encodeURIComponent(p.name)}`;
    const r = await attempt(() => (what === 'remove' ? del(path) : post(`${path}/${what}`)));
    if (r) { banner(`${p.name}: ${what === 'remove' ? 'removed' : (r.paused ? 'paused' : 'resumed')}`, 'info'); operations(true); }
  };
  const periodicRows = periodic.map((p) => el('tr', { 'data-periodic': p.name },
    el('td', {}, p.name), el('td', {}, el('code', { text: p.schedule })), el('td', {}, p.timezone),
    el('td', {}, p.event_type), el('td', {}, badge(p.paused ? 'paused' : 'running')),
    el('td', { class: 'time' }, p.next_tick ? when(p.next_tick) : '—'),
    el('td', { class: 'time' }, p.last_tick ? when(p.last_tick) : '—'),
    el('td', {}, isAdmin() ? [
      el('button', { text: p.paused ? 'Resume' : 'Pause', onclick: act(p, p.paused ? 'resume' : 'pause') }),
      el('button', { class: 'danger', text: 'Remove', onclick: act(p, 'remove') }),
    ] : '')));
  fill(view(),
    el('h1', { text: 'Operations' }),
    table(['Id', 'Kind', 'Status', 'Progress', 'By', 'Created', ''], opRows, 'No operations yet.'),
    el('h2', { text: 'Scheduled jobs' }),
    table(['Job', 'Schedule', 'Enabled', 'Last run', 'Said', 'Next run', ''], jobRows),
    el('h2', { text: 'Periodic events' }),
    el('p', { class: 'muted', text: 'Published on their cron expression, once per tick across every process. An application registers them on start: a removed one comes back then; pause it to keep it quiet.' }),
    table(['Name', 'Schedule', 'Time zone', 'Type', 'State', 'Next tick', 'Last tick', ''], periodicRows, 'No periodic events registered.'));
  if (!quiet) refreshing(operations);
}

// ---- pauses -----------------------------------------------------------------------------

/** The due time of events parked by pause 0 (ms): a parked event is due at this plus its pause's id. */
const PARK_BASE = 100000000000000;

/** The pause that parked an event due at `ts`, or null. */
function parkedBy(ts) {
  const t = ts ? new Date(ts).getTime() : NaN;
  return t >= PARK_BASE ? t - PARK_BASE : null;
}

/** An event's next attempt as an operator reads it: a time, a pause, or the line for a slot. */
function nextAttempt(ts) {
  const pause = parkedBy(ts);
  if (pause !== null) return `parked by pause ${pause} (due when it ends)`;
  if (ts && new Date(ts).getTime() === PARK_BASE - 1) return 'waiting in line for a concurrency slot';
  return when(ts);
}

function scopeText(scope) {
  if (scope.kind === 'bus') return 'the whole bus';
  return scope.kind === 'matching' ? `subscriptions matching ${scope.target}` : `subscription ${scope.target}`;
}

async function pauses(quiet) {
  const since = new Date(Date.now() - 24 * 3600 * 1000).toISOString();
  const data = await attempt(() => Promise.all([get(`/api/v2/pauses?ended_since=${encodeURIComponent(since)}&limit=50`), get('/api/v2/subscriptions'), get('/api/v2/rate-limits'), get('/api/v2/concurrency-limits')]));
  if (!data) return;
  const [list, subs, limits, concurrency] = data;
  const active = list.filter((p) => !p.ended);
  const ended = list.filter((p) => p.ended);
  const resume = (p) => async () => {
    const r = await attempt(() => post(`/api/v2/pauses/${encodeURIComponent(p.id)}/resume`));
    if (r) { banner(`Pause ${r.id} ended: ${scopeText(r.scope)} resumed; its parked events are delivered now.`, 'info'); pauses(true); }
  };
  const activeRows = active.map((p) => el('tr', { 'data-pause': p.id },
    el('td', {}, String(p.id)), el('td', {}, scopeText(p.scope)), el('td', { class: 'num' }, num(p.parked)),
    el('td', { class: 'time' }, when(p.paused_at)), el('td', { class: 'time' }, p.until ? when(p.until) : 'until resumed'),
    el('td', {}, p.actor.name), el('td', {}, clip(p.reason)),
    el('td', {}, isAdmin() ? el('button', { text: 'Resume', onclick: resume(p) }) : '')));
  const endedRows = ended.map((p) => el('tr', { 'data-pause': p.id },
    el('td', {}, String(p.id)), el('td', {}, scopeText(p.scope)), el('td', { class: 'time' }, when(p.paused_at)),
    el('td', { class: 'time' }, when(p.ended.at)), el('td', {}, badge(p.ended.kind)),
    el('td', {}, `${p.actor.name} / ${p.ended.actor.name}`), el('td', {}, clip(p.reason + (p.ended.reason ? ` — ${p.ended.reason}` : '')))));
  let form = null;
  if (isAdmin()) {
    const scope = el('select', { id: 'pause-scope' },
      el('option', { value: 'subscription', text: 'Subscription' }),
      el('option', { value: 'matching', text: 'Subscriptions matching' }),
      el('option', { value: 'bus', text: 'The whole bus' }));
    const names = el('datalist', { id: 'pause-names' }, subs.filter((s) => s.name).map((s) => el('option', { value: s.name })));
    const target = el('input', { id: 'pause-target', list: 'pause-names', placeholder: 'name or pattern (payments-*)' });
    const hours = el('input', { id: 'pause-hours', type: 'number', min: '0', step: 'any', placeholder: 'hours (empty: until resumed)' });
    const reason = el('input', { id: 'pause-reason', placeholder: 'reason (required)', required: true });
    scope.addEventListener('change', () => { target.disabled = scope.value === 'bus'; });
    form = el('div', { class: 'panel pause-form' },
      el('h2', { text: 'Pause' }),
      el('p', { class: 'muted', text: 'Every worker process stops running the handlers it covers within its refresh (500 ms by default); their events wait, parked, and are delivered when the pause ends. Handlers already running finish.' }),
      scope, target, names, hours, reason,
      el('div', { class: 'actions' }, el('button', { class: 'danger', text: 'Pause', onclick: async () => {
        if (!reason.value.trim()) { banner('A reason is required to pause.'); return; }
        const body = { scope: scope.value, reason: reason.value.trim() };
        if (scope.value !== 'bus') {
          if (!target.value.trim()) { banner('Name the subscription or the pattern to pause.'); return; }
          body.target = target.value.trim();
        }
        const h = parseFloat(hours.value);
        if (hours.value.trim() && !(h > 0)) { banner('Hours must be above 0 (or empty: until resumed).'); return; }
        if (h > 0) body.for_seconds = Math.max(1, Math.round(h * 3600));
        const r = await attempt(() => post('/api/v2/pauses', body));
        if (r) { banner(`Pause ${r.id}: ${scopeText(r.scope)} paused.`, 'info'); pauses(true); }
      } })));
  }
  const limitRows = limits.map((l) => el('tr', { 'data-limit': l.subscription },
    el('td', {}, l.subscription), el('td', { class: 'num' }, num(l.per)), el('td', { class: 'num' }, `${num(l.interval_ms)} ms`),
    el('td', {}, l.set_by.name), el('td', { class: 'time' }, when(l.set_at)),
    el('td', {}, isAdmin() ? el('button', { class: 'danger', text: 'Remove', onclick: async () => {
      const r = await attempt(() => del(`/api/v2/rate-limits/${encodeURIComponent(l.subscription)}`));
      if (r) { banner(`${r.subscription}: no rate limit.`, 'info'); pauses(true); }
    } }) : '')));
  let limitForm = null;
  if (isAdmin()) {
    const sub = el('input', { id: 'limit-subscription', list: 'pause-names', placeholder: 'subscription' });
    const per = el('input', { id: 'limit-per', type: 'number', min: '1', step: '1', placeholder: 'runs' });
    const interval = el('input', { id: 'limit-interval', type: 'number', min: '1', step: '1', value: '1000', placeholder: 'per ms' });
    limitForm = el('div', { class: 'panel pause-form limit-form' },
      el('h2', { text: 'Set a rate limit' }),
      el('p', { class: 'muted', text: 'At most this many handler runs per interval for the subscription, across every worker process; events past it wait for their slot (not failed).' }),
      sub, per, interval,
      el('div', { class: 'actions' }, el('button', { text: 'Set limit', onclick: async () => {
        const n = parseInt(per.value, 10);
        const ms = parseInt(interval.value, 10);
        if (!sub.value.trim() || !(n >= 1) || !(ms >= 1)) { banner('Name the subscription, and give runs and an interval of at least 1.'); return; }
        const r = await attempt(() => api('PUT', `/api/v2/rate-limits/${encodeURIComponent(sub.value.trim())}`, { per: n, interval_ms: ms }));
        if (r) { banner(`${r.subscription}: at most ${r.per} runs per ${r.interval_ms} ms.`, 'info'); pauses(true); }
      } })));
  }
  const concurrencyRows = concurrency.map((l) => el('tr', { 'data-concurrency': l.subscription },
    el('td', {}, l.subscription), el('td', { class: 'num' }, num(l.max_in_flight)),
    el('td', { class: 'num' }, l.per_process ? num(l.per_process) : '—'),
    el('td', {}, l.partition ? `${num(l.partition.max_in_flight)} by ${l.partition.by}` : '—'),
    el('td', { class: 'num' }, num(l.in_flight)), el('td', { class: 'num' }, num(l.waiting)),
    el('td', {}, l.set_by.name), el('td', { class: 'time' }, when(l.set_at)),
    el('td', {}, isAdmin() ? el('button', { class: 'danger', text: 'Remove', onclick: async () => {
      const r = await attempt(() => del(`/api/v2/concurrency-limits/${encodeURIComponent(l.subscription)}`));
      if (r) { banner(`${r.subscription}: no concurrency limit; the events in line are due now.`, 'info'); pauses(true); }
    } }) : '')));
  let concurrencyForm = null;
  if (isAdmin()) {
    const sub = el('input', { id: 'concurrency-subscription', list: 'pause-names', placeholder: 'subscription' });
    const max = el('input', { id: 'concurrency-max', type: 'number', min: '1', step: '1', placeholder: 'at once, all processes' });
    const per = el('input', { id: 'concurrency-per-process', type: 'number', min: '1', step: '1', placeholder: 'in each process (optional)' });
    const by = el('input', { id: 'concurrency-partition-by', placeholder: 'partition by: ordering_key or metadata.<field> (optional)' });
    const each = el('input', { id: 'concurrency-per-partition', type: 'number', min: '1', step: '1', placeholder: 'of each partition (with partition by)' });
    concurrencyForm = el('div', { class: 'panel pause-form limit-form' },
      el('h2', { text: 'Set a concurrency limit' }),
      el('p', { class: 'muted', text: 'At most this many handler runs of the subscription at once across every worker process (and, if given, in each, and of each partition: a tenant named by the ordering key or a metadata field); events past it wait in line, parked, and run as slots free up, tenants taking turns.' }),
      sub, max, per, by, each,
      el('div', { class: 'actions' }, el('button', { text: 'Set concurrency', onclick: async () => {
        const n = parseInt(max.value, 10);
        if (!sub.value.trim() || !(n >= 1)) { banner('Name the subscription, and give at least 1 run at once.'); return; }
        const body = { max_in_flight: n };
        if (per.value.trim()) body.per_process = parseInt(per.value, 10);
        if (by.value.trim() || each.value.trim()) {
          const m = parseInt(each.value, 10);
          if (!by.value.trim() || !(m >= 1)) { banner('A partition limit needs both what splits the events and at least 1 run of each partition.'); return; }
          body.partition_by = by.value.trim();
          body.per_partition = m;
        }
        const r = await attempt(() => api('PUT', `/api/v2/concurrency-limits/${encodeURIComponent(sub.value.trim())}`, body));
        if (r) { banner(`${r.subscription}: at most ${r.max_in_flight} runs at once${r.partition ? `, ${r.partition.max_in_flight} of each partition by ${r.partition.by}` : ''}.`, 'info'); pauses(true); }
      } })));
  }
  fill(view(),
    el('h1', { text: 'Pauses' }),
    table(['Id', 'Pauses', 'Parked events', 'Since', 'Until', 'By', 'Reason', ''], activeRows, 'Nothing is paused.'),
    form,
    el('h2', { text: 'Ended in the last day' }),
    table(['Id', 'Paused', 'Since', 'Ended', 'How', 'By', 'Reason'], endedRows, 'No pause ended in the last day.'),
    el('h1', { text: 'Rate limits' }),
    table(['Subscription', 'Runs', 'Per', 'Set by', 'Set at', ''], limitRows, 'No rate limits.'),
    limitForm,
    el('h1', { text: 'Concurrency limits' }),
    table(['Subscription', 'At once', 'Per process', 'Per partition', 'In flight', 'Waiting', 'Set by', 'Set at', ''], concurrencyRows, 'No concurrency limits.'),
    concurrencyForm);
  if (!quiet) refreshing(pauses, () => document.activeElement && document.activeElement.closest && document.activeElement.closest('.pause-form, .limit-form'));
}

// ---- start ------------------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('#login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('#token').value.trim();
    if (t) signIn(t);
  });
  $('#logout').addEventListener('click', () => signOut(''));
  const tz = $('#tz');
  const showTz = () => { tz.textContent = localStorage.getItem(UTC_KEY) === '1' ? 'Times: UTC' : 'Times: local'; };
  tz.addEventListener('click', () => {
    localStorage.setItem(UTC_KEY, localStorage.getItem(UTC_KEY) === '1' ? '0' : '1');
    showTz();
    route();
  });
  showTz();
  window.addEventListener('hashchange', route);
  if (state.token) signIn(state.token); else signOut('');
});
