import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { chromium } from 'playwright-core';
import { type InsertBenchResult, runInsertBench } from '../../packages/cli/src/bench/inserts.js';
import { renderReport } from '../../packages/cli/src/bench/report.js';
import { toJson } from '../../packages/cli/src/cli/commands/cluster.js';

const CHROMIUM = '/usr/bin/chromium';
const dir = await mkdtemp(join(tmpdir(), 'shardflake-report-'));
after(() => rm(dir, { recursive: true, force: true }));

// Browser-side code as text: the project compiles without the DOM library.
const CHART_SIZES = `[...document.querySelectorAll('figure.chart svg')].map((s) => {
  const box = s.getBoundingClientRect();
  return { width: box.width, height: box.height, marks: s.querySelectorAll('path, circle, rect, line').length };
})`;
/** Decodes a PNG in the page (a canvas) and counts its distinct colours, up to 50. */
const COUNT_COLOURS = `async (base64) => {
  const img = new Image();
  img.src = 'data:image/png;base64,' + base64;
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = img.width;
  canvas.height = img.height;
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const data = ctx.getImageData(0, 0, img.width, img.height).data;
  const seen = new Set();
  for (let i = 0; i < data.length && seen.size < 50; i += 4) seen.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
  return seen.size;
}`;

let result: InsertBenchResult;
let reportPath: string;

test('a tiny run on an embedded server gives a full result per type, as JSON', async () => {
  result = await runInsertBench({ rows: 300, types: ['bigserial', 'instagram', 'uuidv4'], batch: 50 });
  const [pg] = result.engines;
  assert.ok(pg);
  assert.equal(pg.engine, 'postgres');
  assert.deepEqual(pg.types.map((t) => t.type).sort(), ['bigserial', 'instagram', 'uuidv4']);
  for (const t of pg.types) {
    assert.equal(t.rows, 300);
    assert.ok(Number.isFinite(t.slopeNsPerRow) && Number.isFinite(t.interceptNs));
    assert.ok(
      t.slopeCi.low <= t.slopeNsPerRow && t.slopeNsPerRow <= t.slopeCi.high,
      `${t.type} slope in its CI`,
    );
    assert.ok(t.p50Us > 0 && t.p50Us <= t.p99Us);
    assert.ok(t.indexBytes >= 8192 && t.rowsPerSecond > 0);
    assert.ok((t.perRow.logBytes ?? 0) > 0, 'every insert writes WAL');
    assert.ok(t.points.length > 0 && t.points.length <= 500);
  }
  assert.ok(
    pg.notes.some((n) => n.includes('fits in shared_buffers')),
    'says what a tiny size cannot show',
  );
  const json = JSON.parse(toJson(result)) as InsertBenchResult;
  assert.equal(json.engines[0]?.types.length, 3);
  assert.equal(json.paper.UUID.ours, 'uuidv4');
});

test('the report is one self-contained HTML file with rendered charts and other benchmarks as sections', async () => {
  const html = await renderReport({
    inserts: result,
    sections: [
      {
        title: 'bench cluster',
        result: { inserts: { routerMedian: 900, directMedian: 1000 }, id: 12345678901234567890n },
        bars: {
          title: 'rows/s',
          values: [
            { label: 'router', value: 900 },
            { label: 'direct', value: 1000 },
          ],
        },
      },
    ],
  });
  assert.ok(html.startsWith('<!doctype html>'));
  assert.doesNotMatch(html, /<script|https?:\/\/(?!www\.w3\.org)/, 'no scripts, no external resources');
  assert.ok(
    (html.match(/<svg/g) ?? []).length >= 6,
    'latency, throughput, index, WAL, FPI and section charts',
  );
  assert.match(html, /12345678901234567890/);
  assert.match(html, /routerMedian/);
  reportPath = join(dir, 'report.html');
  await writeFile(reportPath, html);
});

test('the report renders in headless Chromium: charts have size and pixels that are not one colour', async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install chromium (.ci/run does)`);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    await page.goto(`file://${reportPath}`);
    const sizes = (await page.evaluate(CHART_SIZES)) as { width: number; height: number; marks: number }[];
    assert.ok(sizes.length >= 6);
    for (const s of sizes) assert.ok(s.width > 50 && s.height > 50 && s.marks > 3, JSON.stringify(s));
    const charts = await page.$$('figure.chart');
    for (const chart of [charts[0], charts[1]]) {
      assert.ok(chart);
      const png = await chart.screenshot();
      // Count the colours of the screenshot in the page itself (a canvas decodes the PNG).
      const colours = (await page.evaluate(
        `(${COUNT_COLOURS})(${JSON.stringify(png.toString('base64'))})`,
      )) as number;
      assert.ok(colours > 3, `a chart screenshot has ${colours} colours`);
    }
  } finally {
    await browser.close();
  }
});
