#!/usr/bin/env node
// What sealing one moved shard's old copy costs on a server holding many shards (issue 33, item 3; fence.ts): starts
// one embedded server, inits --shards logical shards (users + photos + a unique lookup on users.email), fences
// --fenced of them (the old copies and copies in the making a rebalance leaves on a server: the length of the list
// of every schema's fence function), then seals --seals of those one at a time, each in its own transaction as a
// set's finish does, and prints each seal's time. With --before DIR (the packages/shardflake/dist of another build,
// e.g. main's) it alternates that build's seal with this one's on the same server, so load changes hit both alike.
// Then times --ddl CREATE FUNCTIONs in a shard that did not move with no guard and each build's, and ALTER ROUTINE
// of routines whose names are in every shard, in every fenced copy, in one schema.
//
//   npm run build && node scripts/seal-cost.mjs [--shards 2048] [--fenced 16] [--seals 8] [--before DIR] [--ddl 20]
//     [--json]
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startEmbeddedServers } from '../packages/embedded/dist/index.js';
import { initCluster } from '../packages/shardflake/dist/admin/init.js';
import { shardSchema, validateConfig } from '../packages/shardflake/dist/config/config.js';
import { fencesSql, sealOldCopiesSql } from '../packages/shardflake/dist/fence/fence.js';
import { fenceGuardSql } from '../packages/shardflake/dist/fence/guard.js';
import { ddlPastGuard } from '../packages/shardflake/dist/move/ddl-guard.js';
import { connect } from '../packages/shardflake/dist/postgres/connect.js';

const args = process.argv.slice(2);
const option = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const shards = Number(option('--shards') ?? 2048);
const seals = Number(option('--seals') ?? 8);
const fenced = Math.max(Number(option('--fenced') ?? 16), seals * 2 + 2);
const beforeDir = option('--before');
const ddlRounds = Number(option('--ddl') ?? 20);
const json = args.includes('--json');

const builds = [{ name: 'this build', seal: sealOldCopiesSql, guard: fenceGuardSql }];
if (beforeDir) {
  const before = await import(pathToFileURL(resolve(beforeDir, 'fence/fence.js')).href);
  const beforeGuard = await import(pathToFileURL(resolve(beforeDir, 'fence/guard.js')).href);
  builds.unshift({ name: 'before', seal: before.sealOldCopiesSql, guard: beforeGuard.fenceGuardSql });
}

