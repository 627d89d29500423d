// Makes docs/dashboard.png: three embedded servers, 1024 shards on a and b, shard 3 (20,000 rows) moving to c and
// held after its initial copy while headless Chromium takes the picture. Run after `npx tsc -p tsconfig.json`:
//   node scripts/dashboard-screenshot.mjs [shards] [out.png]

import { serveDashboard } from '@shardflake/cli';
import { startEmbeddedServers } from '@shardflake/embedded';
import { chromium } from 'playwright-core';
import { connect, initCluster, moveShard, validateConfig } from 'shardflake';

const shards = Number(process.argv[2] ?? 1024);
const out = process.argv[3] ?? 'docs/dashboard.png';
const servers = await startEmbeddedServers(3);
let browser;
try {
  const raw = {
    servers: Object.fromEntries(servers.slice(0, 2).map((s) => [s.name, s.url])),
    catalog: 'a',
    logicalShards: shards,
    epoch: '2024-01-01T00:00:00Z',
    tables: {
      photos: 'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL)',
    },
  };
  await initCluster(validateConfig(raw));
  // Server c joins empty, as before a rebalance.
  const config = validateConfig({ ...raw, servers: Object.fromEntries(servers.map((s) => [s.name, s.url])) });
  const a = await connect(servers[0].url);
  await a.query('INSERT INTO shard_0003.photos (user_id) SELECT g FROM generate_series(1, 20000) g');
  await a.end();
  const dashboard = await serveDashboard(config, { port: 0 });
  let release;
  const held = new Promise((r) => {
    release = r;
  });
  let reached;
  const atSynced = new Promise((r) => {
    reached = r;
  });
  const move = moveShard(config, 3, 'c', {
    afterStep: async (step) => {
      if (step !== 'synced') return;
      reached();
      await held;
    },
  });
  await atSynced;
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
    ],
  });
  const page = await browser.newPage({ viewport: { width: 1100, height: 820 } });
  await page.goto(dashboard.url);
  await page.waitForSelector('#moves tr.running');
  await page.screenshot({ path: out, fullPage: true });
  release();
  await move;
  await dashboard.close();
  console.log(`wrote ${out}`);
} finally {
  await browser?.close();
  await Promise.all(servers.map((s) => s.stop()));
}
