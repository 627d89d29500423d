import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { type Browser, chromium } from 'playwright-core';
import { moveShard, moveShards } from 'shardflake';
import { serveDashboard } from '../../packages/cli/src/dashboard/server.js';
import { makeCluster, rawConfig, withClient } from '../move/fixture.js';
import { startCli } from '../support/cli.js';
import { useServers } from '../support/postgres.js';
import { assertNoPassword } from '../support/secrets.js';

const servers = await useServers(3);
// 12 shards: 0-3 on a, 4-7 on b, 8-11 on c.
const config = await makeCluster(servers, 12);
const dashboard = await serveDashboard(config, { port: 0, refreshMs: 200 });
let browser: Browser | undefined;
after(async () => {
  await browser?.close();
  await dashboard.close();
});

/** A GET with a chosen Host header (fetch does not let a caller set it). */
const getWithHost = (host: string) =>
  new Promise<number>((resolve, reject) => {
    const req = request(`${dashboard.url}api/status`, { headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });

test('/api/status is exactly `cluster status --json`, with no password anywhere; other hosts are refused', async () => {
  const api = await fetch(`${dashboard.url}api/status`);
  assert.equal(api.status, 200);
  assert.match(api.headers.get('content-type') ?? '', /^application\/json/);
  const text = await api.text();
  const path = join(await mkdtemp(join(tmpdir(), 'shardflake-dashboard-')), 'cluster.json');
  await writeFile(path, JSON.stringify(rawConfig(servers, 12)));
  const cli = await startCli(['cluster', 'status', '--config', path, '--json']).done;
  assert.equal(cli.code, 0, cli.stderr);
  assert.deepEqual(JSON.parse(text), JSON.parse(cli.stdout));
  assert.equal(text, cli.stdout, 'byte for byte');
  const page = await (await fetch(dashboard.url)).text();
  const moves = await (await fetch(`${dashboard.url}api/moves`)).text();
  // The embedded servers' URLs carry a password (postgres:PASSWORD@…); only the redacted form may be served.
  assert.match(text, /postgres:\*\*\*\*@127\.0\.0\.1/);
  for (const body of [text, page, moves])
    assertNoPassword(
      body,
      servers.map((s) => s.url),
      'a served page',
    );
  assert.doesNotMatch(
    page,
    /<script[^>]+src=|<link[^>]+href=|https?:\/\//,
    'the page loads nothing from elsewhere',
  );
  assert.equal(await getWithHost('evil.example'), 421);
  assert.equal(await getWithHost(dashboard.url.slice('http://'.length, -1)), 200);
});

test('in Chromium: every server, the whole shard map, a move in progress while it runs, then finished', async () => {
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  const external: string[] = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(dashboard.url)) external.push(r.url());
  });
  await page.goto(dashboard.url);

  await page.waitForSelector('#servers tbody tr[data-server="c"]');
  const rows = await page.$$eval('#servers tbody tr', (trs) =>
    trs.map((tr) => [
      tr.getAttribute('data-server'),
      (tr.children[1] as { textContent: string }).textContent,
    ]),
  );
  assert.deepEqual(rows, [
    ['a', '4'],
    ['b', '4'],
    ['c', '4'],
  ]);
  assert.equal(await page.getAttribute('#map', 'data-shards'), '12');
  assert.equal(await page.getAttribute('#map', 'data-moving'), '0');
  assert.equal(await page.textContent('#no-moves'), 'No move in progress.');

  // A real move of shard 1 (a → c), held after its initial copy has caught up, until the page has shown it.
  await withClient(servers[0]?.url ?? '', (c) =>
    c.query(`INSERT INTO shard_0001.items (note, n) SELECT 'row ' || g, g FROM generate_series(1, 2000) g`),
  );
  let release: () => void = () => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  const move = moveShard(config, 1, 'c', {
    afterStep: async (step) => {
      if (step === 'synced') await held;
    },
  });
  try {
    await page.waitForSelector('#moves tr.running[data-shard="1"][data-phase="synced"]', { timeout: 60_000 });
    const text = await page.textContent('#moves tr.running[data-shard="1"]');
    assert.match(text ?? '', /a → c/);
    assert.match(text ?? '', /synced/);
    assert.match(text ?? '', /\d+%/);
    assert.equal(await page.getAttribute('#map', 'data-moving'), '1');
    assert.match((await page.textContent('#no-moves')) ?? '', /1 move in progress/);
  } finally {
    release();
  }
  await move;

  await page.waitForSelector('#moves tr.finished[data-shard="1"][data-phase="done"]');
  await page.waitForFunction(() => {
    const legend = (
      globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }
    ).document.querySelector('#legend [data-server="c"]');
    return legend?.textContent.includes('5 shards');
  });
  assert.equal(await page.getAttribute('#map', 'data-moving'), '0');
  assert.equal(await page.textContent('#no-moves'), 'No move in progress.');

  // A set of two shards (2 and 3, a → b) moving together: both rows, each naming the set.
  let releaseSet: () => void = () => {};
  const setHeld = new Promise<void>((r) => {
    releaseSet = r;
  });
  const set = moveShards(config, [2, 3], 'b', {
    afterStep: async (step) => {
      if (step === 'synced') await setHeld;
    },
  });
  try {
    await page.waitForSelector('#moves tr.running[data-shard="3"][data-phase="synced"]', { timeout: 60_000 });
    await page.waitForSelector('#moves tr.running[data-shard="2"][data-phase="synced"]');
    const first = (await page.textContent('#moves tr.running[data-shard="2"] td')) ?? '';
    const second = (await page.textContent('#moves tr.running[data-shard="3"] td')) ?? '';
    const setId = /^#(\d+) \(set #\1\)$/.exec(first)?.[1];
    assert.ok(setId, `the set is named by its first move: ${first}`);
    assert.equal(second, `#${Number(setId) + 1} (set #${setId})`);
    assert.match((await page.textContent('#no-moves')) ?? '', /2 moves in progress/);
  } finally {
    releaseSet();
  }
  await set;
  await page.waitForSelector('#moves tr.finished[data-shard="3"][data-phase="done"]');
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(external, []);
});
