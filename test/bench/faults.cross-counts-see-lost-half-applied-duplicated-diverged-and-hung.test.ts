import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createRouter, type Router } from 'shardflake';
import {
  countReference,
  countTransfers,
  openAccounts,
  type Pair,
  REFERENCE_TABLES,
  startLoops,
  TRANSFER_TABLES,
  transfer,
  writeReference,
} from '../../packages/cli/src/bench/faults-cross.js';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import { initCluster } from '../../packages/shardflake/src/admin/init.js';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { connect } from '../../packages/shardflake/src/postgres/connect.js';
import { useServers } from '../support/postgres.js';

/**
 * The counts of bench faults' scenarios that write across servers (faults-cross.ts) see what they claim to: after a
 * few real transfers and reference writes, a transfer with one side deleted is half-applied, one with both sides
 * deleted is lost (and its accounts' balances no longer match their entries: diverged), one entered twice is
 * duplicated; a reference write missing from one copy is half-applied and the copies diverge; a call that never
 * returns is hung. A wrong count would pass a broken run.
 */
const [a, b] = (await useServers(2)) as [EmbeddedServer, EmbeddedServer];
const config = validateConfig(
  {
    servers: { a: a.url, b: b.url },
    catalog: 'a',
    logicalShards: 2,
    epoch: '2024-01-01T00:00:00Z',
    tables: TRANSFER_TABLES,
    referenceTables: REFERENCE_TABLES,
  },
  'faults-counts',
);
let router: Router;
before(async () => {
  await initCluster(config);
  router = await createRouter(config, { telemetry: false });
});
after(async () => {
  await router?.close();
});

async function on(server: EmbeddedServer, sql: string, values: unknown[] = []) {
  const c = await connect(server.url);
  try {
    return (await c.query(sql, values)).rows;
  } finally {
    await c.end();
  }
}

test('the transfer count sees a lost, a half-applied and a duplicated transfer, and balances out of step', async () => {
  const pairs = await openAccounts(router, [[0, 1]]);
  const loops = startLoops(1, 't.', (w, n, token) => transfer(router, pairs[w] as Pair, n, token));
  while ((await on(a, 'SELECT count(*)::int AS n FROM shard_0000.entries'))[0]?.n < 6)
    await new Promise((r) => setTimeout(r, 20));
  const log = await loops.stop();
  const clean = await countTransfers(config, pairs, log);
  assert.ok(clean.acknowledged >= 6);
  assert.deepEqual(
    [clean.lost, clean.halfApplied, clean.duplicated, clean.diverged, clean.hung],
    [0, 0, 0, 0, 0],
    clean.examples.join('; '),
  );
  const [lost, half, twice] = log.acknowledged.map((x) => x.token);
  // Lost: both sides gone (the balances still hold it: diverged too). Half: b's side gone. Twice: a's side again.
  await on(a, 'DELETE FROM shard_0000.entries WHERE token = $1', [lost]);
  await on(b, 'DELETE FROM shard_0001.entries WHERE token = $1', [lost]);
  await on(b, 'DELETE FROM shard_0001.entries WHERE token = $1', [half]);
  await on(
    a,
    'INSERT INTO shard_0000.entries (token, account, amount) SELECT token, account, 0 FROM shard_0000.entries WHERE token = $1',
    [twice],
  );
  const damaged = await countTransfers(config, pairs, log);
  assert.equal(damaged.lost, 1, damaged.examples.join('; '));
  assert.equal(damaged.halfApplied, 1);
  assert.equal(damaged.duplicated, 1);
  assert.ok(damaged.diverged >= 2, `both accounts are out of step: ${damaged.examples.join('; ')}`);
  assert.ok(damaged.examples.some((e) => e.startsWith(`LOST transfer ${lost}`)));
});

test('the reference count sees a write missing from one copy, and a call that never returns is hung', async () => {
  const loops = startLoops(2, 'r.', (_w, n, token) => writeReference(router, n, token));
  while (((await on(a, 'SELECT count(*)::int AS n FROM shardflake_reference.plans'))[0]?.n ?? 0) < 4)
    await new Promise((r) => setTimeout(r, 20));
  const log = await loops.stop();
  const token = log.acknowledged[0]?.token as string;
  await on(
    b,
    `BEGIN; SELECT shardflake_reference._shardflake_begin_write();
     DELETE FROM shardflake_reference.features WHERE token = '${token}'; COMMIT`,
  );
  const count = await countReference(config, ['a', 'b'], log, 2, ['plans differs on b']);
  assert.equal(count.lost, 0);
  assert.equal(count.halfApplied, 1, count.examples.join('; '));
  assert.equal(count.diverged, 1);

  const stuck = startLoops(1, 'h.', () => new Promise(() => {}), 200);
  const hung = await stuck.stop();
  assert.deepEqual(hung.hung, ['h.0-0']);
});
