import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { chromium } from 'playwright-core';
import { dashboardPage } from '../../packages/cli/src/dashboard/page.js';

// The page against the JSON contract alone (no cluster needed): `cluster status --json` as it may grow (per-server
// connections and replicas with their lag, per-shard rows), at the largest cluster size, and a failing endpoint.
const N = 8192;
const status = {
  version: 7,
  logicalShards: N,
  mappedShards: N,
  layout: 'instagram',
  targetSchemaVersion: 1,
  schemaVersions: { 1: N },
  servers: ['a', 'b', 'c', '<b>d</b>'].map((name, i) => ({
    name,
    url: `postgres://postgres:****@10.0.0.${i}:5432/app`,
    shards: N / 4,
    reachable: true,
    connections: 10 + i,
    replicas: [{ node: `${name}-r1`, lagBytes: 1024 * i }],
  })),
  warnings: ['a warning'],
  lastRestorePoint: {
    name: 'nightly-<b>1</b>',
    state: 'taken',
    startedAt: '2025-06-01T00:00:00.000Z',
    takenAt: '2025-06-01T00:00:00.010Z',
    lsns: { a: '0/3000158', b: '0/30001A0' },
    heldMs: 4.2,
    error: null,
  } as Record<string, unknown>,
  shards: Array.from({ length: N }, (_, i) => ({
    shard: i,
    server: ['a', 'b', 'c', '<b>d</b>'][Math.floor(i / (N / 4))],
    schema: `shard_${String(i).padStart(4, '0')}`,
    state: 'active',
    schemaVersion: 1,
    lastError: null,
    rows: i,
  })),
};
let failing = false;
const server = createServer((req, res) => {
  if (req.url === '/') {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(dashboardPage({ refreshMs: 100 }));
  } else if (failing) {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ error: { code: 'SERVER_UNREACHABLE', message: 'catalog server a: unreachable' } }),
    );
  } else {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(req.url === '/api/status' ? status : { phases: [], moves: [] }));
  }
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
  ],
});
after(async () => {
  await browser.close();
  server.close();
});

test('8192 shards in one compact map, a column for every server field status adds, text never taken as HTML, errors shown while polling goes on', async () => {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await page.goto(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  await page.waitForSelector('#servers tbody tr[data-server="c"]');

  const headers = await page.$$eval('#servers thead th', (ths) => ths.map((th) => th.textContent));
  assert.deepEqual(headers, ['server', 'shards', 'reachable', 'url', 'connections', 'replicas']);
  const lastRow = await page.$$eval('#servers tbody tr:last-child td', (tds) =>
    tds.map((td) => td.textContent),
  );
  assert.deepEqual(lastRow.slice(4), ['13', 'node <b>d</b>-r1, lag bytes 3072']);
  assert.equal(
    await page.$$eval('#servers b, #legend b', (bs) => bs.length),
    0,
    'a name is text, not markup',
  );

  assert.equal(await page.getAttribute('#map', 'data-shards'), String(N));
  const box = await page.$eval('#map', (c) => {
    const r = c.getBoundingClientRect();
    return { width: r.width, height: r.height };
  });
  assert.ok(box.width <= 1200 && box.height <= 600, `8192 shards fit ${box.width}×${box.height} px`);
  const options = await page.$$eval('#colour-by option', (os) => os.map((o) => o.getAttribute('value')));
  assert.deepEqual(options, ['', 'rows'], 'numeric shard fields are offered as colourings');
  await page.selectOption('#colour-by', 'rows');
  assert.match((await page.textContent('#warnings')) ?? '', /a warning/);
  assert.equal(
    await page.textContent('#restore-point'),
    'Last restore point nightly-<b>1</b>, taken 2025-06-01T00:00:00.010Z · a 0/3000158, b 0/30001A0',
  );
  status.lastRestorePoint = { ...status.lastRestorePoint, state: 'partial', lsns: { a: '0/3000158' } };
  await page.waitForSelector('#restore-point.bad');
  assert.match(
    (await page.textContent('#restore-point')) ?? '',
    /PARTIAL \(written on a 0\/3000158\): never restore to it/,
  );

  failing = true;
  await page.waitForSelector('#error:not([hidden])');
  assert.match((await page.textContent('#error')) ?? '', /SERVER_UNREACHABLE: catalog server a: unreachable/);
  assert.equal(await page.textContent('#live'), 'not updating');
  failing = false;
  await page.waitForSelector('#error', { state: 'hidden' });
  assert.match((await page.textContent('#live')) ?? '', /^live/);
});
