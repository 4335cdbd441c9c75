// Browser tests of the durabus dashboard, run by scripts/dashboard-test against `durabus serve`
// over a database seeded by the seed_dashboard example. Each test saves a screenshot.
import { mkdirSync } from 'node:fs';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const { DASH_URL, DASH_ADMIN, DASH_READ, CHROMIUM, SHOTS } = process.env;
for (const [k, v] of Object.entries({ DASH_URL, DASH_ADMIN, DASH_READ, CHROMIUM, SHOTS })) {
  if (!v) throw new Error(`${k} is not set (run scripts/dashboard-test)`);
}
mkdirSync(SHOTS, { recursive: true });

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-quic'],
});

async function api(method, path, token = DASH_ADMIN, body) {
  const res = await fetch(DASH_URL + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: await res.json() };
}
const get = async (path, token) => (await api('GET', path, token)).body;

/** A new tab (its own session storage), signed in with `token` unless it is null. */
async function open(token) {
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
  const page = await context.newPage();
  const dialogs = [];
  const problems = [];
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  await page.goto(DASH_URL + '/');
  if (token) {
    await page.fill('#token', token);
    await page.click('#login-form button');
    await page.waitForSelector('#nav:not([hidden])');
  }
  return { page, dialogs, problems, close: () => context.close() };
}

async function shot(page, name) {
  await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('the page forbids inline scripts and serves its assets from itself', async () => {
  const res = await fetch(DASH_URL + '/');
  const csp = res.headers.get('content-security-policy') || '';
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  const html = await res.text();
  assert.doesNotMatch(html, /<script>(?!<\/script>)/, 'an inline script');
  assert.doesNotMatch(html, /https?:\/\//, 'an asset from elsewhere');
});

test('a wrong token shows the prompt again, with the reason', async () => {
  const t = await open(null);
  await t.page.fill('#token', 'not-a-token-of-this-server');
  await t.page.click('#login-form button');
  await t.page.waitForSelector('#login-error:not([hidden])');
  assert.match(await t.page.textContent('#login-error'), /refused/);
  assert.equal(await t.page.isVisible('#login'), true);
  assert.equal(await t.page.isVisible('#nav'), false);
  await shot(t.page, 'login');
  await t.close();
});

test('the overview shows the seeded counts, the chart and the breakers', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.waitForSelector('[data-card=pending] .value');
  const stats = await get('/api/v2/stats');
  const overview = await get('/api/v2/overview');
  const card = async (id) => (await t.page.textContent(`[data-card=${id}] .value`)).trim();
  assert.equal(await card('pending'), String(overview.pending));
  assert.equal(await card('processing'), String(overview.processing));
  assert.equal(await card('scheduled'), String(overview.scheduled));
  assert.equal(await card('dl-pending'), String(overview.dead_letters_pending));
  assert.equal(await card('dl-retrying'), String(overview.dead_letters_retrying));
  assert.equal(await t.page.$('[data-card=done]'), null, 'no card counts the whole table');
  const asked = [];
  t.page.on('request', (r) => asked.push(new URL(r.url()).pathname));
  await t.page.reload();
  await t.page.waitForSelector('[data-card=pending] .value');
  assert.ok(asked.includes('/api/v2/overview'), asked.join(' '));
  assert.ok(!asked.includes('/api/v2/stats'), 'the overview never asks for the full-table counts');
  assert.ok(stats.by_status.done >= 40 && stats.by_status.dlq >= 11, JSON.stringify(stats.by_status));
  assert.ok((await t.page.$$('.chart svg rect')).length >= 1, 'the chart has bars');
  assert.match(await t.page.textContent('.legend'), /delivered \d+/);
  assert.match(await t.page.textContent('main'), /payments/);
  // A separate server shows each worker process's breaker as the process reported it.
  assert.match(await t.page.textContent('[data-process="worker-1"]'), /open worker-1/);
  await shot(t.page, 'overview');
  assert.deepEqual(t.problems, []);
  await t.close();
});

test('the groups view lists the seeded failure groups and leads to their dead letters', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(DASH_URL + '/#/groups');
  await t.page.waitForSelector('tr[data-group]');
  const groups = await get('/api/v2/dead-letter-groups');
  assert.equal(groups.length, 2, JSON.stringify(groups));
  assert.equal((await t.page.$$('tr[data-group]')).length, groups.length);
  const text = await t.page.textContent('main');
  assert.match(text, /card declined/);
  assert.match(text, /bank gateway timed out/);
  // Each group's last day as 24 hourly bars, the counts the API gives; the seeded groups are
  // new (first seen just now) and marked so.
  for (const g of groups) {
    const row = `tr[data-group="${g.fingerprint}"]`;
    const bars = await t.page.$$eval(`${row} .spark .bar`, (bs) => bs.map((b) => Number(b.dataset.n)));
    assert.deepEqual(bars, g.hourly);
    assert.equal(bars.reduce((a, b) => a + b, 0), g.count, 'every seeded dead letter is from the last day');
    assert.equal(g.new, true);
    assert.equal(await t.page.$$eval(`${row} .badge.new`, (b) => b.length), 1);
  }
  await shot(t.page, 'groups');
  const first = groups[0];
  await t.page.click(`tr[data-group="${first.fingerprint}"] a`);
  await t.page.waitForFunction((fp) => location.hash.includes(`group=${fp}`), first.fingerprint);
  await t.page.waitForSelector('tr[data-id]');
  assert.equal((await t.page.$$('tr[data-id]')).length, first.count);
  await t.close();
});