const [server] = await startEmbeddedServers(1);
try {
  const config = validateConfig(
    {
      servers: { a: server.url },
      catalog: 'a',
      logicalShards: shards,
      epoch: '2024-01-01T00:00:00Z',
      tables: {
        users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), email text, name text)',
        photos:
          'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
      },
      lookups: { user_email: { table: 'users', column: 'email', unique: true } },
    },
    'seal-cost',
  );
  const initStart = performance.now();
  await initCluster(config, { batchSize: 256 });
  const initSeconds = (performance.now() - initStart) / 1000;

  const client = await connect(server.url, { applicationName: 'seal-cost' });
  // Spread over the shard numbers, as a rebalance's old copies are.
  const schemas = Array.from({ length: fenced }, (_, k) =>
    shardSchema(config, Math.floor((k * shards) / fenced)),
  );
  const { rows } = await client.query(
    `SELECT n.nspname::text AS schema, array_agg(c.relname::text ORDER BY c.relname) AS tables
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ANY($1::text[]) AND c.relkind IN ('r', 'p') AND NOT c.relispartition GROUP BY 1`,
    [schemas],
  );
  for (let k = 0; k < rows.length; k += 64) {
    await ddlPastGuard(
      client,
      fencesSql(rows.slice(k, k + 64).map((r) => ({ schema: r.schema, tables: r.tables, message: 'moved' }))),
    );
  }

  // Alternate the builds, and which goes first in each round, after one seal not counted (the first makes the
  // fenced role and installs the guard).
  const times = new Map(builds.map((b) => [b.name, []]));
  let next = 0;
  await ddlPastGuard(client, sealOldCopiesSql([schemas[next++]]));
  for (let round = 0; round < seals; round++) {
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const build of order) {
      const schema = schemas[next++];
      const t0 = performance.now();
      await ddlPastGuard(client, build.seal([schema]));
      times.get(build.name).push(performance.now() - t0);
    }
  }
  // What the guard adds to DDL elsewhere on the server: a routine created in a shard that did not move, with no
  // guard and with each build's, in blocks (each after two calls not counted: a replaced guard is compiled again
  // at its first call), the blocks cycled twice.
  const guards = [
    { name: 'no guard', sql: 'ALTER EVENT TRIGGER shardflake_fence_guard_end DISABLE' },
    ...builds.map((b) => ({
      name: b.name,
      sql: `${b.guard()};\nALTER EVENT TRIGGER shardflake_fence_guard_end ENABLE ALWAYS`,
    })),
  ];
  const ddl = new Map(guards.map((g) => [g.name, []]));
  const live = shardSchema(config, 1);
  let probe = 0;
  for (let cycle = 0; cycle < 2; cycle++) {
    for (const guard of guards) {
      await client.query(guard.sql);
      for (let k = 0; k < ddlRounds / 2 + 2; k++) {
        const t0 = performance.now();
        await client.query(
          `CREATE FUNCTION "${live}".seal_cost_probe_${probe++}() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
        );
        if (k >= 2) ddl.get(guard.name).push(performance.now() - t0);
      }
    }
  }
  await client.query(`${fenceGuardSql()};\nALTER EVENT TRIGGER shardflake_fence_guard_end ENABLE ALWAYS`);
  // Why the fence function alone still costs something: ALTER ROUTINE of a routine (to its own owner: a lookup and
  // nothing else) right after a CREATE FUNCTION, which throws away every by-name list, by the length of its name's
  // list — next_id (one per shard), the fence function (one per fenced copy), a name one schema has.
  const probeSchema = schemas.at(-1); // fenced, never sealed
  await client.query(
    `CREATE FUNCTION "${probeSchema}".seal_cost_only_here() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
  );
  const alterBy = { next_id: [], _shardflake_fence: [], seal_cost_only_here: [] };
  for (let k = 0; k < ddlRounds; k++) {
    for (const name of Object.keys(alterBy)) {
      await client.query(
        `CREATE FUNCTION "${live}".seal_cost_probe_${probe++}() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
      );
      const t0 = performance.now();
      await client.query(`ALTER ROUTINE "${probeSchema}".${name}() OWNER TO CURRENT_USER`);
      alterBy[name].push(performance.now() - t0);
    }
  }
  const { rows: routines } = await client.query(
    `SELECT count(*)::int AS n FROM pg_proc WHERE pronamespace = $1::regnamespace`,
    [`"${schemas[0]}"`],
  );
  await client.end();

  const median = (list) => {
    const s = [...list].sort((x, y) => x - y);
    return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const result = {
    shards,
    fenced,
    seals,
    routinesPerShard: routines[0].n,
    initSeconds: Number(initSeconds.toFixed(1)),
    ddlRounds,
    alterRoutineMs: Object.fromEntries(
      Object.entries(alterBy).map(([name, ms]) => [name, Number(median(ms).toFixed(2))]),
    ),
    createFunctionMs: Object.fromEntries([...ddl].map(([name, ms]) => [name, Number(median(ms).toFixed(2))])),
    builds: builds.map((b) => ({
      name: b.name,
      medianMs: Number(median(times.get(b.name)).toFixed(2)),
      ms: times.get(b.name).map((t) => Number(t.toFixed(2))),
    })),
  };
  if (json) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(
      `${shards} shards on one server (init ${result.initSeconds} s, ${result.routinesPerShard} routines per shard), ${fenced} fenced, ${seals} seals per build`,
    );
    console.log(
      `  CREATE FUNCTION in a live shard, median of ${ddlRounds}: ${Object.entries(result.createFunctionMs)
        .map(([name, ms]) => `${name} ${ms} ms`)
        .join(', ')}`,
    );
    console.log(
      `  ALTER ROUTINE after a CREATE FUNCTION, median of ${ddlRounds}: ${Object.entries(
        result.alterRoutineMs,
      )
        .map(([name, ms]) => `${name} ${ms} ms`)
        .join(', ')}`,
    );
    for (const b of result.builds) {
      console.log(`  ${b.name}: median ${b.medianMs} ms per seal (${b.ms.join(', ')})`);
    }
  }
} finally {
  await server.stop();
}
