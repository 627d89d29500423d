import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createRouter, isShardflakeError, type Router, type RouterEvent } from 'shardflake';
import {
  type EmbeddedServer,
  startEmbeddedServers,
  stopEmbeddedServersOnSignals,
} from '../../packages/embedded/src/embedded.js';
import { validateConfig } from '../../packages/shardflake/src/cluster/config.js';
import { initCluster } from '../../packages/shardflake/src/cluster/init.js';
import {
  crashRouterAt,
  killServer,
  killServerNow,
  postmasterPid,
  preparedGids,
  restartServer,
  until,
} from './support.js';

// Servers are started here rather than by useServers: the tests kill them and start them again on their data
// directories, and the instances running at the end are the ones to stop.
stopEmbeddedServersOnSignals();
const started = await startEmbeddedServers(3);
const running = new Map<string, EmbeddedServer>(started.map((s) => [s.name, s]));
const urls = Object.fromEntries(started.map((s) => [s.name, s.url])) as Record<'a' | 'b' | 'c', string>;
const raw = {
  servers: urls,
  catalog: 'a', // a holds the catalog and shard 0; b shard 1; c shard 2
  logicalShards: 3,
  epoch: '2024-01-01T00:00:00Z',
  tables: { marks: 'CREATE TABLE marks (tag text NOT NULL)' },
};
const config = validateConfig(raw, 'test-config');
const dir = await mkdtemp(join(tmpdir(), 'shardflake-tx-'));
const configFile = join(dir, 'cluster.json');
let router: Router;
let onEvent: (event: RouterEvent) => void = () => {};

const server = (name: 'a' | 'b' | 'c') => running.get(name) as EmbeddedServer;
async function restart(name: 'a' | 'b' | 'c'): Promise<void> {
  running.set(name, await restartServer(server(name)));
}

/** On which shards the tag's row is visible (asking each server until it answers again after a restart). */
async function shardsWith(tag: string): Promise<number[]> {
  const found: number[] = [];
  for (let shard = 0; shard < 3; shard++) {
    let n = 0;
    await until(async () => {
      try {
        n = await router.withShard({ shard }, async (s) => {
          const { rows } = await s.query<{ n: bigint }>('SELECT count(*) AS n FROM marks WHERE tag = $1', [
            tag,
          ]);
          return Number(rows[0]?.n);
        });
        return true;
      } catch {
        return false; // a pooled connection to a restarted server fails once, and is dropped
      }
    });
    if (n > 0) found.push(shard);
  }
  return found;
}
const ours = async (name: 'a' | 'b' | 'c') =>
  (await preparedGids(urls[name])).filter((g) => g.startsWith('sf:'));

/** Recovery passes until `done` holds (a first pass may meet connections the pool still holds to a dead server). */
async function recoverUntil(done: () => Promise<boolean>) {
  const reports = [];
  for (let i = 0; i < 5 && !(await done()); i++) reports.push(await router.recoverTransactions());
  assert.ok(await done(), `recovery did not settle: ${JSON.stringify(reports)}`);
  return reports;
}

before(async () => {
  await writeFile(configFile, JSON.stringify(raw));
  await initCluster(config);
  router = await createRouter(config, {
    transactions: { recovery: false, inDoubtAfterMs: 0 },
    onEvent: (e) => onEvent(e),
  });
  // Warm: the router has read the cluster identity from the catalog.
  await router.withShards([{ shard: 1 }, { shard: 2 }], async () => {});
});
after(async () => {
  await router?.close();
  for (const s of running.values()) await s.stop();
  for (const s of started) await s.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('servers killed -9 in the middle of a commit across servers', () => {
  it('the catalog (the last agent) killed just before its decision COMMIT: COMMIT_UNKNOWN, then rolled back everywhere', async () => {
    const pid = await postmasterPid(server('a'));
    onEvent = (e) => {
      if (e.type === 'transaction' && e.phase === 'decide' && e.step === 'start') killServerNow(pid);
    };
    await assert.rejects(
      router.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
        await x?.query(`INSERT INTO marks VALUES ('k1')`);
        await y?.query(`INSERT INTO marks VALUES ('k1')`);
      }),
      (e) => isShardflakeError(e, 'COMMIT_UNKNOWN'),
    );
    onEvent = () => {};
    await killServer(server('a'), pid);
    const [gid] = await ours('b');
    assert.ok(gid, 'b stays prepared: the router may not guess the decision');

    // With the catalog down, transactions over other servers commit (their decision is on b) …
    await router.withShards([{ shard: 1 }, { shard: 2 }], async ([y, z]) => {
      await y?.query(`INSERT INTO marks VALUES ('k1-other')`);
      await z?.query(`INSERT INTO marks VALUES ('k1-other')`);
    });
    // … and recovery leaves b's gid alone: its decision server a does not answer.
    const report = await router.recoverTransactions();
    assert.deepEqual(
      report.waiting.map((g) => [g.gid, g.decision]),
      [[gid, 'unreachable']],
    );
    assert.ok(report.unreachable.some((u) => u.server === 'a'));
    assert.deepEqual(await ours('b'), [gid]);

    await restart('a');
    await recoverUntil(async () => (await ours('b')).length === 0);
    assert.deepEqual(await shardsWith('k1'), []);
    assert.deepEqual(await shardsWith('k1-other'), [1, 2]);
  });

  it('the decision survives its server killed -9 right after it committed', async () => {
    const pid = await postmasterPid(server('a'));
    onEvent = (e) => {
      if (e.type === 'transaction' && e.phase === 'decide' && e.step === 'done') killServerNow(pid);
    };
    // Committed: the decision returned before the kill, and COMMIT PREPARED on b needs nothing from a.
    await router.withShards([{ shard: 0 }, { shard: 1 }], async ([x, y]) => {
      await x?.query(`INSERT INTO marks VALUES ('k2')`);
      await y?.query(`INSERT INTO marks VALUES ('k2')`);
    });
    onEvent = () => {};
    await killServer(server('a'), pid);
    await restart('a');
    assert.deepEqual(await shardsWith('k2'), [0, 1]);
  });

  it('a participant killed -9 while it holds a prepared transaction comes back with it, and recovery commits it', async () => {
    await crashRouterAt(configFile, 'after-decision', [0, 1], 'k3');
    const [gid] = await ours('b');
    assert.ok(gid);
    await killServer(server('b'));
    await restart('b');
    assert.deepEqual(await ours('b'), [gid], 'the prepared transaction survived the crash of its server');
    assert.deepEqual(await shardsWith('k3'), [0]);
    await recoverUntil(async () => (await ours('b')).length === 0);
    assert.deepEqual(await shardsWith('k3'), [0, 1]);
  });
});