test('long errors, signatures and types wrap inside a 1360 px window', async () => {
  const t = await open(DASH_ADMIN);
  const long = 'E'.repeat(700) + ' https://gateway.example/' + 'segment/'.repeat(60);
  // The seeded errors are short: give each group the longest text an error can have.
  await t.page.route('**/api/v2/dead-letter-groups*', async (route) => {
    const res = await route.fetch();
    const gs = (await res.json()).map((g, i) => ({
      ...g, sample_error: long, signature: 'S'.repeat(300), new: i === 0,
      hourly: Array.from({ length: 24 }, (_, h) => (h * 7919) % 1000),
      event_types: [`payment.${'t'.repeat(240)}`], subscription: 'sub-'.repeat(60),
    }));
    await route.fulfill({ response: res, json: gs });
  });
  await t.page.goto(DASH_URL + '/#/groups');
  await t.page.waitForSelector('tr[data-group]');
  const [page, view] = await t.page.evaluate(() => [
    document.documentElement.scrollWidth, document.documentElement.clientWidth]);
  assert.ok(page <= view, `the page is ${page} px wide in a ${view} px window`);
  const cells = await t.page.$$eval('tr[data-group] td', (tds) =>
    tds.filter((td) => td.getBoundingClientRect().right > document.documentElement.clientWidth).length);
  assert.equal(cells, 0, 'every cell ends inside the window');
  // Only the group routed as new is marked; the bars scale to the largest hour.
  assert.equal(await t.page.$$eval('tr[data-group] .badge.new', (b) => b.length), 1);
  const heights = await t.page.$$eval('tr[data-group] .spark .bar', (bs) => bs.map((b) => b.getBoundingClientRect().height));
  assert.ok(Math.max(...heights) <= 18 && Math.min(...heights) >= 1, `bars of ${Math.min(...heights)} to ${Math.max(...heights)} px`);
  // Times stay on one line; an error shows at most four lines, all of it on hover.
  const lines = (sel) => t.page.$$eval(sel, (els) => els.map((e) => {
    const r = document.createRange();
    r.selectNodeContents(e);
    return new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size;
  }));
  for (const n of await lines('tr[data-group] td.time')) assert.equal(n, 1, 'a time on one line');
  const clipped = await t.page.$$eval('tr[data-group] td.err .clip', (els) => els.map((e) =>
    [Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight)), e.title]));
  for (const [n, title] of clipped) {
    assert.ok(n <= 4, `an error in ${n} lines`);
    assert.equal(title, long);
  }
  await shot(t.page, 'groups-long-errors');
  await t.close();
});

