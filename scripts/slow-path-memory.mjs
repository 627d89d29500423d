#!/usr/bin/env node
// What a backend keeps per shard it writes (issue 33 item 2), for this build's generator and, with --before, an
// older build's (a copy of packages/shardflake/dist from another commit), installed side by side in one embedded
// server: --shards schemas per build, each with `items (id bigint PRIMARY KEY DEFAULT next_id(), v int)`. Then,
// per build, one fresh connection inserts one row into each schema (simple protocol, one statement each; the
// first row of a shard always takes the slow path) and at each checkpoint reads its backend's memory: the sum of
// pg_backend_memory_contexts (without the contexts of the view's own result), RssAnon from /proc/<pid>/status (read
// first), and the contexts that grew, grouped by name.
// (What the slow path costs per call: scripts/next-id-callgrind.sh, which does not depend on the machine's load.)
//
//   npm run build && node scripts/slow-path-memory.mjs [--before /tmp/v5-dist] [--shards 256,1024]
import { readFile } from 'node:fs/promises';
import { startEmbeddedServers } from '../packages/embedded/dist/index.js';
import { connect } from '../packages/shardflake/dist/postgres/connect.js';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const checkpoints = option('--shards', '256,1024').split(',').map(Number);
const shards = Math.max(...checkpoints);
const before = option('--before', null);

const builds = [
  { name: 'this build', prefix: 'after', dist: new URL('../packages/shardflake/dist/', import.meta.url) },
];
if (before)
  builds.unshift({ name: `before (${before})`, prefix: 'before', dist: new URL(`file://${before}/`) });

async function rssAnonKb(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/RssAnon:\s+(\d+) kB/.exec(status)?.[1]);
}

// Contexts that hold the view's own result (their size follows the number of contexts, not what the backend keeps).
const VIEW_ITSELF = new Set(['pg_get_backend_memory_contexts', 'tuplestore tuples', 'ExprContext']);

async function memory(client, pid) {
  // RssAnon first: the view's result would add its own peak.
  const rss = await rssAnonKb(pid);
  const { rows } = await client.query(
    `SELECT name, count(*)::int AS n, sum(total_bytes)::bigint AS bytes FROM pg_backend_memory_contexts GROUP BY name`,
  );
  const byName = new Map(
    rows.filter((r) => !VIEW_ITSELF.has(r.name)).map((r) => [r.name, { n: r.n, bytes: Number(r.bytes) }]),
  );
  const total = [...byName.values()].reduce((t, m) => t + m.bytes, 0);
  return { total, rssAnonKb: rss, byName };
}

const [server] = await startEmbeddedServers(1);
try {
  const admin = await connect(server.url);
  for (const build of builds) {
    const { generatorSqlParts, GENERATOR_VERSION } = await import(
      new URL('postgres/generator-sql.js', build.dist)
    );
    build.version = GENERATOR_VERSION;
    // In batches, objects first and seals after (as `cluster init` does), one transaction each.
    for (let from = 0; from < shards; from += 128) {
      const batch = Array.from({ length: Math.min(128, shards - from) }, (_, k) => from + k);
      const parts = batch.map((i) => ({
        i,
        ...generatorSqlParts({ schema: `${build.prefix}_${i}`, shard: i }),
      }));
      await admin.query(
        `BEGIN;\n${parts.map((p) => p.objects).join('')}${parts
          .map(
            (p) =>
              `${p.seal}CREATE TABLE ${build.prefix}_${p.i}.items (id bigint PRIMARY KEY DEFAULT ${build.prefix}_${p.i}.next_id(), v int);\n`,
          )
          .join('')}COMMIT;`,
      );
    }
  }
  const report = { date: new Date().toISOString(), shards: checkpoints, builds: [] };
  for (const build of builds) {
    const client = await connect(server.url);
    const {
      rows: [{ pid }],
    } = await client.query('SELECT pg_backend_pid() AS pid');
    const start = await memory(client, pid);
    const points = [];
    for (let i = 0; i < shards; i++) {
      await client.query(`INSERT INTO ${build.prefix}_${i}.items (v) VALUES (1)`);
      if (checkpoints.includes(i + 1)) {
        const now = await memory(client, pid);
        const grew = [...now.byName]
          .map(([name, m]) => ({
            name,
            n: m.n - (start.byName.get(name)?.n ?? 0),
            kB: Math.round((m.bytes - (start.byName.get(name)?.bytes ?? 0)) / 1024),
          }))
          .filter((g) => Math.abs(g.kB) >= 64)
          .sort((a, b) => b.kB - a.kB);
        points.push({
          shards: i + 1,
          contextsMB: +(now.total / 2 ** 20).toFixed(1),
          rssAnonMB: +(now.rssAnonKb / 1024).toFixed(1),
          contextsKBPerShard: Math.round((now.total - start.total) / 1024 / (i + 1)),
          rssAnonKBPerShard: Math.round((now.rssAnonKb - start.rssAnonKb) / (i + 1)),
          grew,
        });
      }
    }
    await client.end();
    report.builds.push({
      name: build.name,
      version: build.version,
      freshContextsMB: +(start.total / 2 ** 20).toFixed(1),
      freshRssAnonMB: +(start.rssAnonKb / 1024).toFixed(1),
      points,
    });
  }
  await admin.end();
  console.log(JSON.stringify(report, null, 2));
} finally {
  await server.stop();
}