async function xssLetter() {
  const page = await get('/api/v2/dead-letters?event_type=pay.card&limit=100');
  for (const d of page.items) {
    const full = await get(`/api/v2/dead-letters/${d.event_id}`);
    if (full.payload && full.payload.note) return full;
  }
  throw new Error('the seeded HTML-looking payload is missing');
}

test('a payload that looks like HTML is shown as text and runs nothing', async () => {
  const d = await xssLetter();
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters/${d.event_id}`);
  await t.page.waitForSelector('pre.payload');
  assert.match(await t.page.textContent('pre.payload'), /<img src=x onerror=alert\(1\)>/);
  assert.equal((await t.page.$$('main img')).length, 0, 'the payload became an element');
  assert.match(await t.page.textContent('main'), /Round 1/);
  await t.page.waitForTimeout(300);
  assert.deepEqual(t.dialogs, [], 'a dialog fired');
  await shot(t.page, 'dead-letter');
  assert.deepEqual(t.problems, []);
  await t.close();
});

test('resolving without a note is refused and changes nothing', async () => {
  const d = await xssLetter();
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters/${d.event_id}`);
  await t.page.waitForSelector('text=Resolve');
  await t.page.click('button:text-is("Resolve")');
  await t.page.waitForSelector('#banner:not([hidden])');
  assert.match(await t.page.textContent('#banner'), /note is required/);
  assert.equal((await get(`/api/v2/dead-letters/${d.event_id}`)).status, 'pending');
  // The server refuses it too, whatever the page does.
  const refused = await api('POST', `/api/v2/dead-letters/${d.event_id}/resolve`, DASH_ADMIN, { note: '' });
  assert.equal(refused.status, 422);
  await t.close();
});

test('retrying a dead letter from the table moves it out of the pending list', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters?status=pending&event_type=pay.card`);
  await t.page.waitForSelector('tr[data-id] button.retry');
  const before = (await t.page.$$('tr[data-id]')).length;
  const id = await t.page.getAttribute('tr[data-id]:has(button.retry) >> nth=0', 'data-id');
  await t.page.click(`tr[data-id="${id}"] button.retry`);
  await t.page.waitForSelector(`tr[data-id="${id}"]`, { state: 'detached' });
  assert.equal((await t.page.$$('tr[data-id]')).length, before - 1);
  assert.equal((await get(`/api/v2/dead-letters/${id}`)).status, 'retrying');
  await shot(t.page, 'dead-letters');
  await t.close();
});

test('a bulk retry by filter shows the preview count, then the operation completes', async () => {
  const pending = await get('/api/v2/dead-letters?status=pending&event_type=pay.bank');
  const n = pending.items.length;
  assert.ok(n >= 1);
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters?status=pending&event_type=pay.bank`);
  await t.page.waitForSelector('button.bulk-preview');
  await t.page.selectOption('select[name=bulk-action]', 'retry');
  await t.page.click('button.bulk-preview');
  await t.page.waitForSelector('.preview-count');
  assert.match(await t.page.textContent('.preview-count'), new RegExp(`^${n} dead letters match`));
  await t.page.click(`button:text-is("Confirm: retry ${n} dead letters")`);
  await t.page.waitForSelector('.operation[data-status=completed]', { timeout: 15000 });
  assert.match(await t.page.textContent('.operation'), new RegExp(`${n} processed`));
  // The list is read again: none of the retried dead letters is pending any more.
  await t.page.waitForFunction(() => document.querySelectorAll('tr[data-id]').length === 0);
  assert.match(await t.page.textContent('.listing'), /No dead letters match/);
  await shot(t.page, 'bulk-retry');
  const after = await get('/api/v2/dead-letters?status=pending&event_type=pay.bank');
  assert.equal(after.items.length, 0);
  await t.close();
});

test('a read-only token sees no action buttons', async () => {
  const t = await open(DASH_READ);
  assert.match(await t.page.textContent('#who'), /read-only/);
  await t.page.goto(`${DASH_URL}/#/dead-letters`);
  await t.page.waitForSelector('tr[data-id]');
  assert.equal((await t.page.$$('input.pick')).length, 0);
  assert.equal((await t.page.$$('button.retry')).length, 0);
  assert.equal((await t.page.$$('button.bulk-preview')).length, 0);
  const d = await xssLetter();
  await t.page.goto(`${DASH_URL}/#/dead-letters/${d.event_id}`);
  await t.page.waitForSelector('pre.payload');
  assert.equal((await t.page.$$('button:text-is("Retry"), button:text-is("Resolve"), button:text-is("Abandon")')).length, 0);
  await t.page.goto(`${DASH_URL}/#/operations`);
  await t.page.waitForSelector('h1:text-is("Operations")');
  assert.equal((await t.page.$$('button:text-is("Run now")')).length, 0);
  await t.page.waitForSelector('tr[data-periodic]');
  assert.equal((await t.page.$$('tr[data-periodic] button')).length, 0);
  await shot(t.page, 'read-only');
  await t.close();
});

test('periodic events are listed, paused, resumed and removed', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/operations`);
  const row = (name) => `tr[data-periodic="${name}"]`;
  await t.page.waitForSelector(row('nightly-report'));
  assert.match(await t.page.textContent(row('nightly-report')), /Europe\/Paris/);
  await t.page.click(`${row('hourly-digest')} button:text-is("Pause")`);
  await t.page.waitForSelector(`${row('hourly-digest')} .status.paused`);
  assert.equal((await get('/api/v2/periodic')).find((p) => p.name === 'hourly-digest').paused, true);
  await shot(t.page, 'periodic-events');
  await t.page.click(`${row('hourly-digest')} button:text-is("Resume")`);
  await t.page.waitForSelector(`${row('hourly-digest')} .status.running`);
  await t.page.click(`${row('hourly-digest')} button:text-is("Remove")`);
  await t.page.waitForFunction(() => !document.querySelector('tr[data-periodic="hourly-digest"]'));
  assert.deepEqual((await get('/api/v2/periodic')).map((p) => p.name), ['nightly-report']);
  await t.close();
});

test('a subscription is paused with a reason and resumed; a reader sees the pause and no actions', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/pauses`);
  await t.page.waitForSelector('#pause-scope');
  assert.match(await t.page.textContent('main table'), /Nothing is paused/);
  // No reason: refused, nothing recorded.
  await t.page.fill('#pause-target', 'shipping');
  await t.page.click('.pause-form button:text-is("Pause")');
  await t.page.waitForSelector('#banner:not([hidden])');
  assert.match(await t.page.textContent('#banner'), /reason is required/);
  assert.deepEqual(await get('/api/v2/pauses'), []);
  // An unknown subscription: the server's answer is shown.
  await t.page.fill('#pause-target', 'no-such-subscription');
  await t.page.fill('#pause-reason', 'carrier API down');
  await t.page.click('.pause-form button:text-is("Pause")');
  await t.page.waitForFunction(() => /not found/.test(document.querySelector('#banner').textContent));
  await t.page.fill('#pause-target', 'shipping');
  await t.page.fill('#pause-hours', '2');
  await t.page.click('.pause-form button:text-is("Pause")');
  await t.page.waitForSelector('tr[data-pause]');
  assert.match(await t.page.textContent('tr[data-pause]'), /subscription shipping.*carrier API down/s);
  const [pause] = await get('/api/v2/pauses');
  assert.equal(pause.actor.name, 'ops');
  assert.deepEqual(pause.scope, { kind: 'subscription', target: 'shipping' });
  assert.ok(pause.until, 'a pause for 2 hours ends by itself');
  await shot(t.page, 'pauses');
  const reader = await open(DASH_READ);
  await reader.page.goto(`${DASH_URL}/#/pauses`);
  await reader.page.waitForSelector('tr[data-pause]');
  assert.equal(await reader.page.$('#pause-scope'), null, 'a reader gets no pause form');
  assert.equal((await reader.page.$$('tr[data-pause] button')).length, 0);
  await reader.close();
  await t.page.click(`tr[data-pause="${pause.id}"] button:text-is("Resume")`);
  await t.page.waitForFunction(() => /Nothing is paused/.test(document.querySelector('main table').textContent));
  assert.match(await t.page.textContent('main'), /resumed/);
  assert.deepEqual(await get('/api/v2/pauses'), []);
  // The only console errors are the browser's notes of the refused request (404).
  assert.deepEqual(t.problems.filter((p) => !/status of 404/.test(p)), []);
  await t.close();
});

test('a rate limit and a concurrency limit are set for a subscription and removed', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/pauses`);
  await t.page.waitForSelector('#limit-subscription');
  await t.page.fill('#limit-subscription', 'shipping');
  await t.page.fill('#limit-per', '50');
  await t.page.fill('#limit-interval', '1000');
  await t.page.click('button:text-is("Set limit")');
  await t.page.waitForSelector('tr[data-limit="shipping"]');
  assert.match(await t.page.textContent('tr[data-limit="shipping"]'), /50.*1,000 ms.*ops/s);
  assert.deepEqual((await get('/api/v2/rate-limits')).map((l) => [l.subscription, l.per]), [['shipping', 50]]);
  await shot(t.page, 'rate-limits');
  await t.page.fill('#concurrency-subscription', 'shipping');
  await t.page.fill('#concurrency-max', '8');
  await t.page.fill('#concurrency-per-process', '2');
  await t.page.click('button:text-is("Set concurrency")');
  await t.page.waitForSelector('tr[data-concurrency="shipping"]');
  assert.match(await t.page.textContent('tr[data-concurrency="shipping"]'), /8.*2.*0.*0.*ops/s);
  assert.deepEqual((await get('/api/v2/concurrency-limits')).map((l) => [l.subscription, l.max_in_flight, l.per_process]), [['shipping', 8, 2]]);
  // A limit per tenant: half of it is refused in the page; both fields set it.
  await t.page.fill('#concurrency-subscription', 'shipping');
  await t.page.fill('#concurrency-max', '8');
  await t.page.fill('#concurrency-partition-by', 'metadata.tenant');
  await t.page.click('button:text-is("Set concurrency")');
  await t.page.waitForSelector('#banner:has-text("A partition limit needs both")');
  await t.page.fill('#concurrency-per-partition', '2');
  await t.page.click('button:text-is("Set concurrency")');
  await t.page.waitForFunction(() => (document.querySelector('tr[data-concurrency="shipping"]') || {}).textContent?.includes('2 by metadata.tenant'));
  assert.deepEqual((await get('/api/v2/concurrency-limits')).map((l) => [l.max_in_flight, l.partition]), [[8, { by: 'metadata.tenant', max_in_flight: 2 }]]);
  await shot(t.page, 'concurrency-limits');
  await t.page.click('tr[data-concurrency="shipping"] button:text-is("Remove")');
  await t.page.waitForFunction(() => !document.querySelector('tr[data-concurrency]'));
  await t.page.click('tr[data-limit="shipping"] button:text-is("Remove")');
  await t.page.waitForFunction(() => !document.querySelector('tr[data-limit]'));
  assert.deepEqual(await get('/api/v2/rate-limits'), []);
  assert.deepEqual(t.problems, []);
  await t.close();
});

test('an ordering key lists its events, the later ones waiting for the first', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/events?ordering_key=parcel-42`);
  await t.page.waitForSelector('main table a.key');
  const rows = await t.page.$$eval('main table tbody tr', (trs) => trs.map((tr) => tr.textContent));
  assert.equal(rows.length, 3, rows.join('\n'));
  assert.ok(rows.every((r) => r.includes('parcel-42')), rows.join('\n'));
  assert.equal(rows.filter((r) => r.includes('after its key')).length, 2, rows.join('\n'));
  await shot(t.page, 'events-ordering-key');
  await t.close();
});

test('a slow answer for the page left behind never paints over the page shown now', async () => {
  const t = await open(null);
  // The overview's reads answer 1.5 s late; the dead letters are opened meanwhile.
  await t.page.route('**/api/v2/overview', async (r) => {
    await new Promise((ok) => setTimeout(ok, 1500));
    await r.continue();
  });
  await t.page.fill('#token', DASH_ADMIN);
  await t.page.click('#login-form button');
  await t.page.waitForSelector('#nav:not([hidden])');
  await t.page.goto(`${DASH_URL}/#/dead-letters`);
  await t.page.waitForSelector('tr[data-id]');
  await t.page.waitForTimeout(2500);
  assert.equal(await t.page.textContent('#view h1'), 'Dead letters');
  assert.ok((await t.page.$$('tr[data-id]')).length > 0);
  await t.close();
});

test('events, their payload snapshots and a replay preview', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/events?event_type=ship.created`);
  await t.page.waitForSelector('main table a');
  await t.page.click('main table a >> nth=0');
  await t.page.waitForSelector('pre.payload');
  await t.page.waitForSelector('.snapshot');
  assert.match(await t.page.textContent('.snapshot'), /published/);
  await t.page.goto(`${DASH_URL}/#/replay`);
  await t.page.fill('input[name=types]', 'ship.*');
  await t.page.click('button.replay-preview');
  await t.page.waitForSelector('.replay-count');
  assert.match(await t.page.textContent('.replay-count'), /Preview: 40 events/);
  await shot(t.page, 'replay');
  await t.close();
});

test('scheduled events show their due time and priority, and one is cancelled with a reason', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/events?status=scheduled`);
  await t.page.waitForSelector('main table a');
  const rows = await t.page.$$('main table tbody tr');
  assert.equal(rows.length, 3);
  const first = await rows[0].textContent();
  assert.match(first, /remind\.customer/);
  assert.match(first, /scheduled/);
  assert.match(first, /5/);
  await shot(t.page, 'events-scheduled');
  await t.page.click('main table a >> nth=0');
  await t.page.waitForSelector('input[name=cancel-reason]');
  assert.match(await t.page.textContent('dl.fields'), /Scheduled for/);
  // No reason: refused, nothing changes.
  await t.page.click('text=Cancel event');
  await t.page.waitForSelector('#banner:not([hidden])');
  assert.match(await t.page.textContent('#banner'), /reason is required/);
  await t.page.fill('input[name=cancel-reason]', 'the customer emptied the cart');
  await t.page.click('text=Cancel event');
  await t.page.waitForSelector('ul.cancellations li');
  assert.match(await t.page.textContent('#view h1'), /cancelled/);
  assert.match(await t.page.textContent('ul.cancellations'), /the customer emptied the cart/);
  assert.equal(await t.page.$('input[name=cancel-reason]'), null, 'a cancelled event offers no cancel');
  await shot(t.page, 'event-cancelled');
  const left = await get('/api/v2/events?status=scheduled');
  assert.equal(left.items.length, 2);
  await t.close();
});

/** A pending pay.card dead letter other than the HTML-looking one. */
async function pendingCard() {
  const page = await get('/api/v2/dead-letters?status=pending&event_type=pay.card&limit=100');
  const xss = await xssLetter();
  const d = page.items.find((x) => x.event_id !== xss.event_id);
  if (!d) throw new Error('no pending pay.card dead letter is left');
  return d;
}

test('the bulk confirmation runs only what was previewed: changing the action discards it', async () => {
  const before = await get('/api/v2/dead-letters?status=pending&event_type=pay.card&limit=100');
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters?status=pending&event_type=pay.card`);
  await t.page.waitForSelector('button.bulk-preview');
  await t.page.selectOption('select[name=bulk-action]', 'retry');
  await t.page.click('button.bulk-preview');
  await t.page.waitForSelector('.preview-count');
  assert.equal(await t.page.getAttribute('.bulk-result button.primary', 'data-action'), 'retry');
  // The action list is switched after the preview: the preview (and its button) is gone.
  await t.page.selectOption('select[name=bulk-action]', 'abandon');
  await t.page.waitForSelector('.preview-count', { state: 'detached' });
  assert.equal((await t.page.$$('.bulk-result button.primary')).length, 0);
  const after = await get('/api/v2/dead-letters?status=pending&event_type=pay.card&limit=100');
  assert.equal(after.items.length, before.items.length, 'nothing was run');
  await t.close();
});

test('a dead letter offers exactly the actions its status allows, and a success stays shown', async () => {
  const d = await pendingCard();
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters/${d.event_id}`);
  await t.page.waitForSelector('button:text-is("Abandon")');
  await t.page.fill('textarea[name=note]', 'the customer cancelled');
  await t.page.click('button:text-is("Abandon")');
  await t.page.waitForSelector('#banner.info:not([hidden])');
  assert.match(await t.page.textContent('#banner'), /abandoned/);
  // The page is drawn again; the notice stays, and an abandoned record offers retry and
  // resolve, not abandon.
  await t.page.waitForSelector('h1 .status.abandoned');
  await t.page.waitForTimeout(1000);
  assert.equal(await t.page.isVisible('#banner.info'), true, 'the notice vanished');
  const buttons = await t.page.$$eval('.panel .actions button', (bs) => bs.map((b) => b.textContent));
  assert.deepEqual(buttons, ['Retry', 'Resolve']);
  assert.deepEqual((await get(`/api/v2/dead-letters/${d.event_id}`)).actions, ['retry', 'resolve', 'purge']);
  assert.match(await t.page.textContent('dl.fields'), /Abandoned/);
  await t.close();
});

test('a replay without a start time needs an explicit choice and a confirmation with its count', async () => {
  const t = await open(DASH_ADMIN);
  const replaysBefore = (await get('/api/v2/replay')).length;
  await t.page.goto(`${DASH_URL}/#/replay`);
  await t.page.waitForSelector('button.replay-run');
  await t.page.click('button.replay-run');
  await t.page.waitForSelector('#banner:not([hidden])');
  assert.match(await t.page.textContent('#banner'), /start time/);
  await t.page.check('input.replay-all');
  await t.page.click('button.replay-run');
  await t.page.waitForSelector('.replay-confirmation');
  assert.match(await t.page.textContent('.replay-confirmation'), /Replay [\d,]+ events \(every stored event\)/);
  await t.page.click('.replay-confirmation button:text-is("Cancel")');
  await t.page.waitForSelector('.replay-confirmation', { state: 'detached' });
  assert.equal((await get('/api/v2/replay')).length, replaysBefore, 'no replay was started');
  await t.close();
});

test('times show their zone and can be shown in UTC; the metrics page shows the exposition', async () => {
  const t = await open(DASH_ADMIN);
  await t.page.goto(`${DASH_URL}/#/dead-letters`);
  await t.page.waitForSelector('tr[data-id] a');
  await t.page.click('#tz');
  await t.page.waitForFunction(() => document.querySelector('#tz').textContent === 'Times: UTC');
  await t.page.waitForSelector('tr[data-id] a');
  assert.match(await t.page.textContent('tr[data-id] a >> nth=0'), /UTC/);
  await t.page.goto(`${DASH_URL}/#/metrics`);
  await t.page.waitForSelector('pre.metrics');
  assert.match(await t.page.textContent('pre.metrics'), /durabus_/);
  assert.deepEqual(t.problems, []);
  await t.close();
});

let failed = 0;
for (const { name, fn } of tests) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n     ${e && e.stack ? e.stack.split('\n').slice(0, 4).join('\n     ') : e}`);
  }
}
await browser.close();
console.log(`${tests.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
